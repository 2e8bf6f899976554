"""The cycle log: each cycle's trace is built on its first read, kept, and never changes."""

import gc
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    CycleTrace,
    Engine,
    ProposedFact,
    RunTrace,
)
from converge._core._seal import Stamp
from converge._kernel._calls import Slot, failure
from converge._kernel._cycle_log import CycleLog, Recorded
from converge._kernel._registry import Registration, Registry
from converge_suggestors import SeedSuggestor
from tests.doubles import fact

S = ContextKey.SEEDS


class Stepper:
    """Proposes `step-n` for n = count(SEEDS), while fewer than `limit` seeds exist."""

    name = "stepper"
    dependencies: Sequence[ContextKey] = (S,)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(S) < self.limit

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(S)
        return AgentEffect.with_proposal(
            ProposedFact(key=S, id=f"step-{n}", content=f"step {n}", provenance=self.name)
        )


def _registration() -> Registration:
    registry = Registry()
    registry.add(SeedSuggestor("seed", "x"), None)  # named seed:seeds/seed
    return registry.view().registrations[0]


class Clock:
    """Tells a reading's times as the run's stopwatch would: a start at 1e9 s, 0.25 s before."""

    def at(self, reading: float, /) -> tuple[float, float]:
        return 1.0e9 + reading, 0.25 + reading


def _record(log: CycleLog, cycle: int) -> None:
    reg = _registration()
    promoted = [Stamp("seed", 0, "engine", None).promote(fact(S, f"f-{cycle}"), cycle, cycle)]
    log.record(cycle, frozenset({S}), (reg,), (), promoted, [], [], (), True, Clock(), 0.25)


def test_a_cycle_is_built_on_its_first_read_and_kept() -> None:
    log = CycleLog()
    _record(log, 1)
    _record(log, 2)
    first = log[0]
    assert isinstance(first, CycleTrace)
    assert first.cycle == 1
    assert first.promoted == ("seeds/f-1",)
    assert first.eligible == ("seed:seeds/seed",)
    assert first.dirty == (S,)
    assert first.started_at == datetime.fromtimestamp(1.0e9 + 0.25, UTC)
    assert first.at_seconds == 0.5
    assert first.rejected == ()
    assert first.held == ()
    assert log[0] is first  # kept, not built again
    assert log[-1].cycle == 2
    assert log[0:2] == (first, log[1])
    assert tuple(log) == (first, log[1])
    assert [trace.cycle for trace in log] == [1, 2]


def test_the_log_keeps_its_own_copy_of_the_promoted_facts() -> None:
    reg = _registration()
    promoted = [Stamp("seed", 0, "engine", None).promote(fact(S, "f"), 1, 1)]
    log = CycleLog()
    log.record(1, frozenset({S}), (reg,), (), promoted, [], [], (), True, None, 0.0)
    promoted.clear()  # the merger's list, reused or changed after the cycle
    assert log[0].promoted == ("seeds/f",)
    assert (log[0].started_at, log[0].at_seconds) == (None, None)


@pytest.mark.parametrize(("eligible", "refused", "facts"), [(0, 0, 0), (1, 0, 1), (2, 1, 3)])
def test_a_cycles_record_reads_back_every_part_in_order(
    eligible: int, refused: int, facts: int
) -> None:
    # The record is one flat tuple; its parts (eligible, calls, facts) must come back whole,
    # in order, and apart, however many of each there are.
    registry = Registry()
    for index in range(3):
        registry.add(SeedSuggestor(f"s{index}", "x"), None)
    regs = registry.view().registrations
    ran = [Slot(reg) for reg in regs[:eligible]]
    for slot in ran:
        slot.succeeded(AgentEffect.empty(), 1.0, 1.5, recorder=None)
    failed = [
        failure(reg, "failed", 0.0, ValueError("no"), phase="accepts") for reg in regs[2:][:refused]
    ]
    calls = [*(slot.returned for slot in ran if slot.returned is not None), *failed]
    stamp = Stamp("s0", 0, "engine", None)
    promoted = [stamp.promote(fact(S, f"f-{n}"), 1, n + 1) for n in range(facts)]
    log = CycleLog()
    log.record(1, frozenset({S}), regs[:eligible], calls, promoted, [], [], (), True, None, 0.0)
    pending = log._entries[0]  # pyright: ignore[reportPrivateUsage]
    assert type(pending) is tuple  # one flat plain tuple
    read = Recorded.of(pending)
    assert (read.cycle, read.dirty, read.merged, read.started) == (1, frozenset({S}), True, 0.0)
    assert list(read.eligible) == list(regs[:eligible])
    assert list(read.calls) == calls
    assert list(read.promoted) == promoted
    trace = log[0]
    assert trace.eligible == tuple(reg.name for reg in regs[:eligible])
    assert [(e.suggestor, e.outcome, e.phase) for e in trace.executions] == [
        *((reg.name, "ok", "execute") for reg in regs[:eligible]),
        *((reg.name, "failed", "accepts") for reg in regs[2:][:refused]),
    ]
    assert trace.promoted == tuple(f"seeds/f-{n}" for n in range(facts))


def _kept_by_a_run(cycles: int) -> int:
    """How many objects the collector still tracks, after a full collection, of those a run of
    `cycles` cycles leaves behind (a collection stops tracking a tuple or dict of atoms)."""
    engine = Engine()
    engine.register_suggestor(Stepper(cycles))
    engine.run_sync(inputs=[START])  # warm: stamps, caches
    gc.collect()
    # `alive` holds every object tracked before the run, so none of them is freed during it
    # and no new object can take its address: an id seen before is the same object.
    alive = gc.get_objects()
    before = {id(o) for o in alive}
    result = engine.run_sync(inputs=[START])
    gc.collect()
    kept = sum(1 for o in gc.get_objects() if id(o) not in before)
    del alive
    assert len(result.context) == cycles
    return kept


def test_a_cycle_keeps_four_tracked_objects_with_its_one_fact() -> None:
    # One tuple for the cycle's record, one for what its call returned, and its fact (the
    # fact and its fields; its promotion record's values are a tuple of atoms, which the
    # collector stops tracking): each one kept is walked by every young collection while the
    # run lasts, so the record keeps its sequences in its own tuple.
    per_cycle = (_kept_by_a_run(40) - _kept_by_a_run(10)) / 30
    assert per_cycle <= 4


def test_replacing_the_last_cycle_keeps_the_others() -> None:
    log = CycleLog()
    _record(log, 1)
    _record(log, 2)
    first = log[0]
    changed = log[1].model_copy(update={"held": ("gate:2:seeds/x",)})
    log.replace_last(changed)
    assert log[1] is changed
    assert log[0] is first
    assert len(log) == 2


START = ProposedFact(key=S, id="start", content="start", provenance="test")
CLOCKS = {  # what differs between two runs of the same suggestors: the times
    "cycles": {
        "__all__": {
            "started_at": True,
            "at_seconds": True,
            "executions": {"__all__": {"duration_ms"}},
        }
    }
}


async def test_the_result_trace_is_built_once_and_holds_only_its_own_run() -> None:
    engine = Engine()
    engine.register_suggestor(Stepper(limit=4))
    first = await engine.run(inputs=[START])
    second = await engine.run(first.context, inputs=[START])  # the same engine, later
    trace = first.trace
    assert isinstance(trace, RunTrace)
    assert first.trace is trace
    assert [cycle.promoted for cycle in trace.cycles] == [
        ("seeds/step-1",),
        ("seeds/step-2",),
        ("seeds/step-3",),
        (),
    ]
    assert [cycle.promoted for cycle in second.trace.cycles] == [()]
    assert trace.final_root == first.integrity.merkle_root


async def test_a_trace_read_late_equals_one_read_at_once() -> None:
    engine = Engine()
    engine.register_suggestor(Stepper(limit=5))
    early = await engine.run(inputs=[START])
    read_at_once = early.trace.model_dump(mode="json", exclude=CLOCKS)
    late = await engine.run(inputs=[START])
    for _ in range(3):  # other runs in between share nothing with it
        await engine.run(inputs=[START])
    read_late = late.trace.model_dump(mode="json", exclude=CLOCKS)
    assert read_late["cycles"] == read_at_once["cycles"]
    assert len(read_late["cycles"]) == 5
