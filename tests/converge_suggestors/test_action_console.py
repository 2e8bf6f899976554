"""Approving an action in the console, in headless Chromium: approving runs it exactly once
(a second submission of the same form changes nothing); rejecting never runs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_action_processes import HERE, Site, ledger, load, paused_run

from converge import RunStatus
from converge_suggestors import ACTION_RESULTS
from tests.browser import chromium_or_skip, signed_in
from tests.converge.ui_console import ROOT, start_console, stop_console

pytestmark = pytest.mark.slow  # a run in a process, a console in another, a browser


@pytest.mark.parametrize("choice", ["approve", "reject"])
def test_an_action_approved_in_the_console_runs_once_and_a_rejected_one_never(
    tmp_path: Path, choice: str
) -> None:
    chromium_or_skip("the review console tests")
    site = Site(tmp_path, str(tmp_path / "runs.db"))
    run_id, gate = paused_run(site)
    env = {
        "CONVERGE_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
    }
    served = start_console(site.store, "--trust-unsigned", "--poll", "0.05", env=env)
    try:
        with signed_in(served.link) as (page, errors):
            page.goto(f"{served.base}/runs/{run_id}")
            page.locator("a[data-gate-link]").click()
            detail = page.locator("body").inner_text()
            assert "transfer" in detail
            assert "acme" in detail  # the reviewer sees the arguments that will be sent
            assert "1200" in detail
            form = page.locator("form[data-decision-form]")
            action = str(form.get_attribute("action"))
            fields = form.evaluate("(f) => Object.fromEntries(new FormData(f))")
            fields[f"gate:{gate}"] = choice
            page.locator(f"button.{choice}").click()
            page.goto(f"{served.base}/runs/{run_id}")
            page.wait_for_function(
                "() => document.body.getAttribute('data-status') === 'finished'",
                timeout=60_000,
            )
            # the same form submitted again (a double click, a back button) runs nothing
            again = page.request.post(
                f"{served.base}{action}", form=fields, headers={"origin": served.base}
            )
            assert again.status == 409, again.text()
            assert errors == []
    finally:
        stop_console(served)
    record = load(site, run_id)
    assert record.status is RunStatus.FINISHED
    assert [(d.gate_id, d.approved) for d in record.trace.decisions] == [
        (gate, choice == "approve")
    ]
    results = [fact for fact in record.facts if fact.key == ACTION_RESULTS]
    lines = ledger(site)
    if choice == "reject":
        assert lines == []  # never executed
        assert results == []
        return
    assert [line["applied"] for line in lines] == [True]  # executed exactly once
    (result,) = results
    assert isinstance(result.payload, dict)
    assert result.payload["status"] == "done"
    assert result.payload["idempotency_key"] == lines[0]["key"]
