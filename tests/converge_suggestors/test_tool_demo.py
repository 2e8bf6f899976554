"""`examples/tool_approval.py`: look-ups (one over MCP), then a payment approved first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from converge import SqliteRunStore
from converge_suggestors import ACTION_RESULTS, ACTIONS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "tool_approval.py"

pytestmark = pytest.mark.slow  # child processes, and an MCP server in each


@pytest.fixture
def anyio_backend() -> str:
    """The processes do the work; the test only reads the store."""
    return "asyncio"


pytest.importorskip("mcp", reason="the mcp extra is not installed")


def python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CONVERGE_SIGNING_KEY", None)
    env.pop("CONVERGE_STORE", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_example_looks_up_pauses_and_pays_once_after_approval(tmp_path: Path) -> None:
    done = python(str(SCRIPT), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "paused      : awaiting_human, gate gate:1:actions/clerk.transfer.e98ab539a751ee95",
        'to approve  : transfer {"amount":1200,"to":"acme"} (reason: invoice 17 is due)',
        "tool call   : balance -> ok",
        "tool call   : invoice_status -> ok",
        "tool call   : transfer -> proposed",
        "payments    : 0 before approval",
        "outcome     : done {'receipt': 1, 'to': 'acme', 'amount': 1200}",
        "payments    : 1 after approval",
        "stop reason : converged",
    ]


async def test_the_example_waits_for_converge_resume_and_then_pays(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    ran = python("-m", "converge.cli", "--store", store, "run", str(SCRIPT), cwd=tmp_path)
    assert ran.returncode == 6, ran.stderr
    saved = [line for line in ran.stdout.splitlines() if line.startswith("saved run")]
    run_id = saved[0].split()[2]
    record = await SqliteRunStore(store).load(run_id)
    [gate] = record.pending
    assert gate.proposal.key == ACTIONS
    assert [fact for fact in record.facts if fact.key == ACTION_RESULTS] == []
    resumed = python(
        "-m",
        "converge.cli",
        "--store",
        store,
        "resume",
        run_id,
        "--approve",
        gate.gate_id,
        "--by",
        "jane",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr
    record = await SqliteRunStore(store).load(run_id)
    [outcome] = [fact for fact in record.facts if fact.key == ACTION_RESULTS]
    assert isinstance(outcome.payload, dict)
    assert outcome.payload["status"] == "done"
    assert outcome.evidence == (gate.proposal.key + "/" + gate.proposal.id,)
