"""The console's live view: a running run's page gets what changed since its last save
(counts and new facts), not the run, and reloads only when the run's status changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import cast

import anyio
import httpx
import pytest

from converge import ContextKey, Engine, ProposedFact, RunRecord, RunStatus, SqliteRunStore
from converge.ui._live import DELTA_FACTS, delta, event_stream
from tests.browser import chromium_or_skip, signed_in
from tests.converge.ui_console import start_console, stop_console

H = ContextKey.HYPOTHESES
CHAIN = Path(__file__).resolve().parent / "durable_formation.py"


def test_delta_sends_only_the_facts_past_the_pages_clock_latest_first_made_visible() -> None:
    inputs = [
        ProposedFact(key=H, id=f"h{n}", content=f"claim {n}", provenance="in") for n in range(120)
    ]
    inputs.append(
        ProposedFact(key=ContextKey.SEEDS, id="evil", content="\x1b[2J\u202e<b>", provenance="in")
    )
    record = RunRecord.of(anyio.run(lambda: Engine().run(inputs=inputs)))
    clocks = sorted(fact.promotion.clock for fact in record.facts)
    since = clocks[-80]  # 79 facts promoted after it
    change = delta(record, since)
    facts = cast("list[dict[str, object]]", change["facts"])
    assert len(facts) == DELTA_FACTS
    assert change["more"] == 79 - DELTA_FACTS
    assert change["fact_count"] == 121
    assert change["clock"] == record.integrity.clock
    newest = sorted(record.facts, key=lambda fact: fact.promotion.clock)[-DELTA_FACTS:]
    assert [f["ref"] for f in facts] == [f"{fact.key.value}/{fact.id}" for fact in newest]
    evil = cast("list[dict[str, object]]", delta(record, 0)["facts"])
    assert {"ref": "seeds/evil", "content": "\\x1b[2J\\u202e<b>", "cycle": 0} in evil
    text = json.dumps(change)
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert delta(record, record.integrity.clock)["facts"] == []


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A store and a run of 40 cycles, 0.25 s each, under way in another process."""
    store = str(tmp_path / "runs.db")
    env = {**os.environ, "CONVERGE_TEST_SLEEP": "0.25", "CONVERGE_TEST_STEPS": "40"}
    runner = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "run", str(CHAIN)],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    try:
        yield store, runner
    finally:
        runner.wait(timeout=60)
    assert runner.returncode == 0


def _wait_running(store: str) -> RunRecord:
    async def first() -> RunRecord | None:
        opened = SqliteRunStore(store)
        try:
            runs = await opened.list_runs(limit=1)
            return await opened.load(runs[0].run_id) if runs else None
        except Exception:  # the runner has not created the store yet
            return None
        finally:
            opened.close()

    deadline = time.monotonic() + 30
    while (record := anyio.run(first)) is None or record.status is not RunStatus.RUNNING:
        assert time.monotonic() < deadline, "the run never showed as running"
        time.sleep(0.05)
    return record


def test_the_stream_sends_each_save_as_a_delta_then_changed_when_it_stops(
    running: tuple[str, subprocess.Popen[bytes]],
) -> None:
    store, _ = running
    record = _wait_running(store)

    async def listen() -> list[str]:
        opened = SqliteRunStore(store)
        said: list[str] = []
        stream = event_stream(
            opened,
            record.run_id,
            record.version,
            0.02,
            clock=record.integrity.clock,
            status=RunStatus.RUNNING,
        )
        async with aclosing(stream) as events:
            with anyio.fail_after(60):
                async for event in events:
                    said.append(event)
        opened.close()
        return said

    said = anyio.run(listen)
    assert said[0] == "retry: 2000\n\n"
    deltas = [json.loads(e.split("data: ", 1)[1]) for e in said if e.startswith("event: delta")]
    assert deltas, said
    refs = [fact["ref"] for change in deltas for fact in change["facts"]]
    assert len(refs) == len(set(refs))  # each new fact sent once
    assert all(ref.startswith("hypotheses/step-") for ref in refs)
    versions = [change["version"] for change in deltas]
    assert versions == sorted(versions)
    assert versions[0] > record.version
    assert all(change["status"] == "running" for change in deltas)
    assert said[-1].startswith("event: changed\n")
    assert '"status": "finished"' in said[-1]


def test_a_running_run_page_applies_deltas_in_place_then_reloads_when_it_stops(
    running: tuple[str, subprocess.Popen[bytes]],
) -> None:
    chromium_or_skip("the review console tests")
    store, _ = running
    served = start_console(store, "--poll", "0.05")
    try:
        with httpx.Client(headers={"authorization": f"Bearer {served.token}"}) as client:
            record = _wait_running(store)
            page_html = client.get(f"{served.base}/runs/{record.run_id}").text
        assert "&amp;running=1" in page_html
        with signed_in(served.link) as (page, errors):
            page.goto(f"{served.base}/runs/{record.run_id}")
            if page.locator("body").get_attribute("data-status") != "running":
                pytest.skip("the run ended before the page loaded (a loaded machine)")
            page.evaluate("window.__same_page = true")
            facts = "Number(document.querySelector('[data-count=\"facts\"]').dataset.value)"
            before = page.evaluate(f"() => {facts}")
            page.wait_for_function(f"(before) => {facts} > before", arg=before, timeout=20_000)
            page.locator("[data-live-fact]").first.wait_for(timeout=20_000)
            assert page.evaluate("window.__same_page === true")  # no reload: deltas
            assert "new fact(s)" in page.locator("#live").inner_text()
            page.wait_for_function(
                "() => document.body.getAttribute('data-status') === 'finished'",
                timeout=30_000,
            )
            assert page.evaluate("window.__same_page === undefined")  # reloaded once
            assert page.locator("body").get_attribute("data-stop-reason") == "converged"
            assert errors == []
    finally:
        stop_console(served)
