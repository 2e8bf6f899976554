"""The console's fact pages: every fact of one key of a run, a page at a time.

The run page embeds the report, whose tables list a bounded page of each key; a key with
facts left out links here. `/runs/RUN/facts?key=KEY&page=N` lists facts
`(N - 1) * FACTS_PER_PAGE + 1` to `N * FACTS_PER_PAGE` of `KEY`, in the run's order, with
links to the pages before and after and to the other keys. Evidence links go to the page
and row of the fact they name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from .._core._checkpoint import FactRecord
from .._core._escape import esc
from .._core._exceptions import StoreError
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._store import RowStore
from .._report._facts import fact_row, facts_table
from ..stores._rows_read import broken, key_facts
from ._html import Viewer, page

__all__ = [
    "FACTS_PER_PAGE",
    "FactPageError",
    "fact_page",
    "facts_url",
    "head_fact_page",
    "listed_anchors",
    "rows_note",
]

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


@dataclass(frozen=True, slots=True)
class _Bounds:
    """Which facts a page lists: of `key`, page `number` of `pages`.

    The key's facts start at `start` of the run's and there are `total`; the page lists
    `first` to `last`.
    """

    key: str
    number: int
    pages: int
    start: int
    total: int
    first: int
    last: int


def _bounds(run_id: str, spans: dict[str, tuple[int, int]], key: str, number_text: str) -> _Bounds:
    """The facts page `number_text` of `key` lists, given each key's span.

    Raises:
        FactPageError: No key `key` in the run, or no such page.
    """
    number = _page_number(number_text)
    if key not in spans:
        raise FactPageError(f"run {run_id} holds no facts under the key {key[:80]!r}")
    start, total = spans[key]
    pages = (total + FACTS_PER_PAGE - 1) // FACTS_PER_PAGE
    if number > pages:
        raise FactPageError(f"{key} has {pages} page(s) of facts, not {number}")
    first = start + (number - 1) * FACTS_PER_PAGE
    return _Bounds(
        key, number, pages, start, total, first, min(start + total, first + FACTS_PER_PAGE)
    )


def _render(
    run_id: str,
    spans: dict[str, tuple[int, int]],
    at: _Bounds,
    shown: Sequence[FactRecord],
    anchors: dict[str, str],
    *,
    viewer: Viewer,
    banner: str,
    note: str = "",
) -> str:
    """The page of `shown`, the facts `at` says, with links to the others and the keys."""
    key, number, pages = at.key, at.number, at.pages
    rows = [
        fact_row(fact, f"fact-{at.first + offset}", anchors) for offset, fact in enumerate(shown)
    ]
    run = f"/runs/{quote(run_id, safe='')}"

    def link(label: str, target: int, rel: str) -> str:
        if not 1 <= target <= pages or target == number:
            return f'<span class="muted">{label}</span>'
        href = esc(facts_url(run_id, key, target))
        return f'<a rel="{rel}" data-page-link="{target}" href="{href}">{label}</a>'

    nav = (
        f'<p class="pager">{link("&laquo; first", 1, "first")} · '
        f"{link('&lsaquo; previous', number - 1, 'prev')}"
        f' · page <b data-count="page" data-value="{number}">{number}</b> of '
        f'<span data-count="pages" data-value="{pages}">{pages}</span> · '
        f"{link('next &rsaquo;', number + 1, 'next')} · {link('last &raquo;', pages, 'last')}</p>"
    )
    keys = " · ".join(
        f'<a href="{esc(facts_url(run_id, name, 1))}">{esc(name)}</a> ({count})'
        if name != key
        else f"<b>{esc(name)}</b> ({count})"
        for name, (_, count) in spans.items()
    )
    title = f"{key}: facts {at.first - at.start + 1} to {at.last - at.start} of {at.total}"
    body = (
        f'<p><a href="{run}">← the run</a> <code>{esc(run_id)}</code></p>'
        f'<h1 data-facts-key="{esc(key)}">{esc(title)}</h1>'
        f'<p class="note">Keys: {keys}</p>{note}{nav}'
        + facts_table(rows, attrs=f' data-count="facts-listed" data-value="{len(rows)}"')
        + nav
    )
    return page(title, body, viewer=viewer, banner=banner, data={"run-id": run_id})


def fact_page(
    record: RunRecord, key: str, number_text: str, *, viewer: Viewer, banner: str = ""
) -> str:
    """Page `number_text` (default 1) of `key`'s facts of `record`.

    `banner` says what checking the record's signature found, as on the run page.

    Raises:
        FactPageError: No key `key` in the run, or no such page.
    """
    spans = _keys(record)
    at = _bounds(record.run_id, spans, key, number_text)
    shown = record.facts[at.first : at.last]
    anchors = _anchors(record, shown, spans)
    return _render(record.run_id, spans, at, shown, anchors, viewer=viewer, banner=banner)


async def head_fact_page(
    store: RowStore, head: RecordHead, key: str, number_text: str, *, viewer: Viewer, banner: str
) -> str:
    """Page `number_text` of `key`'s facts of a run stored as rows, never the whole run.

    Read from its head and the entries that hold them (`key_facts`). Each fact listed is
    checked against its own digest, and their number against the head's; a page whose
    facts fail says so above them (`banner` is the head's signature check). Evidence is
    not linked: finding where it is listed would read the whole run.

    Raises:
        FactPageError: No key `key` in the run, or no such page.
    """
    run_id = head.record.run_id
    spans: dict[str, tuple[int, int]] = {}
    start = 0
    for name, count in head.keys:
        spans[name.value] = (start, count)
        start += count
    at = _bounds(run_id, spans, key, number_text)
    try:
        shown = await key_facts(store, head, key, at.first - at.start, at.last - at.first)
    except StoreError as error:
        shown, problem = (), str(error).strip()
    else:
        problem = broken(run_id, shown)
        if problem is None and len(shown) != at.last - at.first:
            problem = (
                f"run {run_id}: its rows hold fewer facts of {key} than its head says ({at.total})"
            )
    rows = {f"fact-{at.first + offset}": fact for offset, fact in enumerate(shown)}
    return _render(
        run_id,
        spans,
        at,
        shown,
        listed_anchors(rows),
        viewer=viewer,
        banner=banner,
        note=rows_note(problem),
    )


def listed_anchors(rows: dict[str, FactRecord]) -> dict[str, str]:
    """Where the evidence of the facts of a page of a run stored as rows links.

    `rows` maps each row's id to its fact: evidence listed on the page links to its row;
    any other evidence is marked as not listed (finding it would read the whole run).
    """
    anchors = {ref: "" for fact in rows.values() for ref in fact.evidence}
    anchors.update((f"{fact.key.value}/{fact.id}", anchor) for anchor, fact in rows.items())
    return anchors


def rows_note(problem: str | None) -> str:
    """What checking the facts a page shows of a run stored as rows found.

    A banner when one fails (`problem`), else a line saying what was checked and what not.
    """
    if problem is not None:
        return (
            f'<div class="banner" data-integrity="failed" role="alert"><b>The stored facts do '
            f"not verify.</b> {esc(problem)}. Someone with write access to the store may have "
            "changed them: do not act on them.</div>"
        )
    return (
        '<p class="note" data-integrity="shown">Each fact listed here matches its own digest. '
        "The run&#x27;s other rows are not read by this page: <code>converge verify</code> "
        "checks every fact against the signed head.</p>"
    )
