"""The console's fact pages: every fact of one key of a run, a page at a time.

The run page embeds the report, whose tables list a bounded page of each key; a key with
facts left out links here. `/runs/RUN/facts?key=KEY&page=N` lists facts
`(N - 1) * FACTS_PER_PAGE + 1` to `N * FACTS_PER_PAGE` of `KEY`, in the run's order, with
links to the pages before and after and to the other keys. Evidence links go to the page
and row of the fact they name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final
from urllib.parse import quote

from .._core._checkpoint import FactRecord
from .._core._escape import esc
from .._core._store import RunRecord
from .._report._facts import fact_row, facts_table
from ._html import Viewer, page

__all__ = ["FACTS_PER_PAGE", "FactPageError", "fact_page", "facts_url"]

FACTS_PER_PAGE: Final = 100
"""How many facts one fact page lists."""


class FactPageError(ValueError):
    """A fact page that does not exist: an unknown key, or a page number out of range."""


def facts_url(run_id: str, key: str, number: int) -> str:
    """The console path of page `number` of `key`'s facts of run `run_id`."""
    return f"/runs/{quote(run_id, safe='')}/facts?key={quote(key, safe='')}&page={number}"


def _page_number(text: str) -> int:
    if not text:
        return 1
    if not text.isdecimal() or len(text) > 12 or int(text) < 1:
        raise FactPageError(f"page must be a whole number from 1, got {text[:40]!r}")
    return int(text)


def _keys(record: RunRecord) -> dict[str, tuple[int, int]]:
    """Each key's name → the index of its first fact and how many it holds."""
    spans: dict[str, tuple[int, int]] = {}
    for index, fact in enumerate(record.facts):
        name = fact.key.value
        start, count = spans.get(name, (index, 0))
        spans[name] = (start, count + 1)
    return spans


def _anchors(
    record: RunRecord, shown: Sequence[FactRecord], spans: dict[str, tuple[int, int]]
) -> dict[str, str]:
    """Where the evidence of the `shown` facts links: its page and row."""
    wanted = {ref for fact in shown for ref in fact.evidence}
    anchors: dict[str, str] = {}
    if not wanted:
        return anchors
    for index, fact in enumerate(record.facts):
        ref = f"{fact.key.value}/{fact.id}"
        if ref in wanted:
            start, _ = spans[fact.key.value]
            number = (index - start) // FACTS_PER_PAGE + 1
            anchors[ref] = f"{facts_url(record.run_id, fact.key.value, number)}#fact-{index}"
    return anchors


def fact_page(
    record: RunRecord, key: str, number_text: str, *, viewer: Viewer, banner: str = ""
) -> str:
    """Page `number_text` (default 1) of `key`'s facts of `record`.

    `banner` says what checking the record's signature found, as on the run page.

    Raises:
        FactPageError: No key `key` in the run, or no such page.
    """
    number = _page_number(number_text)
    spans = _keys(record)
    if key not in spans:
        raise FactPageError(f"run {record.run_id} holds no facts under the key {key[:80]!r}")
    start, total = spans[key]
    pages = (total + FACTS_PER_PAGE - 1) // FACTS_PER_PAGE
    if number > pages:
        raise FactPageError(f"{key} has {pages} page(s) of facts, not {number}")
    first = start + (number - 1) * FACTS_PER_PAGE
    last = min(start + total, first + FACTS_PER_PAGE)
    shown = record.facts[first:last]
    anchors = _anchors(record, shown, spans)
    rows = [fact_row(fact, f"fact-{first + offset}", anchors) for offset, fact in enumerate(shown)]
    run = f"/runs/{quote(record.run_id, safe='')}"

    def link(label: str, target: int, rel: str) -> str:
        if not 1 <= target <= pages or target == number:
            return f'<span class="muted">{label}</span>'
        href = esc(facts_url(record.run_id, key, target))
        return f'<a rel="{rel}" data-page-link="{target}" href="{href}">{label}</a>'

    nav = (
        f'<p class="pager">{link("&laquo; first", 1, "first")} · '
        f"{link('&lsaquo; previous', number - 1, 'prev')}"
        f' · page <b data-count="page" data-value="{number}">{number}</b> of '
        f'<span data-count="pages" data-value="{pages}">{pages}</span> · '
        f"{link('next &rsaquo;', number + 1, 'next')} · {link('last &raquo;', pages, 'last')}</p>"
    )
    keys = " · ".join(
        f'<a href="{esc(facts_url(record.run_id, name, 1))}">{esc(name)}</a> ({count})'
        if name != key
        else f"<b>{esc(name)}</b> ({count})"
        for name, (_, count) in spans.items()
    )
    title = f"{key}: facts {first - start + 1} to {last - start} of {total}"
    body = (
        f'<p><a href="{run}">← the run</a> <code>{esc(record.run_id)}</code></p>'
        f'<h1 data-facts-key="{esc(key)}">{esc(title)}</h1>'
        f'<p class="note">Keys: {keys}</p>{nav}'
        + facts_table(rows, attrs=f' data-count="facts-listed" data-value="{len(rows)}"')
        + nav
    )
    return page(title, body, viewer=viewer, banner=banner, data={"run-id": record.run_id})
