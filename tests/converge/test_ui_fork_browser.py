"""Forking from the console in a real browser: `converge ui` in its own process, Chromium.

A reviewer opens a run, picks a cycle below its timeline, types the changes, forks, lands
on the fork (which names its parent) and opens the diff; a page on another site that posts
the fork form with a stolen CSRF token, a browser that never signed in, and a parent whose
record was changed in the store all fork nothing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, cast

import pytest

from tests.browser import chromium_or_skip, launch
from tests.cli_runs import cli
from tests.converge.forgery import stored_json, write_json
from tests.converge.ui_console import Served, serving

if TYPE_CHECKING:
    from playwright.sync_api import FloatRect

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "fork_formation.py")
KEY = "ui-fork-browser-key"
SHOTS = HERE.parents[1] / "test-artifacts"


@dataclass
class Console:
    served: Served
    store: str
    parent: str

    @property
    def base(self) -> str:
        return self.served.base

    def runs(self) -> list[str]:
        with sqlite3.connect(self.store) as connection:
            rows = connection.execute("SELECT run_id FROM converge_runs").fetchall()
        connection.close()
        return sorted(str(row[0]) for row in rows)


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """A console on a finished, signed run of the fork chain."""
    chromium_or_skip("the console fork tests")
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", FORMATION, "--json")
    assert code == 0, out
    env = {"CONVERGE_SIGNING_KEY": KEY}
    with serving(store, "--reviewer", "ana", env=env) as served:
        yield Console(served, store, str(json.loads(out)["run_id"]))


def test_console_a_reviewer_forks_from_the_timeline_and_opens_the_diff(console: Console) -> None:
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(console.served.link)
        page.goto(f"{console.base}/runs/{console.parent}")
        page.goto(f"{console.base}/runs/{console.parent}/fork?at=99")
        expect(page.locator("[data-fork-error]")).to_contain_text("has no cycle 99")
        page.goto(f"{console.base}/runs/{console.parent}")
        chooser = page.locator("#timeline form[data-fork-from]")
        chooser.get_by_label("Fork from cycle").fill("3")
        chooser.get_by_role("button", name="Fork from this cycle").click()
        form = page.locator("form[data-fork-form]")
        expect(form.get_by_label("Fork at the end of cycle")).to_have_value("3")
        expect(page.locator("[data-facts-at]")).to_contain_text("fact(s) in the context at")
        form.get_by_label("Facts to retract").fill("evaluations/tally-1")
        form.get_by_label("Inputs to add").fill(
            '[{"key": "fork_bids", "id": "b1", "content": "a <b>bid</b>", '
            '"payload": {"amount": "lots"}}]'
        )
        form.get_by_role("button", name="Fork").click()
        error = page.locator("[data-fork-error]")
        expect(error).to_contain_text("inputs[0] (fork_bids/b1): payload does not fit Bid")
        expect(error).to_contain_text("nothing was forked")
        assert console.runs() == [console.parent]
        form = page.locator("form[data-fork-form]")
        expect(form.get_by_label("Facts to retract")).to_have_value("evaluations/tally-1")
        form.get_by_label("Inputs to add").fill(
            '[{"key": "fork_bids", "id": "b1", "content": "a <b>bid</b>", '
            '"payload": {"amount": 5}}]'
        )
        form.get_by_label("cascade").check()
        page.screenshot(path=str(SHOTS / "ui-fork.png"), full_page=True)
        form.get_by_role("button", name="Fork").click()
        family = page.locator("[data-family]")
        expect(family).to_contain_text(f"Forked from {console.parent} at cycle 3")
        expect(family).to_contain_text("retracted evaluations/tally-1")
        fork_id = page.locator("body").get_attribute("data-run-id")
        assert fork_id is not None
        assert fork_id != console.parent
        clip: FloatRect = {"x": 0, "y": 0, "width": 1280, "height": 150}
        page.screenshot(path=str(SHOTS / "ui-forked.png"), clip=clip)
        family.get_by_role("link", name="compare with its parent").click()
        expect(page.locator("[data-first-difference]")).to_contain_text(
            "First difference at the end of cycle 3"
        )
        expect(page.locator('[data-diff-key="fork_bids"]')).to_contain_text("a <b>bid</b>")
        page.screenshot(path=str(SHOTS / "ui-diff.png"), full_page=True)
        page.goto(f"{console.base}/runs/{console.parent}")
        expect(page.locator(f'[data-fork="{fork_id}"]')).to_contain_text("at cycle 3")
        assert not errors
        browser.close()
    code, out = cli("--store", console.store, "verify", fork_id)
    assert code == 0, out


class Elsewhere(BaseHTTPRequestHandler):
    """Another site on 127.0.0.1 whose page posts the fork form to the console."""

    post_page: ClassVar[str] = ""

    def do_GET(self) -> None:
        data = self.post_page.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_console_fork_from_another_site_or_signed_out_or_forged_parent_forks_nothing(
    console: Console,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    server = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    there = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fork = f"{console.base}/runs/{console.parent}/fork"
    try:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            # never signed in: the sign-in form, for the form and its post alike
            stranger = browser.new_page()
            stranger.goto(f"{fork}?at=1")
            expect(stranger.locator("h1")).to_have_text("Sign in")
            page = browser.new_page()
            page.goto(console.served.link)
            page.goto(f"{fork}?at=1")
            csrf = page.locator("form[data-fork-form] input[name=csrf]").get_attribute("value")
            assert csrf
            Elsewhere.post_page = (
                f'<!DOCTYPE html><body><form method="post" action="{fork}">'
                f'<input name="csrf" value="{csrf}"><input name="at" value="1"></form>'
                "<script>document.forms[0].submit()</script></body>"
            )
            page.goto(f"{there}/post")
            expect(page.locator("h1")).to_have_text("Refused")
            expect(page.locator("[data-message]")).to_contain_text(f"came from {there}")
            assert console.runs() == [console.parent]
            # the parent's record changed by hand: its signature fails, nothing is forked
            record = stored_json(console.store, console.parent)
            write_json(console.store, console.parent, {**record, "detail": "edited"})
            page.goto(f"{fork}?at=1")
            expect(page.locator(".banner[data-signature=failed]")).to_be_visible()
            expect(page.locator("[data-cannot-fork]")).to_contain_text("signature")
            page.locator("form[data-fork-form]").get_by_role("button", name="Fork").click()
            expect(page.locator("h1")).to_have_text("Cannot fork this run")
            expect(page.locator("[data-message]")).to_contain_text("Nothing was forked")
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert console.runs() == [console.parent]
    assert cast("str", stored_json(console.store, console.parent)["detail"]) == "edited"
