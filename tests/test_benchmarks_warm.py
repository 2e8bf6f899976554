"""`benchmarks._common.warm_run` and the cold start W1 and W4 report beside their figures;
`read_proof` and the proof's first read W1, W2 and W3 report beside theirs."""

import gc
from typing import cast

import pytest

from benchmarks import fanout, wide_idle
from benchmarks._common import Settings, read_proof, warm_run
from converge import ConvergeResult, verify


async def test_a_warm_run_is_timed_checked_and_starts_from_collected_young_garbage() -> None:
    engine = wide_idle.build_engine(1)
    at_start: list[tuple[int, int, int]] = []
    checked: list[ConvergeResult] = []

    async def run() -> ConvergeResult:
        at_start.append(gc.get_count())
        return await engine.run(inputs=[wide_idle.START])

    def check(result: ConvergeResult) -> int:
        checked.append(result)
        return wide_idle.check(result)

    gc.collect(0)
    junk: list[list[object]] = [[] for _ in range(300)]
    for item in junk:
        item.append(item)  # young cycles: only a collection frees them
    del junk
    assert gc.get_count()[0] > 100
    seconds = await warm_run(run, check)
    assert seconds > 0
    assert len(checked) == 1  # its result was checked, once
    young, middle, _ = at_start[0]
    assert young < 10  # the young generations were collected just before it
    assert middle == 0


async def test_a_warm_run_that_did_not_run_as_designed_is_an_error() -> None:
    engine = wide_idle.build_engine(1)

    def wrong(result: ConvergeResult) -> int:
        raise RuntimeError(f"W4 did not run as designed: {len(result.context)} facts")

    with pytest.raises(RuntimeError, match="W4 did not run as designed: 101 facts"):
        await warm_run(lambda: engine.run(inputs=[wide_idle.START]), wrong)


def test_w4_reports_its_warm_figures_and_the_cold_start_per_run() -> None:
    figures = wide_idle.measure(Settings(runs=2, warmups=0, quick=True))
    warm = cast("dict[str, float]", figures["warm_us_per_cycle"])
    cold = cast("dict[str, float]", figures["cold_start_us_per_run"])
    assert set(warm) == set(cold) == {str(size) for size in wide_idle.SIZES}
    assert all(value > 0 for value in warm.values())
    assert all(isinstance(value, float) for value in cold.values())


async def test_reading_the_proof_is_timed_once_and_gives_the_runs_own_proof() -> None:
    result = await wide_idle.build_engine(1).run(inputs=[wide_idle.START])
    seconds = read_proof(result)
    assert seconds > 0
    proof = result.integrity
    assert read_proof(result) < seconds  # kept: the second read builds nothing
    assert result.integrity is proof
    assert proof.fact_count == len(result.context)
    assert verify(result.context, proof)


def test_w2_reports_the_proofs_first_read_beside_its_wall_time() -> None:
    figures = fanout.measure(Settings(runs=2, warmups=0, quick=True))
    proof = figures["proof_read_ms"]
    assert isinstance(proof, float)
    assert 0 < proof < cast("float", figures["wall_ms"])
