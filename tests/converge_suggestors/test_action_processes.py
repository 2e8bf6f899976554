"""An approved action takes effect once across processes: kill -9, double resume, a race.

Each test drives the `converge` command in child processes against one store (SQLite, and
PostgreSQL when DATABASE_URL is set), with
`action_formation.py`: a model proposes a transfer, a human approves it with `converge
resume`, and the `ActionRunner` runs it. The transfer writes one ledger line per call, with
whether that call applied it (it is keyed by the idempotency key, as a payment API is).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from converge import PostgresRunStore, RunRecord, RunStore, SqliteRunStore
from converge_suggestors import ACTION_RESULTS, ACTIONS

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "action_formation.py")
ROOT = str(HERE.parent.parent)
LEASE = "1"
STALE = 8

pytestmark = pytest.mark.slow  # real processes and a lease to run out: seconds each


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, or the PostgreSQL server of DATABASE_URL (skipped without it)."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    url = os.environ.get("DATABASE_URL")
    if not url:
        pytest.skip("set DATABASE_URL=postgresql://... to run this against PostgreSQL")
    return url


@dataclass(frozen=True)
class Site:
    """Where a test's processes run (`tmp`, the ledger's folder) and the store they share."""

    tmp: Path
    store: str
    mcp: bool = False
    """The transfer is an MCP server's action (`mcp_server.py`), not a Python function's."""


@pytest.fixture
def site(tmp_path: Path, store: str) -> Site:
    return Site(tmp_path, store)


def open_store(target: str) -> RunStore:
    if target.startswith("postgresql://"):
        return PostgresRunStore(target)
    return SqliteRunStore(target)


def converge(
    site: Site, *args: str, crash: str = "", wait: bool = True
) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    """`converge --store STORE ARGS` in a child process, in the site's folder."""
    tmp_path, store = site.tmp, site.store
    env = {
        **os.environ,
        "CONVERGE_TEST_LEDGER": str(site.tmp / "ledger.jsonl"),
        "CONVERGE_TEST_CRASH": crash,
        "CONVERGE_TEST_MCP": "1" if site.mcp else "",
        "PYTHONPATH": os.pathsep.join([ROOT, str(HERE)]),
    }
    env.pop("CONVERGE_SIGNING_KEY", None)
    env.pop("CONVERGE_STORE", None)
    command = [sys.executable, "-m", "converge.cli", "--store", store, *args]
    if not wait:
        return subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def finished(process: object) -> subprocess.CompletedProcess[str]:
    assert isinstance(process, subprocess.CompletedProcess)
    return process  # pyright: ignore[reportUnknownVariableType]


def load(site: Site, run_id: str) -> RunRecord:
    async def read() -> RunRecord:
        return await open_store(site.store).load(run_id)

    return anyio.run(read)


def paused_run(site: Site) -> tuple[str, str]:
    """Run the formation to its pause; the run id and the action's gate id."""
    done = finished(converge(site, "run", FORMATION, "--lease", LEASE))
    assert done.returncode == 6, done.stderr
    run_id = next(
        line.split()[2] for line in done.stdout.splitlines() if line.startswith("saved run")
    )
    [gate] = load(site, run_id).pending
    assert gate.proposal.key == ACTIONS
    assert not (site.tmp / "ledger.jsonl").exists()  # nothing ran before approval
    return run_id, gate.gate_id


def ledger(site: Site) -> list[dict[str, object]]:
    path = site.tmp / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def approve(site: Site, run_id: str, gate: str, *, by: str = "jane", crash: str = "") -> int:
    done = finished(
        converge(
            site, "resume", run_id, "--approve", gate, "--by", by, "--lease", LEASE, crash=crash
        )
    )
    return done.returncode


def assert_applied_once(site: Site, run_id: str, *, calls: int) -> None:
    lines = ledger(site)
    assert len(lines) == calls
    assert [line["applied"] for line in lines] == [True] + [False] * (calls - 1)
    assert len({line["key"] for line in lines}) == 1  # every call carried the same key
    record = load(site, run_id)
    [result] = [fact for fact in record.facts if fact.key == ACTION_RESULTS]
    assert result.payload is not None
    assert isinstance(result.payload, dict)
    assert result.payload["status"] == "done"
    assert result.payload["idempotency_key"] == lines[0]["key"]
    if site.mcp:  # the key came in the request's _meta too
        assert {line["meta_key"] for line in lines} == {lines[0]["key"]}


def continue_after_lease(site: Site, run_id: str) -> int:
    time.sleep(float(LEASE) + 0.5)
    done = finished(converge(site, "resume", run_id, "--lease", LEASE))
    return done.returncode


@pytest.mark.parametrize("tool", ["function", "mcp"])
@pytest.mark.parametrize(("crash", "calls"), [("before", 1), ("after", 2)])
def test_a_kill_between_approval_and_the_result_neither_loses_nor_repeats_the_action(
    tmp_path: Path, store: str, tool: str, crash: str, calls: int
) -> None:
    """SIGKILL before the transfer: it runs once on continuation. SIGKILL after it, before
    its result was saved: the continuation calls again with the same key, applied once.
    With an MCP server's action, its server kills the converge process around its effect."""
    site = Site(tmp_path, store, mcp=tool == "mcp")
    run_id, gate = paused_run(site)
    assert approve(site, run_id, gate, crash=crash) == -signal.SIGKILL
    assert len(ledger(site)) == calls - 1
    assert continue_after_lease(site, run_id) == 0
    assert_applied_once(site, run_id, calls=calls)
    assert continue_after_lease(site, run_id) != 0  # nothing left to continue
    assert_applied_once(site, run_id, calls=calls)


def test_a_second_resume_of_an_approved_action_runs_nothing(site: Site) -> None:
    run_id, gate = paused_run(site)
    assert approve(site, run_id, gate) == 0
    assert approve(site, run_id, gate, by="bob") != 0
    assert_applied_once(site, run_id, calls=1)


def test_two_processes_approving_at_once_run_the_action_once(site: Site) -> None:
    run_id, gate = paused_run(site)
    racers: Sequence[subprocess.Popen[str]] = []
    for who in ("jane", "bob"):
        process = converge(site, "resume", run_id, "--approve", gate, "--by", who, wait=False)
        assert isinstance(process, subprocess.Popen)
        racers.append(process)
    outputs = [process.communicate(timeout=120) for process in racers]
    codes = sorted(process.returncode for process in racers)
    assert codes == [0, STALE], outputs
    assert_applied_once(site, run_id, calls=1)
