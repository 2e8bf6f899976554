"""The API reference documents exactly the public names: each page's `::: package.Name`
directives, against the package's `__all__`."""

from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference"
PAGES = {
    "converge": REFERENCE / "converge.md",
    "converge_suggestors": REFERENCE / "converge_suggestors.md",
    "converge.ui": REFERENCE / "converge_ui.md",
}
# mkdocstrings' own syntax: `::: identifier` alone on a line, optionally after a heading's `#`s.
_DIRECTIVE = re.compile(r"^[ ]{0,3}(?:#{1,6}[ ]*)?:::[ ]*(?P<identifier>\S+)[ ]*$", re.MULTILINE)


def directives(page: Path) -> list[str]:
    """Every identifier a page asks mkdocstrings to render, in page order."""
    return _DIRECTIVE.findall(page.read_text(encoding="utf-8"))


def documented_names(package: str, page: Path) -> list[str]:
    """The names a page documents under `package` (`::: package` itself, the intro, is not one).

    An identifier outside the package is kept whole, so that it shows up as an extra name.
    """
    return [
        identifier.removeprefix(f"{package}.")
        for identifier in directives(page)
        if identifier != package
    ]


def test_directive_parsing() -> None:
    text = "::: converge.Engine\n    options:\n      heading_level: 3\n## ::: converge.verify \n"
    assert _DIRECTIVE.findall(text) == ["converge.Engine", "converge.verify"]
    assert _DIRECTIVE.findall("Use `::: converge.Engine` in a page.\n") == []


@pytest.mark.parametrize("package", sorted(PAGES))
def test_reference_page_lists_exactly_all(package: str) -> None:
    page = PAGES[package]
    public: set[str] = set(importlib.import_module(package).__all__)
    documented = documented_names(package, page)
    twice = sorted(name for name, count in Counter(documented).items() if count > 1)
    missing = sorted(public - set(documented))
    extra = sorted(set(documented) - public)
    relative = page.relative_to(REFERENCE.parent.parent)
    assert (missing, extra, twice) == ([], [], []), (
        f"{relative} does not match {package}.__all__: "
        f"missing {missing} (add `::: {package}.Name`), "
        f"extra {extra} (not in __all__), documented twice {twice}"
    )
