"""The cyclic collector: off inside `paused_collector`; during a run, what each cycle left
frozen out of its walks and moved back at the run's end."""

from __future__ import annotations

import gc
import weakref

import anyio
import pytest

from converge import AgentEffect, Context, ContextKey, Engine, ProposedFact, StopReason
from converge._core._collector import LongLived, paused_collector, settle
from converge._kernel._state import RunState
from converge_suggestors import SeedSuggestor


def _fail_inside() -> None:
    with paused_collector():
        assert not gc.isenabled()
        raise RuntimeError("boom")


def test_paused_collector_turns_the_collector_back_on_even_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"):
        _fail_inside()
    assert gc.isenabled()


def test_paused_collector_leaves_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


# -- LongLived and settle: what a run does with the collector ------------------------------

STARTS_FROZEN = gc.get_freeze_count() > 0
"""CPython 3.12 starts with objects frozen (its static types' bases and MROs): converge then
leaves the collector alone, as it does for any process that froze objects itself
(`test_a_process_that_froze_objects_itself_keeps_them_frozen_and_runs_unfrozen`)."""
needs_nothing_frozen = pytest.mark.skipif(
    STARTS_FROZEN,
    reason="this interpreter starts with objects frozen (CPython 3.12), so runs leave the "
    "collector alone; run on CPython 3.11 or 3.13 to see runs freeze",
)


class _Cyclic:
    """An object in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


class _Counter:
    """One fact a cycle until `cycles`; notes the frozen count each cycle, and leaves one
    piece of cyclic garbage behind each time."""

    name = "counter"
    dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

    def __init__(self, cycles: int = 4, delay: float = 0.0) -> None:
        self.cycles = cycles
        self.delay = delay
        self.third: anyio.Event | None = None
        """Set once the third cycle ran, when given."""
        self.frozen: list[int] = []
        self.garbage: list[weakref.ref[_Cyclic]] = []

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) < self.cycles

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.frozen.append(gc.get_freeze_count())
        self.garbage.append(weakref.ref(_Cyclic()))
        if self.third is not None and len(self.frozen) == 3:
            self.third.set()
        if self.delay:
            await anyio.sleep(self.delay)
        done = ctx.count(ContextKey.HYPOTHESES)
        return AgentEffect.with_proposals(
            [ProposedFact(key=ContextKey.HYPOTHESES, id=f"h-{done}", content="c", provenance="x")]
        )


def _engine(counter: _Counter) -> Engine:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s", "go"))
    engine.register_suggestor(counter)
    return engine


@needs_nothing_frozen
def test_a_run_freezes_what_each_cycle_left_and_moves_it_back_at_its_end() -> None:
    assert gc.get_freeze_count() == 0
    counter = _Counter()
    result = _engine(counter).run_sync()
    assert result.stop_reason is StopReason.CONVERGED
    assert counter.frozen[0] > 0  # the seed's cycle was merged, then frozen
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert [ref() for ref in counter.garbage] == [None] * len(counter.garbage)


@needs_nothing_frozen
def test_a_failed_run_moves_back_what_it_froze() -> None:
    class Boom:
        name = "boom"
        dependencies = (ContextKey.HYPOTHESES,)

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.count(ContextKey.HYPOTHESES) == 2

        async def execute(self, ctx: Context, /) -> AgentEffect:
            raise KeyboardInterrupt

    engine = _engine(_Counter())
    engine.register_suggestor(Boom())
    with pytest.raises(BaseException):  # noqa: B017, PT011 - a suggestor's BaseException
        engine.run_sync()
    assert gc.get_freeze_count() == 0


@needs_nothing_frozen
def test_a_cancelled_run_moves_back_what_it_froze() -> None:
    async def main() -> None:
        class Sleeper:
            name = "sleeper"
            dependencies = (ContextKey.HYPOTHESES,)

            def accepts(self, ctx: Context, /) -> bool:
                return ctx.count(ContextKey.HYPOTHESES) == 2

            async def execute(self, ctx: Context, /) -> AgentEffect:
                await anyio.sleep(10)
                return AgentEffect()

        engine = _engine(_Counter())
        engine.register_suggestor(Sleeper())
        with anyio.move_on_after(0.2):
            await engine.run()
        assert gc.get_freeze_count() == 0

    anyio.run(main)


@needs_nothing_frozen
def test_concurrent_runs_share_the_switch_and_the_last_to_end_moves_it_back() -> None:
    short, long = _Counter(2), _Counter(8, delay=0.02)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            long.third = third = anyio.Event()
            group.start_soon(_engine(long).run)
            await third.wait()
            await _engine(short).run()
            assert len(long.frozen) < 8  # the long run still holds the switch
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0

    anyio.run(main)
    assert short.frozen[1] > 0
    assert long.frozen[-1] > 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen_and_runs_unfrozen() -> None:
    kept = _Cyclic()
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        counter = _Counter()
        _engine(counter).run_sync()
        assert max(counter.frozen) <= before  # the run froze nothing
        assert all(o is not kept for o in gc.get_objects())  # nor unfroze the process's
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


@needs_nothing_frozen
def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    try:
        counter = _Counter()
        _engine(counter).run_sync()
        assert counter.frozen == [0] * len(counter.frozen)
        assert not gc.isenabled()
    finally:
        gc.enable()


@needs_nothing_frozen
def test_settle_outside_a_run_freezes_nothing() -> None:
    settle()
    assert gc.get_freeze_count() == 0
    with LongLived():
        settle()
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


@needs_nothing_frozen
def test_the_records_a_runs_end_keeps_are_frozen_with_what_the_cycles_left() -> None:
    # A stored run's end check builds a record of every fact, which the run keeps: the
    # collector is held off while they are built, and they are frozen with the rest.
    context = _engine(_Counter(cycles=60)).run_sync().context
    state = RunState.start(context, ())
    assert gc.get_freeze_count() == 0
    with LongLived():
        assert state.changed_facts(keep=True) is None
        assert gc.isenabled()
        records = state.facts
        assert records is not None
        assert len(records) == len(context) == 61
        walked = {id(one) for generation in range(3) for one in gc.get_objects(generation)}
        kept = [records[0], records[-1], records[-1].promotion]
        assert all(gc.is_tracked(one) and id(one) not in walked for one in kept)
    assert gc.get_freeze_count() == 0


def test_the_records_a_runs_end_keeps_outside_a_run_are_left_to_the_collector() -> None:
    context = _engine(_Counter(cycles=3)).run_sync().context
    state = RunState.start(context, ())
    before = gc.get_freeze_count()
    assert state.changed_facts(keep=True) is None
    assert gc.isenabled()
    assert gc.get_freeze_count() == before
