"""The `converge` command when a suggestor raises a `BaseException`, or the run is taken over.

Real processes of the command, each on a formation file whose suggestor raises
`KeyboardInterrupt`, `SystemExit` or an exception of its own from `execute` or `accepts`:
one line on standard error naming the suggestor and the cycle, never a traceback, exit 130
for the interrupt and 1 otherwise, and the run saved as interrupted (never left `running`),
which `converge resume` then continues. A writer whose run was taken over while it held the
event loop exits 8, as any other writer that lost the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest

from converge import RunStatus, SqliteRunStore

pytestmark = pytest.mark.slow  # real processes: about a second each

FORMATION = """
import os, time
from pathlib import Path

import anyio

from converge import AgentEffect, Context, ContextKey, Formation, ProposedFact
from converge_suggestors import SeedSuggestor


class Custom(BaseException):
    pass


RAISED = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit0": lambda: SystemExit(0),
    "SystemExit3": lambda: SystemExit(3),
    "Custom": lambda: Custom("stop now"),
}
KIND = os.environ.get("TEST_RAISE", "")
WHERE = os.environ.get("TEST_WHERE", "execute")
BLOCK = os.environ.get("TEST_BLOCK_UNTIL", "")


class Boom:
    name = "boom"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        if KIND and WHERE == "accepts":
            raise RAISED[KIND]()
        return ctx.find(ContextKey.HYPOTHESES, "boom") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(0)
        if KIND:
            raise RAISED[KIND]()
        if BLOCK:  # holds the event loop: the lease is not renewed meanwhile
            Path(BLOCK + ".blocked").touch()
            while not Path(BLOCK).exists():
                time.sleep(0.05)
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id="boom", content="boom", provenance="b")
        )


class Beside:
    name = "beside"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return os.environ.get("TEST_BESIDE") == "1" and ctx.find(
            ContextKey.HYPOTHESES, "beside"
        ) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(0.01 if not KIND else 30)
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id="beside", content="b", provenance="b")
        )


formation = Formation(
    name="boom", suggestors=(SeedSuggestor("start", "go"), Boom(), Beside())
)
"""


def converge(
    *args: str, env: Mapping[str, str] = {}, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "converge.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
        cwd=cwd,
    )


@pytest.fixture
def formation(tmp_path: Path) -> str:
    path = tmp_path / "boom.py"
    path.write_text(FORMATION, encoding="utf-8")
    return str(path)


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def stored(store: str) -> tuple[str, RunStatus]:
    """The one run of `store`: its id and status."""
    opened = SqliteRunStore(store, read_only=True)
    try:
        (summary,) = anyio.run(opened.list_runs)
    finally:
        opened.close()
    return summary.run_id, summary.status


CASES = [
    ("KeyboardInterrupt", "execute", "0", 130, "interrupted: ", "KeyboardInterrupt"),
    ("KeyboardInterrupt", "execute", "1", 130, "interrupted: ", "KeyboardInterrupt"),
    ("KeyboardInterrupt", "accepts", "1", 130, "interrupted: ", "KeyboardInterrupt"),
    ("SystemExit0", "execute", "1", 1, "error: ", "SystemExit(0)"),
    ("SystemExit3", "execute", "0", 1, "error: ", "SystemExit(3)"),
    ("Custom", "execute", "0", 1, "error: ", "Custom: stop now"),
]


@pytest.mark.parametrize(("kind", "where", "beside", "status", "start", "raised"), CASES)
def test_a_suggestor_base_exception_is_one_line_and_the_run_is_saved_interrupted(
    formation: str,
    store: str,
    kind: str,
    where: str,
    beside: str,
    status: int,
    start: str,
    raised: str,
) -> None:
    env = {"TEST_RAISE": kind, "TEST_WHERE": where, "TEST_BESIDE": beside}
    began = time.monotonic()
    done = converge("--store", store, "run", formation, env=env)
    assert time.monotonic() - began < 20  # the call beside it (30 s) was cancelled
    assert done.returncode == status, done.stderr
    run_id, run_status = stored(store)
    assert run_status is RunStatus.INTERRUPTED
    (line,) = done.stderr.splitlines()
    assert line == (
        f"{start}suggestor 'boom' raised {raised} in {where}(), cycle 2 of run {run_id}, which "
        f"stopped there; it was saved as interrupted; `{sys.executable} -m converge.cli resume "
        f"{run_id} --store {store}` continues it"
    )
    resumed = converge("--store", store, "resume", run_id, "--formation", formation)
    assert resumed.returncode == 0, resumed.stderr
    assert stored(store) == (run_id, RunStatus.FINISHED)


def test_a_writer_whose_run_was_taken_over_exits_stale(
    formation: str, store: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "run", formation, "--lease", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TEST_BLOCK_UNTIL": str(go)},
    )
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{go}.blocked").exists():
            assert time.monotonic() < deadline, "the run never reached its blocking step"
            time.sleep(0.1)
        # The whole process stops (its lease thread too), as a machine that froze would:
        # its lease runs out and another process takes the run over.
        os.kill(writer.pid, signal.SIGSTOP)
        status = RunStatus.RUNNING
        while status is not RunStatus.INTERRUPTED:
            assert time.monotonic() < deadline, "the stopped run never counted as interrupted"
            time.sleep(0.2)
            _, status = stored(store)
        run_id, _ = stored(store)
        taken = converge("--store", store, "resume", run_id, "--formation", formation)
        assert taken.returncode == 0, taken.stderr
        os.kill(writer.pid, signal.SIGCONT)
        go.touch()
        out, err = writer.communicate(timeout=30)
    finally:
        go.touch()
        if writer.poll() is None:
            os.kill(writer.pid, signal.SIGCONT)
            writer.kill()
            writer.wait()
    assert writer.returncode == 8, (out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"error: run {run_id} was saved by someone else since version ")
    assert line.endswith("; nothing was saved")
    assert "Traceback" not in err
    assert stored(store) == (run_id, RunStatus.FINISHED)
