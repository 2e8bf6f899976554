"""Headless Chromium for the browser tests: skip (or fail in CI) when missing, launch offline."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

__all__ = ["CHROMIUM", "chromium_or_skip", "launch", "signed_in"]

CHROMIUM = Path("/usr/bin/chromium")
REQUIRE = os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1"


def chromium_or_skip(what: str = "the browser tests") -> None:
    """Skip (or, with CONVERGE_REQUIRE_SERVICES=1, fail) when Chromium or Playwright is missing."""
    missing = [
        name
        for name, present in (
            (str(CHROMIUM), CHROMIUM.exists()),
            ("the playwright package", importlib.util.find_spec("playwright") is not None),
        )
        if not present
    ]
    if not missing:
        return
    reason = (
        f"{what} need {' and '.join(missing)}: install with "
        "`apt-get install chromium` or run `bash .ci/run`"
    )
    if "the playwright package" in missing:
        reason += " (playwright is in the `test` dependency group: `pip install -e . --group test`)"
    if REQUIRE:
        pytest.fail(f"CONVERGE_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def launch(playwright: Playwright) -> Browser:
    """Debian's Chromium, headless, with nothing reaching for the network on its own."""
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM),
        args=[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
        ],
    )


@contextmanager
def signed_in(link: str) -> Generator[tuple[Page, list[str]]]:
    """A page of headless Chromium signed in to a console by its one-time `link`.

    Also the errors of the console's scripts on it (a test asserts there were none).
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(link)
            yield page, errors
        finally:
            browser.close()
