"""`Formation.suggestor_timeout`, and the default deadline of the command line and batches.

A formation's `suggestor_timeout` reaches its engine; a formation that sets none has no limit
in code, and `DEFAULT_SUGGESTOR_TIMEOUT` under `converge run` (and `resume`) and in a batch's
shards, so no call waits for ever; `math.inf` lifts the limit everywhere.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import anyio
import pytest

from converge import AgentEffect, Context, ContextKey, Formation, ProposedFact, SqliteRunStore
from converge._formation import DEFAULT_SUGGESTOR_TIMEOUT, command_timeout
from converge._scale._batch import ShardItem, ShardSpec, StoredRun, run_shard
from tests.cli_runs import cli

QUESTION = ProposedFact(key=ContextKey.SEEDS, id="q", content="a question", provenance="test")
FILE = """
import math

import anyio

from converge import AgentEffect, ContextKey, Formation, ProposedFact


class Slow:
    name = "slow"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx):
        return not ctx.get(ContextKey.HYPOTHESES)

    async def execute(self, ctx):
        await anyio.sleep({sleep})
        done = ProposedFact(key=ContextKey.HYPOTHESES, id="done", content="done", provenance="s")
        return AgentEffect.with_proposal(done)


formation = Formation(
    name="slow",
    suggestors=(Slow(),),
    inputs=(ProposedFact(key=ContextKey.SEEDS, id="q", content="q", provenance="test"),),
    {timeout}
)
"""


class Slow:
    """Sleeps `seconds` in its one call, then proposes `hypotheses/done`."""

    name = "slow"
    dependencies = (ContextKey.SEEDS,)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.get(ContextKey.HYPOTHESES)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(self.seconds)
        done = ProposedFact(key=ContextKey.HYPOTHESES, id="done", content="done", provenance="s")
        return AgentEffect.with_proposal(done)


def slow_formation(seconds: float, timeout: float | None = None) -> Formation:
    return Formation(
        name="slow", suggestors=(Slow(seconds),), inputs=(QUESTION,), suggestor_timeout=timeout
    )


def formation_file(folder: Path, sleep: float, timeout: str = "") -> str:
    path = folder / "slow_formation.py"
    setting = f"suggestor_timeout={timeout}," if timeout else ""
    path.write_text(FILE.format(sleep=sleep, timeout=setting), encoding="utf-8")
    return str(path)


@pytest.fixture
def short_default(monkeypatch: pytest.MonkeyPatch) -> float:
    """The command line's default deadline, made short enough to wait for."""
    monkeypatch.setattr("converge._formation.DEFAULT_SUGGESTOR_TIMEOUT", 0.2)
    return 0.2


async def test_a_formations_suggestor_timeout_cancels_a_slow_call() -> None:
    started = time.monotonic()
    result = await slow_formation(30.0, timeout=0.2).run()
    assert time.monotonic() - started < 5.0
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "timed_out"
    assert execution.error == "TimeoutError: no effect within 0.2 s"


async def test_a_formation_without_one_has_no_limit_in_code(short_default: float) -> None:
    result = await slow_formation(0.4).run()  # twice the command line's (shortened) default
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "ok"
    assert result.context.find(ContextKey.HYPOTHESES, "done") is not None


async def test_an_override_still_wins_over_the_formations_timeout() -> None:
    result = await slow_formation(0.4, timeout=0.1).run(suggestor_timeout=None)
    assert result.trace.cycles[0].executions[0].outcome == "ok"


def test_a_timeout_that_is_not_positive_is_a_configuration_error() -> None:
    from converge import ConfigurationError

    with pytest.raises(ConfigurationError, match="suggestor_timeout must be positive, got 0"):
        slow_formation(1.0, timeout=0).engine()


def test_the_default_deadline_is_300_seconds() -> None:
    assert DEFAULT_SUGGESTOR_TIMEOUT == 300.0
    assert command_timeout(slow_formation(1.0)) == 300.0
    assert command_timeout(slow_formation(1.0, timeout=7.5)) == 7.5
    assert command_timeout(slow_formation(1.0, timeout=math.inf)) is None


def test_converge_run_stops_a_call_at_the_default_deadline(
    tmp_path: Path, short_default: float
) -> None:
    path = formation_file(tmp_path, sleep=30)
    started = time.monotonic()
    code, out = cli("--store", str(tmp_path / "runs.db"), "run", path)
    assert time.monotonic() - started < 10.0
    assert code == 9, out  # converged, but with failures
    assert (
        "slow (execute, cycle 1, attempt 1, timed_out): TimeoutError: no effect within 0.2 s"
        in (out)
    )


def test_converge_run_uses_the_formations_deadline_over_the_default(tmp_path: Path) -> None:
    path = formation_file(tmp_path, sleep=30, timeout="0.3")
    started = time.monotonic()
    code, out = cli("--store", str(tmp_path / "runs.db"), "run", path)
    assert time.monotonic() - started < 10.0
    assert code == 9, out
    assert "TimeoutError: no effect within 0.3 s" in out


def test_math_inf_lifts_the_command_lines_deadline(tmp_path: Path, short_default: float) -> None:
    path = formation_file(tmp_path, sleep=0.5, timeout="math.inf")
    code, out = cli("--store", str(tmp_path / "runs.db"), "run", path)
    assert code == 0, out
    assert "facts        2 (seeds 1, hypotheses 1)" in out


def test_a_batch_shard_stops_a_call_at_the_default_deadline(
    tmp_path: Path, short_default: float
) -> None:
    path = formation_file(tmp_path, sleep=30)
    store = str(tmp_path / "runs.db")
    spec = ShardSpec(path, store, "b", runs_per_worker=1, lease=30.0)
    started = time.monotonic()
    [outcome] = run_shard(spec, [ShardItem.of(0, (QUESTION,))])
    assert time.monotonic() - started < 10.0
    assert isinstance(outcome, StoredRun), outcome

    async def stored() -> str | None:
        record = await SqliteRunStore(store).load("b-0")
        return record.trace.cycles[0].executions[0].error

    assert anyio.run(stored) == "TimeoutError: no effect within 0.2 s"
