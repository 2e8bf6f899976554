"""Budgets: every limit is enforced with its stop reason and detail, keeping partial work."""

import time
from datetime import UTC, datetime

import anyio
import pytest

from converge import (
    AgentEffect,
    Budget,
    BudgetExhaustedError,
    Context,
    ContextKey,
    Engine,
    ProposedFact,
    StopReason,
)
from converge._core._budget import Stopwatch

HYPOTHESES = ContextKey.HYPOTHESES


class Grower:
    """Adds `per_cycle` new facts every cycle, reporting `tokens` each time."""

    def __init__(self, per_cycle: int = 1, tokens: int = 0) -> None:
        self.name = "grower"
        self.dependencies = ()
        self.per_cycle = per_cycle
        self.tokens = tokens

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        start = ctx.count(HYPOTHESES)
        return AgentEffect.with_proposals(
            (
                ProposedFact(key=HYPOTHESES, id=f"h{start + i}", content="c", provenance="g")
                for i in range(self.per_cycle)
            ),
            tokens=self.tokens,
        )


def test_budget_defaults() -> None:
    budget = Budget()
    assert (budget.max_cycles, budget.max_facts, budget.max_seconds, budget.max_tokens) == (
        100,
        10_000,
        None,
        None,
    )


async def test_run_stops_with_cycle_budget_exhausted_after_max_cycles() -> None:
    engine = Engine(budget=Budget(max_cycles=3))
    engine.register_suggestor(Grower())
    result = await engine.run()
    assert result.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert result.detail == "max_cycles (3)"
    assert result.cycles == 3
    assert result.context.count(HYPOTHESES) == 3
    assert not result.converged
    with pytest.raises(BudgetExhaustedError):
        result.raise_for_status()


async def test_run_stops_with_fact_budget_exhausted_counting_every_fact() -> None:
    engine = Engine(budget=Budget(max_facts=25))
    engine.register_suggestor(Grower(per_cycle=10))
    result = await engine.run()
    assert result.stop_reason is StopReason.FACT_BUDGET_EXHAUSTED
    assert result.detail == "max_facts (30 > 25)"
    assert result.cycles == 3
    assert len(result.context) == 30


async def test_fact_budget_counts_inputs_and_starting_facts() -> None:
    engine = Engine(budget=Budget(max_facts=2))
    engine.register_suggestor(Grower(per_cycle=1))
    inputs = [
        ProposedFact(key=ContextKey.SEEDS, id=f"s{i}", content="c", provenance="t")
        for i in range(2)
    ]
    result = await engine.run(inputs=inputs)
    assert result.detail == "max_facts (3 > 2)"
    assert result.cycles == 1


async def test_run_stops_with_token_budget_exhausted() -> None:
    engine = Engine(budget=Budget(max_tokens=250))
    engine.register_suggestor(Grower(tokens=100))
    result = await engine.run()
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert result.detail == "max_tokens (300 > 250)"
    assert result.tokens == 300
    assert result.cycles == 3


async def test_time_budget_cancels_in_flight_suggestors_and_keeps_the_last_snapshot() -> None:
    class Sleeper:
        name = "sleeper"
        dependencies = (ContextKey.SEEDS,)

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            await anyio.sleep(30)
            return AgentEffect.empty()

    engine = Engine(budget=Budget(max_seconds=0.2))
    engine.register_suggestor(Sleeper())
    seed = ProposedFact(key=ContextKey.SEEDS, id="s", content="c", provenance="t")
    with anyio.fail_after(5):
        result = await engine.run(inputs=[seed])
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert result.detail.startswith("max_seconds (")
    assert result.detail.endswith(" > 0.2)")
    assert result.cycles == 1
    assert result.context.find(ContextKey.SEEDS, "s") is not None
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "timed_out"
    assert execution.error == "cancelled: time budget exhausted"


async def test_time_budget_is_checked_after_the_merge() -> None:
    class SlowGrower(Grower):
        async def execute(self, ctx: Context, /) -> AgentEffect:
            await anyio.sleep(0.03)
            return await super().execute(ctx)

    engine = Engine(budget=Budget(max_seconds=0.1, max_cycles=1000))
    engine.register_suggestor(SlowGrower())
    result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert result.context.count(HYPOTHESES) >= 1


@pytest.mark.parametrize(
    "fields",
    [{"max_cycles": 0}, {"max_facts": -1}, {"max_seconds": 0}, {"max_tokens": -5}],
)
def test_budget_refuses_out_of_range_limits(fields: dict[str, object]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Budget.model_validate(fields)


async def test_time_budget_keeps_the_records_of_suggestors_that_finished() -> None:
    class Quick:
        name = "quick"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect(tokens=5)

    class Slow(Quick):
        name = "slow"

        async def execute(self, ctx: Context, /) -> AgentEffect:
            await anyio.sleep(30)
            return AgentEffect.empty()

    engine = Engine(budget=Budget(max_seconds=0.2))
    engine.register_suggestor(Quick())
    engine.register_suggestor(Slow())
    with anyio.fail_after(5):
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    quick, slow = result.trace.cycles[0].executions
    assert (quick.suggestor, quick.outcome) == ("quick", "ok")
    assert (slow.suggestor, slow.outcome) == ("slow", "timed_out")
    assert result.tokens == 5


async def test_fact_budget_is_checked_after_the_inputs() -> None:
    engine = Engine(budget=Budget(max_facts=2))
    inputs = [
        ProposedFact(key=ContextKey.SEEDS, id=f"s{i}", content="c", provenance="t")
        for i in range(5)
    ]
    result = await engine.run(inputs=inputs)
    assert result.stop_reason is StopReason.FACT_BUDGET_EXHAUSTED
    assert result.detail == "max_facts (5 > 2)"
    assert result.cycles == 0
    assert len(result.context) == 5


def test_the_stopwatch_tells_a_readings_wall_clock_and_run_time() -> None:
    before = time.time()
    watch = Stopwatch(2.0)
    reading = time.perf_counter()
    wall, run = watch.at(reading)
    after = time.time()
    assert before - 0.01 <= wall <= after + 0.01
    assert 2.0 <= run <= 2.0 + (after - before) + 0.01
    later_wall, later_run = watch.at(reading + 1.5)
    assert later_wall - wall == pytest.approx(1.5)
    assert later_run - run == pytest.approx(1.5)


async def test_each_cycle_is_stamped_in_order_within_the_run() -> None:
    engine = Engine(budget=Budget(max_cycles=4))
    engine.register_suggestor(Grower())
    before = datetime.now(UTC)
    result = await engine.run()
    after = datetime.now(UTC)
    cycles = result.trace.cycles
    assert len(cycles) == 4
    starts = [c.started_at for c in cycles if c.started_at is not None]
    runs = [c.at_seconds for c in cycles if c.at_seconds is not None]
    assert len(starts) == len(runs) == 4
    assert all(before <= start <= after for start in starts)
    assert starts == sorted(starts)
    assert runs == sorted(runs)
    first, last = cycles[0], cycles[-1]
    assert first.started_at is not None
    assert last.started_at is not None
    assert first.at_seconds is not None
    assert last.at_seconds is not None
    apart = (last.started_at - first.started_at).total_seconds()
    assert apart == pytest.approx(last.at_seconds - first.at_seconds, abs=1e-5)
