"""The console's live page shows the text of a running run's model calls, relayed through
the store: sent as a `tokens` event when it changes, shown as text (never as markup), with
control and invisible characters written as escapes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from converge import SqliteRunStore
from converge._core._escape import visible
from converge._core._live_text import LIVE_CHARS, STALE_SECONDS, LiveText
from converge.stores._live_rows import side_file, side_put
from converge.ui._live import tokens
from tests.browser import chromium_or_skip, signed_in
from tests.converge.test_ui_live import _wait_running, running  # noqa: F401  # pyright: ignore[reportPrivateUsage, reportUnusedImport]
from tests.converge.ui_console import start_console, stop_console

HOSTILE = (
    '</pre><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    "\x1b[2J\u202eevil\u202c e\u0301 \U0001f469\u200d\U0001f52c \u05e9\u05dc\u05d5\u05dd "
    "\u2028 \ufeff \U00010348 \x00\nsecond line\tend"
)
"""Markup, a terminal escape, a bidi override, combining marks, a ZWJ sequence, right-to-left
text, a line separator, a BOM, an astral character, a NUL, a newline and a tab."""


def text(words: str, *, call: int = 1, attempt: int = 1, cut: bool = False) -> LiveText:
    return LiveText(cycle=1, suggestor="writer", call=call, attempt=attempt, text=words, cut=cut)


def test_tokens_are_made_visible_and_keep_their_lines() -> None:
    (sent,) = tokens([text(HOSTILE)])
    shown = str(sent["text"])
    assert shown == visible(HOSTILE, lines=True)
    for hidden in ("\x1b", "\u202e", "\u200d", "\ufeff", "\u2028", "\x00"):
        assert hidden not in shown
    assert "\n" in shown
    assert "\t" in shown
    assert "\U0001f469" in shown
    assert "\u05e9" in shown
    assert "\\x1b" in shown
    line = json.dumps({"calls": [sent]})
    assert "\n" not in line  # one data: line
    assert "\u2028" not in line


async def test_the_side_file_replaces_a_calls_text_drops_a_runs_and_hides_stale_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    assert await store.live_text("r") == ()
    assert not side_file(path).exists()  # reading never makes the side file
    await store.put_live_text("r", [text("fir", call=2), text("one")])
    await store.put_live_text("r", [text("first", call=2)])
    await store.put_live_text("other", [text("kept")])
    assert await store.live_text("r") == (text("one"), text("first", call=2))
    await store.drop_live_text("r")
    assert await store.live_text("r") == ()
    assert await store.live_text("other") == (text("kept"),)
    side_put(path, "dead", [text("left by a killed run")], time.time() - STALE_SECONDS - 1)
    assert await store.live_text("dead") == ()  # stale: never read
    await store.put_live_text("r", [text("new")])
    with closing(sqlite3.connect(side_file(path))) as raw:  # `with` alone leaves it open
        runs = {row[0] for row in raw.execute("SELECT run_id FROM live_text")}
    assert runs == {"other", "r"}  # the stale text was deleted by the next write
    assert not path.exists()  # the text is never in the store itself
    store.close()


def blocking(work: Callable[[], Awaitable[object]]) -> None:
    """Run `work` on an event loop of its own thread (Playwright's owns this one)."""
    worker = threading.Thread(target=lambda: anyio.run(work))
    worker.start()
    worker.join(timeout=30)


def test_a_running_runs_page_shows_the_text_of_its_model_calls_as_text(
    running: tuple[str, subprocess.Popen[bytes]],  # noqa: F811
) -> None:
    chromium_or_skip("the review console tests")
    store, _ = running
    record = _wait_running(store)
    relay = SqliteRunStore(store)
    long = "x" * (LIVE_CHARS - 3) + "end"
    blocking(
        lambda: relay.put_live_text(record.run_id, [text(HOSTILE), text(long, call=2, cut=True)])
    )
    served = start_console(store, "--poll", "0.05")
    try:
        with signed_in(served.link) as (page, errors):
            page.goto(f"{served.base}/runs/{record.run_id}")
            if page.locator("body").get_attribute("data-status") != "running":
                pytest.skip("the run ended before the page loaded (a loaded machine)")
            first = page.locator('[data-live-text="writer/1"]')
            first.wait_for(timeout=20_000)
            assert first.text_content() == visible(HOSTILE, lines=True)
            assert page.locator("#live-tokens img").count() == 0
            assert page.locator("#live-tokens script").count() == 0
            assert page.evaluate("window.__pwned === undefined")
            assert page.locator('[data-live-text="writer/2"]').text_content() == long
            assert "its last characters" in page.locator("#live-tokens").inner_text()
            blocking(lambda: relay.drop_live_text(record.run_id))
            page.wait_for_function(
                "() => document.querySelectorAll('[data-live-text]').length === 0"
                " || document.body.getAttribute('data-status') !== 'running'",
                timeout=20_000,
            )
            assert errors == []
    finally:
        stop_console(served)
        relay.close()
