"""The report's facts: a bounded table per key, and the anchors other sections link to.

A run of 100,000 facts inlined whole made a report of tens of megabytes that a browser
needed minutes to lay out. Each key's table lists its first and last `FACT_ENDS` facts and
every fact another section of the report names (the lineage graph's nodes, what the last
promoting cycle promoted, the evidence of held proposals, the facts human decisions made),
in the run's order; a row between two listed facts says how many are left out. The counts
are the run's: each key's heading carries its total, and when any fact is left out the
section prints the command that streams them all (`converge export`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Final

from .._core._checkpoint import AnyFact, key_spans
from .._core._escape import esc
from .._core._key import AnyKey, ContextKey
from .._core._record import RunRecord
from .._kernel._verdict import verdict
from ._parts import ref_link, section, table
from ._svg import LINEAGE_LIMIT, key_colour

__all__ = [
    "FACT_ENDS",
    "FactTable",
    "KeyGroup",
    "fact_row",
    "fact_table",
    "facts_section",
    "facts_table",
    "pinned_refs",
]

FACT_ENDS: Final = 20
"""Each key's table lists at least its first and its last this many facts."""


def _ref(fact: AnyFact) -> str:
    return f"{fact.key.value}/{fact.id}"


_ID: Final = attrgetter("id")


def pinned_refs(record: RunRecord, facts: Sequence[AnyFact], latest: Iterable[int]) -> set[str]:
    """The facts other sections of the report name, so that their tables list them.

    The lineage graph's nodes (`latest`, the indexes `latest_facts` gives), what the last
    promoting cycle promoted (the summary's list, its first `LINEAGE_LIMIT`), the evidence of
    held proposals and the facts human decisions made or rejected: a few hundred at most,
    whatever the run's size. `facts` are the record's (or the run's, `render_built_report`).
    """
    pinned = {_ref(facts[index]) for index in latest}
    last = next((c for c in reversed(record.trace.cycles) if c.promoted), None)
    if last is not None:
        pinned.update(last.promoted[:LINEAGE_LIMIT])
    for gate in record.pending:
        pinned.update(gate.proposal.evidence)
    for decision in record.trace.decisions:
        ref = decision.gate_id.split(":", 2)[-1]
        pinned.add(ref)
        pinned.add(f"{ContextKey.DIAGNOSTIC.value}/hitl-rejected:{ref.partition('/')[2]}")
    return pinned


def _ids_by_key(refs: Iterable[str]) -> dict[str, set[str]]:
    """`"key/id"` references as key → ids (a key's name holds no `/`)."""
    ids: dict[str, set[str]] = {}
    for ref in refs:
        key, slash, ident = ref.partition("/")
        if slash:
            ids.setdefault(key, set()).add(ident)
    return ids


def _named(facts: Sequence[AnyFact], start: int, end: int, ids: Collection[str]) -> Iterator[int]:
    """The indexes from `start` to `end` of the facts whose id is in `ids`, in order: it
    reads each one's id, and builds no reference."""
    if not ids or start >= end:
        return iter(())
    return compress(range(start, end), map(ids.__contains__, map(_ID, facts[start:end])))


@dataclass(frozen=True)
class KeyGroup:
    """One key's facts: where they sit in `record.facts`, and which of them are listed."""

    key: AnyKey
    start: int
    """The index of the key's first fact."""
    total: int
    """How many facts the key holds."""
    listed: tuple[int, ...]
    """Indexes of the listed facts, in the run's order."""


@dataclass(frozen=True)
class FactTable:
    """Which facts the report lists, and the anchor of each fact's row."""

    groups: tuple[KeyGroup, ...]
    """The keys in the run's (key) order."""
    rows: dict[str, int]
    """`"key/id"` of each listed fact → its index in `record.facts` (the last, in a record
    altered to hold a reference twice)."""
    anchors: dict[str, str]
    """`"key/id"` of each listed fact → the id of its row, and `""` for each fact a listed
    one cites that the report leaves out. What the report looks up is listed (`pinned`) or
    cited by what is, so a reference it looks up and does not find here names no fact."""

    @property
    def listed(self) -> int:
        """How many facts the tables list."""
        return sum(len(group.listed) for group in self.groups)


def fact_table(facts: Sequence[AnyFact], pinned: Iterable[str] = ()) -> FactTable:
    """The facts to list: each key's first and last `FACT_ENDS`, and those in `pinned`.

    `anchors` holds the listed facts, and the facts they cite that are left out (`""`): what
    the report's links look up. Not every fact: at 100,000 facts an entry for each held 10 MB
    at the report's peak, a third of what `converge run` holds over the engine. It builds
    the reference of the facts it lists alone, and finds the others by their keys and ids.
    """
    spans = key_spans(facts)
    wanted = _ids_by_key(pinned)
    rows: dict[str, int] = {}
    groups: list[KeyGroup] = []
    for key, start, end in spans:
        head, tail = start + FACT_ENDS, end - FACT_ENDS  # the ends: up to `head`, from `tail`
        listed = [
            *range(start, min(head, end)),
            *_named(facts, head, tail, wanted.get(key.value, ())),
            *range(max(head, tail), end),
        ]
        rows.update((_ref(facts[index]), index) for index in listed)
        groups.append(KeyGroup(key, start, end - start, tuple(listed)))
    anchors = {ref: f"fact-{index}" for ref, index in rows.items()}
    cited = _ids_by_key(
        ref
        for group in groups
        for index in group.listed
        for ref in facts[index].evidence
        if ref not in anchors
    )
    for key, start, end in spans:  # of these, the run's facts: "not listed", not "no such fact"
        for index in _named(facts, start, end, cited.get(key.value, ())):
            anchors[_ref(facts[index])] = ""
    return FactTable(tuple(groups), rows, anchors)


def fact_row(fact: AnyFact, anchor: str, anchors: dict[str, str]) -> str:
    """A fact's row: `anchor` its id, `anchors` where its evidence links go (`ref_link`)."""
    ref = _ref(fact)
    promotion = fact.promotion
    content = esc(fact.content)
    if fact.target is not None:
        content += f' <span class="muted">→ {esc(fact.target.value)}</span>'
    if fact.payload is not None:
        payload = json.dumps(fact.payload, indent=2, ensure_ascii=False, sort_keys=True)
        content += f"<details><summary>payload</summary><pre>{esc(payload)}</pre></details>"
    decision = verdict(fact)
    approved = "" if decision is None else f"<br>{decision[0]} by <b>{esc(decision[1])}</b>"
    evidence = "<br>".join(ref_link(ref, anchors) for ref in fact.evidence) or (
        '<span class="muted">—</span>'
    )
    confidence = max(0.0, min(1.0, fact.confidence))
    return (
        f'<tr id="{anchor}" data-fact="{esc(ref)}">'
        f'<td class="wrap"><code>{esc(fact.id)}</code></td>'
        f'<td class="wrap">{content}</td><td class="wrap"><code>{esc(fact.provenance)}</code></td>'
        f'<td class="num">{fact.confidence:.2f}<span class="meter"><span style="width:'
        f'{confidence * 100:.0f}%"></span></span></td>'
        f"<td>cycle {promotion.cycle} · clock {promotion.clock}<br>"
        f"<code>{esc(promotion.suggestor)}</code> (#{promotion.suggestor_id})<br>"
        f'<span class="gate gate-{promotion.gate}">gate {promotion.gate}</span>{approved}</td>'
        f'<td class="wrap refs">{evidence}</td></tr>'
    )


def _gap(count: int) -> str:
    return (
        f'<tr class="gap" data-gap="{count}"><td colspan="6">… {count} fact(s) not listed '
        "here</td></tr>"
    )


def _group(
    facts: Sequence[AnyFact],
    group: KeyGroup,
    anchors: dict[str, str],
    facts_href: Callable[[str, int], str] | None,
) -> str:
    rows: list[str] = []
    previous = group.start - 1
    for index in group.listed:
        if index - previous > 1:
            rows.append(_gap(index - previous - 1))
        rows.append(fact_row(facts[index], f"fact-{index}", anchors))
        previous = index
    last = group.start + group.total - 1
    if last > previous:
        rows.append(_gap(last - previous))
    value = group.key.value
    listed = len(group.listed)
    note = (
        ""
        if listed == group.total
        else f' <span class="muted" data-count="listed-{value}" data-value="{listed}">'
        f"{listed} listed</span>"
    )
    if facts_href is not None and listed < group.total:
        note += (
            f' <a class="all-facts" data-all-facts="{value}" href="{esc(facts_href(value, 1))}">'
            f"page through all {group.total}</a>"
        )
    return (
        f'<div class="key-group" data-key="{value}"><h3><span class="key-chip" '
        f'style="background:{key_colour(group.key)}"></span>{value}'
        f' <span class="muted" data-count="facts-{value}" data-value="{group.total}">'
        f"({group.total})</span>{note}</h3>" + facts_table(rows) + "</div>"
    )


def facts_table(rows: list[str], *, attrs: str = "") -> str:
    """The table of fact rows (`fact_row`), as the report and the console's fact pages show it."""
    return table(
        ["id", "content", "provenance", "confidence", "promotion", "evidence"],
        rows,
        kind="facts",
        right=(3,),
        widths=(14, 27, 14, 10, 19, 16),
        attrs=attrs,
    )


def facts_section(
    record: RunRecord,
    shown: Sequence[AnyFact],
    facts: FactTable,
    *,
    store_argument: str = "",
    facts_href: Callable[[str, int], str] | None = None,
) -> str:
    """The facts by key: a filter, then each key's bounded table. With `facts_href`, a key
    with facts left out links to `facts_href(key, 1)`, the first of its pages. `shown` are
    the record's facts (or the run's, `render_built_report`)."""
    total = len(shown)
    if not total:
        return section(
            "facts", "Facts", '<p class="empty">The context holds no facts.</p>', count=0
        )
    listed = facts.listed
    export = (
        ""
        if listed == total
        else f'<p class="note" data-count="facts-listed" data-value="{listed}">The tables list '
        f"{listed} of the run&#x27;s {total} facts: the first and last {FACT_ENDS} of each key "
        "and those the other sections name. Every fact, in order: <code>converge export "
        f"{esc(shlex.quote(record.run_id))} --format jsonl{esc(store_argument)}</code> (or "
        "<code>--format csv</code>).</p>"
    )
    search = (
        '<div class="filter"><input type="search" id="fact-filter" placeholder="Filter the '
        'listed facts: any text in a row" aria-label="Filter facts"> <span data-count='
        f'"facts-shown" data-value="{listed}">{listed} of {listed} facts</span></div>'
    )
    groups = "".join(_group(shown, group, facts.anchors, facts_href) for group in facts.groups)
    return section("facts", "Facts by key", export + search + groups, count=total)
