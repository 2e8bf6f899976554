"""Retries and honest status: a failed call is tried again under a `RetryPolicy`, and a run
that converged with failures (or with effects rolled back) says so, in the result, the CLI
and the report."""

from __future__ import annotations

from pathlib import Path
from time import perf_counter

import anyio
import pytest

from converge import (
    AgentEffect,
    ConfigurationError,
    Context,
    ContextKey,
    Engine,
    InvariantClass,
    InvariantResult,
    ProposedFact,
    RetryPolicy,
    SqliteRunStore,
    StopReason,
    render_report,
)
from converge._core._record import RunRecord

H = ContextKey.HYPOTHESES
SEED = ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="test")


class Flaky:
    """Fails its first `fails` calls (or hangs, with `hang`), then proposes `hypotheses/h`."""

    name = "flaky"
    dependencies = (ContextKey.SEEDS,)

    def __init__(self, fails: int, *, hang: bool = False, retry: RetryPolicy | None = None):
        self.fails = fails
        self.hang = hang
        self.calls = 0
        if retry is not None:
            self.retry = retry

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(H, "h") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.calls += 1
        if self.calls <= self.fails:
            if self.hang:
                await anyio.sleep(10)
            raise RuntimeError(f"boom {self.calls}")
        proposal = ProposedFact(key=H, id="h", content="made it", provenance=self.name)
        return AgentEffect.with_proposals([proposal], tokens=2)


def attempts(result_trace_cycles: object) -> list[tuple[int, str, int]]:
    from converge import RunTrace

    assert isinstance(result_trace_cycles, RunTrace)
    return [
        (cycle.cycle, execution.outcome, execution.attempt)
        for cycle in result_trace_cycles.cycles
        for execution in cycle.executions
    ]


async def test_without_a_policy_a_failure_is_not_retried_and_the_result_says_so() -> None:
    engine = Engine()
    flaky = Flaky(1)
    engine.register_suggestor(flaky)
    result = await engine.run(inputs=[SEED])
    assert result.stop_reason is StopReason.CONVERGED
    assert flaky.calls == 1
    [failure] = result.failures
    assert (failure.suggestor, failure.error, failure.attempt) == (
        "flaky",
        "RuntimeError: boom 1",
        1,
    )
    assert not result.clean


async def test_a_failure_is_retried_next_cycle_until_it_succeeds() -> None:
    engine = Engine(retry=RetryPolicy(attempts=3))
    flaky = Flaky(2)
    engine.register_suggestor(flaky)
    result = await engine.run(inputs=[SEED])
    assert result.context.find(H, "h") is not None
    assert attempts(result.trace) == [(1, "failed", 1), (2, "failed", 2), (3, "ok", 3)]
    assert result.failures == ()
    assert result.clean
    assert result.tokens == 2


async def test_spent_attempts_leave_the_last_failure_in_the_result() -> None:
    engine = Engine(retry=RetryPolicy(attempts=3))
    engine.register_suggestor(Flaky(5))
    result = await engine.run(inputs=[SEED])
    assert attempts(result.trace) == [(1, "failed", 1), (2, "failed", 2), (3, "failed", 3)]
    [failure] = result.failures
    assert failure.attempt == 3
    assert result.stop_reason is StopReason.CONVERGED
    assert not result.clean


async def test_a_cycle_backoff_runs_quiet_cycles_that_count_against_the_budget() -> None:
    engine = Engine(retry=RetryPolicy(attempts=2, backoff_cycles=3))
    engine.register_suggestor(Flaky(1))
    result = await engine.run(inputs=[SEED])
    assert attempts(result.trace) == [(1, "failed", 1), (4, "ok", 2)]
    assert [cycle.eligible for cycle in result.trace.cycles[1:3]] == [(), ()]
    from converge import Budget

    tight = Engine(retry=RetryPolicy(attempts=2, backoff_cycles=3), budget=Budget(max_cycles=2))
    tight.register_suggestor(Flaky(1))
    stopped = await tight.run(inputs=[SEED])
    assert stopped.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED


async def test_a_seconds_backoff_waits_before_the_retry() -> None:
    engine = Engine(retry=RetryPolicy(attempts=2, backoff_seconds=0.3))
    engine.register_suggestor(Flaky(1))
    started = perf_counter()
    result = await engine.run(inputs=[SEED])
    assert perf_counter() - started >= 0.3
    assert attempts(result.trace) == [(1, "failed", 1), (2, "ok", 2)]


async def test_a_timed_out_call_is_retried_unless_the_policy_excludes_timeouts() -> None:
    engine = Engine(suggestor_timeout=0.05, retry=RetryPolicy(attempts=2))
    engine.register_suggestor(Flaky(1, hang=True))
    result = await engine.run(inputs=[SEED])
    assert attempts(result.trace) == [(1, "timed_out", 1), (2, "ok", 2)]
    only_failed = RetryPolicy(attempts=2, retry_on=frozenset({"failed"}))
    strict = Engine(suggestor_timeout=0.05, retry=only_failed)
    strict.register_suggestor(Flaky(1, hang=True))
    kept = await strict.run(inputs=[SEED])
    assert attempts(kept.trace) == [(1, "timed_out", 1)]
    assert [f.outcome for f in kept.failures] == ["timed_out"]


async def test_an_engine_policy_and_a_suggestors_own_apply_each_to_their_own() -> None:
    class Other(Flaky):
        name = "other"

        async def execute(self, ctx: Context, /) -> AgentEffect:
            self.calls += 1
            if self.calls <= self.fails:
                raise RuntimeError(f"other boom {self.calls}")
            proposal = ProposedFact(key=H, id="o", content="made it", provenance=self.name)
            return AgentEffect.with_proposals([proposal])

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.find(H, "o") is None

    engine = Engine(retry=RetryPolicy(attempts=3))
    own = Flaky(5, retry=RetryPolicy(attempts=1))  # its own: never tried again
    engine.register_suggestor(own)
    shared = Other(2)  # the engine's: three attempts
    engine.register_suggestor(shared)
    result = await engine.run(inputs=[SEED])
    assert own.calls == 1
    assert shared.calls == 3
    assert result.context.find(H, "o") is not None
    assert result.context.find(H, "h") is None
    assert [f.suggestor for f in result.failures] == ["flaky"]


async def test_a_suggestors_own_policy_overrides_the_engines() -> None:
    engine = Engine()
    engine.register_suggestor(Flaky(1, retry=RetryPolicy(attempts=2)))
    result = await engine.run(inputs=[SEED])
    assert attempts(result.trace) == [(1, "failed", 1), (2, "ok", 2)]

    class Wrong(Flaky):
        retry = 3

    with pytest.raises(ConfigurationError, match="'flaky': retry must be a RetryPolicy, got int"):
        Engine().register_suggestor(Wrong(0))


async def test_a_run_with_retries_replays_to_the_same_root() -> None:
    engine = Engine(retry=RetryPolicy(attempts=3), record_effects=True)
    engine.register_suggestor(Flaky(2))
    result = await engine.run(inputs=[SEED])
    replayer = Engine(retry=RetryPolicy(attempts=3))
    replayer.register_suggestor(Flaky(0))
    replayed = await replayer.replay(result.trace)
    assert replayed.integrity == result.integrity
    assert replayed.cycles == result.cycles


async def test_an_interrupted_retry_streak_continues_its_attempts(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.db")

    class Slow(Flaky):
        async def execute(self, ctx: Context, /) -> AgentEffect:
            if self.calls == 1:  # the second call: cancelled by the caller below
                await anyio.sleep(10)
            return await super().execute(ctx)

    engine = Engine(store=store, retry=RetryPolicy(attempts=3))
    engine.register_suggestor(Slow(2))
    with anyio.move_on_after(0.5):
        await engine.run(inputs=[SEED])
    [summary] = await store.list_runs()
    again = Engine(store=store, retry=RetryPolicy(attempts=3))
    again.register_suggestor(Flaky(1))  # fails once more, then succeeds
    result = await again.resume_run(summary.run_id)
    assert attempts(result.trace) == [(1, "failed", 1), (2, "failed", 2), (3, "ok", 3)]
    assert result.clean


class NoH:
    name = "no-h"
    invariant_class = InvariantClass.STRUCTURAL

    def check(self, ctx: Context, /) -> InvariantResult:
        if ctx.find(H, "h") is not None:
            return InvariantResult.violated("h is not allowed")
        return InvariantResult.ok()


async def test_a_rolled_back_effect_is_not_a_clean_convergence() -> None:
    engine = Engine()
    engine.register_suggestor(Flaky(0))
    engine.register_invariant(NoH())
    result = await engine.run(inputs=[SEED])
    assert result.stop_reason is StopReason.CONVERGED
    [violation] = result.rolled_back
    assert violation.invariant == "no-h"
    assert not result.clean


def test_the_report_badge_is_not_green_for_a_run_with_failures() -> None:
    engine = Engine()
    engine.register_suggestor(Flaky(1))
    record = RunRecord.of(engine.run_sync(inputs=[SEED]))
    page = render_report(record)
    assert 'class="badge stop-converged_with_failures" data-stop-reason="converged"' in page
    assert "converged with failures" in page
    engine = Engine()
    engine.register_suggestor(Flaky(0))
    clean = render_report(RunRecord.of(engine.run_sync(inputs=[SEED])))
    assert 'class="badge stop-converged" data-stop-reason="converged"' in clean


FORMATION = """
from converge import AgentEffect, ContextKey, Formation, ProposedFact, RetryPolicy

class Broken:
    name = "broken"
    dependencies = (ContextKey.SEEDS,)
    def accepts(self, ctx):
        return True if ctx.count(ContextKey.HYPOTHESES) == 0 else False
    async def execute(self, ctx):
        raise RuntimeError("the model is down")

formation = Formation(
    name="broken",
    suggestors=(Broken(),),
    inputs=(ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="t"),),
)
"""


def test_the_cli_exits_9_for_a_run_that_converged_with_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_runs import cli

    from converge._cli._output import FAILURES

    formation = tmp_path / "broken.py"
    formation.write_text(FORMATION, encoding="utf-8")
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", str(formation))
    assert code == FAILURES == 9
    assert "failures     1 call(s) failed and were not made good:" in out
    assert "  broken (execute, cycle 1, attempt 1, failed): RuntimeError: the model is down" in out
    assert "converged, but with failures: exit status 9 (--allow-failures exits 0)" in out
    warned = capsys.readouterr().err.splitlines()
    assert any(
        line.startswith("warning: suggestor_failed ")
        and "suggestor=broken" in line
        and "error=RuntimeError: the model is down" in line
        for line in warned
    ), warned
    code, _ = cli("--store", store, "run", str(formation), "--allow-failures")
    assert code == 0
    run_id = next(line.split()[2] for line in out.splitlines() if line.startswith("saved run"))
    code, shown = cli("--store", store, "show", run_id)
    assert code == 0
    assert "RuntimeError: the model is down" in shown
