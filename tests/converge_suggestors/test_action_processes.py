"""An approved action takes effect once across processes: kill -9, double resume, a race.

Each test drives the `converge` command in child processes against one SQLite store, with
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
from pathlib import Path

import anyio
import pytest

from converge import RunRecord, SqliteRunStore
from converge_suggestors import ACTION_RESULTS, ACTIONS

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "action_formation.py")
ROOT = str(HERE.parent.parent)
LEASE = "1"
STALE = 8

pytestmark = pytest.mark.slow  # real processes and a lease to run out: seconds each


def converge(
    tmp_path: Path, *args: str, crash: str = "", wait: bool = True
) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    """`converge --store runs.db ARGS` in a child process, in `tmp_path`."""
    env = {
        **os.environ,
        "CONVERGE_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        "CONVERGE_TEST_CRASH": crash,
        "PYTHONPATH": os.pathsep.join([ROOT, str(HERE)]),
    }
    env.pop("CONVERGE_SIGNING_KEY", None)
    env.pop("CONVERGE_STORE", None)
    command = [sys.executable, "-m", "converge.cli", "--store", str(tmp_path / "runs.db"), *args]
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


def load(tmp_path: Path, run_id: str) -> RunRecord:
    async def read() -> RunRecord:
        return await SqliteRunStore(tmp_path / "runs.db").load(run_id)

    return anyio.run(read)


def paused_run(tmp_path: Path) -> tuple[str, str]:
    """Run the formation to its pause; the run id and the action's gate id."""
    done = finished(converge(tmp_path, "run", FORMATION, "--lease", LEASE))
    assert done.returncode == 6, done.stderr
    run_id = next(
        line.split()[2] for line in done.stdout.splitlines() if line.startswith("saved run")
    )
    [gate] = load(tmp_path, run_id).pending
    assert gate.proposal.key == ACTIONS
    assert not (tmp_path / "ledger.jsonl").exists()  # nothing ran before approval
    return run_id, gate.gate_id


def ledger(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def approve(tmp_path: Path, run_id: str, gate: str, *, by: str = "jane", crash: str = "") -> int:
    done = finished(
        converge(
            tmp_path, "resume", run_id, "--approve", gate, "--by", by, "--lease", LEASE, crash=crash
        )
    )
    return done.returncode


def assert_applied_once(tmp_path: Path, run_id: str, *, calls: int) -> None:
    lines = ledger(tmp_path)
    assert len(lines) == calls
    assert [line["applied"] for line in lines] == [True] + [False] * (calls - 1)
    assert len({line["key"] for line in lines}) == 1  # every call carried the same key
    record = load(tmp_path, run_id)
    [result] = [fact for fact in record.facts if fact.key == ACTION_RESULTS]
    assert result.payload is not None
    assert isinstance(result.payload, dict)
    assert result.payload["status"] == "done"
    assert result.payload["idempotency_key"] == lines[0]["key"]


def continue_after_lease(tmp_path: Path, run_id: str) -> int:
    time.sleep(float(LEASE) + 0.5)
    done = finished(converge(tmp_path, "resume", run_id, "--lease", LEASE))
    return done.returncode


@pytest.mark.parametrize(("crash", "calls"), [("before", 1), ("after", 2)])
def test_a_kill_between_approval_and_the_result_neither_loses_nor_repeats_the_action(
    tmp_path: Path, crash: str, calls: int
) -> None:
    """SIGKILL before the transfer: it runs once on continuation. SIGKILL after it, before
    its result was saved: the continuation calls again with the same key, applied once."""
    run_id, gate = paused_run(tmp_path)
    assert approve(tmp_path, run_id, gate, crash=crash) == -signal.SIGKILL
    assert len(ledger(tmp_path)) == calls - 1
    assert continue_after_lease(tmp_path, run_id) == 0
    assert_applied_once(tmp_path, run_id, calls=calls)
    assert continue_after_lease(tmp_path, run_id) != 0  # nothing left to continue
    assert_applied_once(tmp_path, run_id, calls=calls)


def test_a_second_resume_of_an_approved_action_runs_nothing(tmp_path: Path) -> None:
    run_id, gate = paused_run(tmp_path)
    assert approve(tmp_path, run_id, gate) == 0
    assert approve(tmp_path, run_id, gate, by="bob") != 0
    assert_applied_once(tmp_path, run_id, calls=1)


def test_two_processes_approving_at_once_run_the_action_once(tmp_path: Path) -> None:
    run_id, gate = paused_run(tmp_path)
    racers: Sequence[subprocess.Popen[str]] = []
    for who in ("jane", "bob"):
        process = converge(tmp_path, "resume", run_id, "--approve", gate, "--by", who, wait=False)
        assert isinstance(process, subprocess.Popen)
        racers.append(process)
    outputs = [process.communicate(timeout=120) for process in racers]
    codes = sorted(process.returncode for process in racers)
    assert codes == [0, STALE], outputs
    assert_applied_once(tmp_path, run_id, calls=1)
