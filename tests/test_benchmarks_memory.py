"""`benchmarks._common.traced_memory`: what a run's result keeps, checked against its trace."""

import pytest

from benchmarks import wide_idle
from benchmarks._common import traced_memory
from converge import ConvergeResult


async def test_a_result_keeps_its_facts_and_more_once_its_trace_is_read() -> None:
    engine = wide_idle.build_engine(1)
    memory = await traced_memory(lambda: engine.run(inputs=[wide_idle.START]), wide_idle.check)
    # 101 facts are kept (each well over 300 bytes), and reading the trace builds its cycles
    assert memory.retained > 101 * 300
    assert memory.with_trace > memory.retained
    assert memory.peak >= memory.retained
    assert memory.peak_reading > 0


async def test_a_trace_that_does_not_hold_the_counted_cycles_is_an_error() -> None:
    engine = wide_idle.build_engine(1)

    def miscounted(result: ConvergeResult) -> int:
        return wide_idle.check(result) + 1

    with pytest.raises(RuntimeError, match="the run's trace has 101 cycles, not 102"):
        await traced_memory(lambda: engine.run(inputs=[wide_idle.START]), miscounted)
