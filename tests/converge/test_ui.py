"""The review console in a real browser: `converge ui` in its own process, Chromium driving it.

Each test starts `converge ui --port 0` against a store holding a paused vendor-selection run
(the 420,000 commitment waits for a human), reads the tokened URL it prints, and uses the
console as a reviewer would.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.browser import chromium_or_skip, launch
from tests.cli_runs import cli, run_id_of

pytestmark = pytest.mark.slow

GATE = "gate:6:vendor.commitments/acme"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts"  # fresh screenshots; docs/img holds the reviewed ones
CHAIN = ROOT / "tests" / "converge" / "durable_formation.py"

HOSTILE = textwrap.dedent(
    '''
    """A formation whose held proposal carries hostile text."""
    from converge import AgentEffect, Context, ContextKey, Formation, HitlPolicy, ProposedFact
    from converge_suggestors import SeedSuggestor

    EVIL = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'

    class Evil:
        name = "evil"
        dependencies = (ContextKey.SEEDS,)

        def accepts(self, ctx: Context, /) -> bool:
            return not ctx.has(ContextKey.STRATEGIES)

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposals([ProposedFact(
                key=ContextKey.STRATEGIES, id="evil", provenance="evil",
                content=EVIL + " \\x1b[31mred\\u202eevil",
                payload={EVIL: EVIL + "\\u202e", "ok": 1},
                evidence=("seeds/start",),
            )])

    formation = Formation(
        name="hostile",
        suggestors=(SeedSuggestor("start", "Begin " + EVIL), Evil()),
        hitl=HitlPolicy(gated_keys=frozenset({ContextKey.STRATEGIES})),
    )
    '''
)


@dataclass
class Console:
    base: str
    token: str
    store: str
    run_id: str

    @property
    def signed_in(self) -> str:
        return f"{self.base}/?token={self.token}"

    def gate(self, gate: str = GATE) -> str:
        return f"{self.base}/runs/{quote(self.run_id, safe='')}/gates/{quote(gate, safe='')}"


def start_console(store: str, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "ui", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests" / "converge")},
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("open "):
            url = line.split()[1]
            base, _, token = url.partition("/?token=")
            return process, base, token
    process.kill()
    raise AssertionError(f"converge ui printed no URL: {process.communicate()}")


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    chromium_or_skip("the review console tests")
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "demo")
    assert code == 6, out
    process, base, token = start_console(store, "--reviewer", "ana", "--poll", "0.1")
    try:
        yield Console(base, token, store, run_id_of(out))
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_a_reviewer_sees_the_gate_with_its_payload_approves_and_watches_it_converge(
    console: Console,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(console.signed_in)
        assert "token" not in page.url  # the token moved into a cookie
        row = page.locator(f'tr[data-run="{console.run_id}"]')
        expect(row.locator("[data-status]")).to_have_text("paused")
        expect(row.locator("[data-pending]")).to_have_text("1")
        page.screenshot(path=str(SHOTS / "ui-runs.png"))
        row.locator("a").click()
        expect(page.locator("[data-waiting]")).to_contain_text("1 proposal(s) wait")
        page.screenshot(path=str(SHOTS / "ui-run.png"), full_page=False)
        page.locator("[data-gate-link]").click()
        payload = page.locator('table[data-payload="vendor.commitments/acme"]')
        expect(payload).to_contain_text("spend")
        expect(payload).to_contain_text("420000")
        expect(page.locator(".chain")).to_contain_text("vendor.recommendations/acme")
        expect(page.locator(".chain")).to_contain_text("vendor.bids/")
        page.screenshot(path=str(SHOTS / "ui-gate.png"), full_page=True)
        page.get_by_role("button", name="Approve").click()
        expect(page.locator("body")).to_have_attribute(
            "data-stop-reason", "converged", timeout=15_000
        )
        expect(page.locator("tr[data-decision]")).to_contain_text("ana")
        assert not errors
        browser.close()
    code, out = cli("--store", console.store, "show", console.run_id)
    assert code == 0
    assert "approved by ana" in out


def test_two_reviewers_deciding_one_gate_one_wins_the_other_sees_who(
    console: Console, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        first, second = browser.new_context(), browser.new_context()
        pages = [context.new_page() for context in (first, second)]
        for page in pages:
            page.goto(console.signed_in)
            page.goto(console.gate())
            expect(page.get_by_role("button", name="Approve")).to_be_visible()
        pages[1].get_by_label("reason").fill("too expensive")
        pages[0].get_by_role("button", name="Approve").click()
        expect(pages[0].locator("body")).to_have_attribute("data-stop-reason", "converged")
        pages[1].get_by_role("button", name="Reject").click()
        expect(pages[1].locator("h1")).to_have_text("Already decided")
        expect(pages[1].locator("[data-message]")).to_contain_text("already decided by ana")
        browser.close()
    _, out = cli("--store", console.store, "show", console.run_id)
    assert "approved by ana" in out
    assert "too expensive" not in out


def test_without_the_token_every_page_is_refused(console: Console) -> None:
    run = f"{console.base}/runs/{console.run_id}"
    for url in (
        console.base + "/",
        run,
        run + "/events",
        console.gate(),
        console.base + "/favicon.ico",
        console.base + "/?token=wrong",
    ):
        response = httpx.get(url, follow_redirects=False)
        assert response.status_code == 401, url
        assert "Sign-in needed" in response.text
    response = httpx.post(console.gate(), data={"gate:" + GATE: "approve"})
    assert response.status_code == 401
    with httpx.Client(headers={"authorization": "Bearer not-the-token"}) as client:
        assert client.get(console.base + "/").status_code == 401
    with httpx.Client(headers={"authorization": f"Bearer {console.token}"}) as client:
        assert client.get(console.base + "/").status_code == 200


def test_a_post_without_the_csrf_token_decides_nothing(console: Console) -> None:
    with httpx.Client(headers={"authorization": f"Bearer {console.token}"}) as client:
        page = client.get(console.gate())
        assert page.status_code == 200
        for form in (
            {"gate:" + GATE: "approve", "version": "1"},
            {"gate:" + GATE: "approve", "csrf": "0" * 64},
        ):
            response = client.post(console.gate(), data=form)
            assert response.status_code == 403
            assert "CSRF" in response.text
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        forged = client.post(
            console.gate(),
            data={"gate:" + GATE: "approve", "csrf": csrf},
            headers={"origin": "http://evil.example"},
        )
        assert forged.status_code == 403
    code, _ = cli("--store", console.store, "review", console.run_id)
    assert code == 6  # still waiting: nothing was decided


def test_hostile_text_in_facts_renders_inert(tmp_path: Path) -> None:
    chromium_or_skip("the review console tests")
    from playwright.sync_api import expect, sync_playwright

    formation = tmp_path / "hostile.py"
    formation.write_text(HOSTILE, encoding="utf-8")
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", str(formation))
    assert code == 6, out
    run_id = run_id_of(out)
    process, base, token = start_console(store)
    try:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: dialogs.append(dialog.message))
            page.goto(f"{base}/?token={token}")
            for path in ("", f"/gates/{quote('gate:2:strategies/evil', safe='')}"):
                page.goto(f"{base}/runs/{run_id}{path}")
                page.wait_for_load_state("load")
                assert page.evaluate("window.__pwned") is None
                assert page.locator("main script, main img").count() == 0
                expect(page.locator("main")).to_contain_text("<script>window.__pwned = 1</script>")
                expect(page.locator("main")).to_contain_text("\\x1b[31mred\\u202eevil")
            assert not dialogs
            browser.close()
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_a_running_run_page_follows_each_saved_cycle_without_a_reload(tmp_path: Path) -> None:
    chromium_or_skip("the review console tests")
    from playwright.sync_api import sync_playwright

    store = str(tmp_path / "runs.db")
    env = {**os.environ, "CONVERGE_TEST_SLEEP": "0.4", "CONVERGE_TEST_STEPS": "12"}
    runner = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "run", str(CHAIN)],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    process, base, token = start_console(store, "--poll", "0.05")
    try:
        with httpx.Client(headers={"authorization": f"Bearer {token}"}) as client:
            deadline = time.monotonic() + 20
            while 'data-status="running"' not in (listing := client.get(base + "/").text):
                assert time.monotonic() < deadline, "the run never showed as running"
                time.sleep(0.05)
        run_id = listing.split('data-run="')[1].split('"')[0]
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page()
            page.goto(f"{base}/?token={token}")
            page.goto(f"{base}/runs/{run_id}")
            assert page.locator("body").get_attribute("data-status") == "running"
            versions = {page.locator("body").get_attribute("data-version")}
            deadline = time.monotonic() + 30
            while page.locator("body").get_attribute("data-status") != "finished":
                assert time.monotonic() < deadline, "the page did not follow the run"
                page.wait_for_timeout(50)
                with contextlib.suppress(Exception):  # the page may be reloading
                    versions.add(page.locator("body").get_attribute("data-version"))
            assert page.locator("body").get_attribute("data-stop-reason") == "converged"
            assert len(versions - {None}) >= 3  # it showed several cycles as they were saved
            browser.close()
    finally:
        runner.wait(timeout=30)
        process.terminate()
        process.communicate(timeout=10)
    assert runner.returncode == 0
