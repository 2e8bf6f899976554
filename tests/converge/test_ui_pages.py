"""The console's runs list and run pages: each run labelled as what it is, live or failed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from converge import RunStatus, RunSummary, SqliteRunStore
from converge._formation import load_formation
from converge.ui import Reviewers
from tests.cli_runs import cli, run_id_of
from tests.converge.test_ui_console import client_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHAIN = str(HERE / "durable_formation.py")

FLAWED = textwrap.dedent(
    '''
    """Runs that end badly: a suggestor that raises, and one that never lets the run settle."""
    from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact
    from converge_suggestors import SeedSuggestor

    class Raises:
        name = "raises"
        dependencies = (ContextKey.SEEDS,)

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            raise RuntimeError("the model is down")

    class Forever:
        name = "forever"
        dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            n = ctx.count(ContextKey.HYPOTHESES)
            return AgentEffect.with_proposals([ProposedFact(
                key=ContextKey.HYPOTHESES, id=f"h{n}", content=f"h{n}", provenance="forever")])

    failing = Formation(name="failing", suggestors=(SeedSuggestor("s", "go"), Raises()))
    endless = Formation(
        name="endless",
        suggestors=(SeedSuggestor("s", "go"), Forever()),
        budget=Budget(max_cycles=3),
    )
    '''
)


@pytest.fixture
def reviewer() -> tuple[Reviewers, str]:
    return Reviewers.single("ana")


def test_ui_runs_list_labels_a_failed_run_as_what_it_is_not_finished(
    tmp_path: Path, reviewer: tuple[Reviewers, str]
) -> None:
    store = str(tmp_path / "runs.db")
    ids: dict[str, str] = {}
    for name, status in (("failing", 9), ("endless", 3)):
        module = tmp_path / f"{name}.py"
        module.write_text(f"{FLAWED}\nformation = {name}\n")
        code, out = cli("--store", store, "run", str(module))
        assert code == status, out
        ids[name] = run_id_of(out)
    failing, endless = ids["failing"], ids["endless"]
    code, out = cli("--store", store, "demo", "hello_convergence")
    assert code == 0, out
    good = run_id_of(out)
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token) as client:
        listing = client.get("/").text
    rows = {row.split('"', 1)[0]: row for row in listing.split('<tr data-run="')[1:]}
    expected = {
        failing: ("converged with failures", "stop-converged_with_failures"),
        endless: ("cycle budget exhausted", "stop-cycle_budget_exhausted"),
        good: ("converged", "stop-converged"),
    }
    for run_id, (label, cls) in expected.items():
        row = rows[run_id]
        assert f'data-outcome="{label}">{label}</span>' in row, row
        assert f'class="badge {cls}"' in row
        assert 'data-status="finished"' in row
        assert ">finished<" not in row


def test_ui_run_page_of_a_live_run_says_it_is_running_not_that_it_stopped(
    tmp_path: Path, reviewer: tuple[Reviewers, str]
) -> None:
    store = str(tmp_path / "runs.db")
    env = {
        **os.environ,
        "CONVERGE_TEST_SLEEP": "0.3",
        "CONVERGE_TEST_STEPS": "10",
        "PYTHONPATH": str(ROOT),
    }
    runner = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "run", CHAIN],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    try:
        opened = SqliteRunStore(store)
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "the run never showed as running"
            runs: tuple[RunSummary, ...] = ()
            if Path(store).exists():
                runs = anyio.run(opened.list_runs)
            if runs and runs[0].status is RunStatus.RUNNING and runs[0].cycles >= 1:
                run_id = runs[0].run_id
                break
            time.sleep(0.05)
        reviewers, token = reviewer
        with client_for(store, reviewers, token=token) as client:
            page = client.get(f"/runs/{run_id}").text
        assert 'data-summary="stop">The run is <b>running</b>: saved after cycle' in page
        assert "stopped <b>running" not in page
        assert 'data-status="running"' in page
    finally:
        runner.wait(timeout=60)
    assert runner.returncode == 0


def test_ui_run_page_of_an_interrupted_run_says_it_can_continue(
    tmp_path: Path, reviewer: tuple[Reviewers, str]
) -> None:
    store = str(tmp_path / "runs.db")
    formation = load_formation(CHAIN)

    async def interrupted() -> None:
        engine = formation.engine(store=SqliteRunStore(store), formation=CHAIN)
        with anyio.move_on_after(0.3):
            await engine.run(run_id="chain-1", inputs=formation.inputs)

    anyio.run(interrupted)
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token) as client:
        page = client.get("/runs/chain-1").text
    assert "The run was <b>interrupted</b> (cancelled)" in page
    assert "stopped <b>interrupted" not in page
