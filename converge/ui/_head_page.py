"""The page of a large finished run stored as rows: its head and the ends of its facts.

A run of more than `WHOLE_SHOW` facts saved a cycle at a time is shown as `converge show`
shows it: what its signed head holds (the result, the failures, the first rejections, the
decisions, each key's count, the times, the proof), its first and last facts in promotion
order, each checked against its own digest, and the cycles of the entries that held them.
Its rows are not read beyond those: the page costs the same whatever the run's size, each
key's facts are paged from the rows (`head_fact_page`), and `converge verify` checks every
fact against the head. The banner says that the signature checked is the head's.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from .._core._checkpoint import FactRecord
from .._core._escape import esc
from .._core._record_head import RecordHead
from .._core._trace import CycleTrace
from .._report._facts import fact_row, facts_table
from .._report._header import decisions_list, flaws_note, head_header
from .._report._parts import format_time, section, table
from .._report._render import failures_table, rejections_section
from .._report._svg import format_ms
from .._review import SignatureCheck
from ..stores._rows_read import Ends
from ._fact_page import FACTS_PER_PAGE, facts_url, listed_anchors, rows_note
from ._html import Viewer, page

__all__ = ["head_banner", "head_page"]


def head_banner(check: SignatureCheck) -> str:
    """What a page of a run stored as rows says about the signature it checked: the head's."""
    if check.failed:
        return (
            f'<div class="banner" data-signature="failed" role="alert"><b>Signature check of '
            f"the run&#x27;s head failed.</b> {esc(check.message)}. What this page shows may "
            "have been changed by someone with write access to the store: do not act on it."
            "</div>"
        )
    if check.state == "unchecked":
        return (
            '<p class="trust" data-signature="unchecked">Not authenticated: no signing key is '
            "set (CONVERGE_SIGNING_KEY), so nothing shows whether this run&#x27;s head or rows "
            "were changed in the store.</p>"
        )
    return (
        '<p class="trust" data-signature="verified" data-signed="head">Signature of the '
        "run&#x27;s head verified: what the page says of the run is authenticated. The facts "
        "are read from its rows, which the head&#x27;s signature does not cover on its own: "
        "each fact shown is checked against its digest, and <code>converge verify</code> "
        "checks them all against the head.</p>"
    )


def _keys(head: RecordHead) -> str:
    """Each key's count, with links to the first and last pages of its facts."""
    run_id = head.record.run_id
    rows: list[str] = []
    for key, count in head.keys:
        name = key.value
        pages = (count + FACTS_PER_PAGE - 1) // FACTS_PER_PAGE
        first = esc(facts_url(run_id, name, 1))
        last = esc(facts_url(run_id, name, pages))
        rows.append(
            f'<tr data-key="{esc(name)}"><td><code>{esc(name)}</code></td>'
            f'<td class="num" data-key-count="{count}">{count}</td>'
            f'<td><a href="{first}" data-facts-link="first">first page</a> · '
            f'<a href="{last}" data-facts-link="last">last page</a> ({pages})</td></tr>'
        )
    return table(["key", "facts", "pages of its facts"], rows, kind="keys", right=(1,))


def _facts(label: str, ident: str, facts: Sequence[FactRecord], anchors: dict[str, str]) -> str:
    rows = [fact_row(fact, f"{ident}-{index}", anchors) for index, fact in enumerate(facts)]
    return f"<h3>{esc(label)}</h3>" + facts_table(
        rows, attrs=f' data-count="{ident}" data-value="{len(rows)}"'
    )


def _cycles(cycles: Sequence[CycleTrace], total: int) -> str:
    """The cycles of the first and last entries read (a bounded timeline)."""
    rows = [
        f'<tr data-cycle="{cycle.cycle}"><td class="num">{cycle.cycle}</td>'
        f"<td>{format_time(cycle.started_at)}</td>"
        f'<td class="num">{len(cycle.executions)}</td>'
        f'<td class="num">{len(cycle.promoted)}</td><td class="num">{len(cycle.rejected)}</td>'
        f'<td class="num">{format_ms(sum(e.duration_ms for e in cycle.executions))}</td></tr>'
        for cycle in cycles
    ]
    note = (
        f'<p class="note" data-count="cycles-listed" data-value="{len(rows)}">Bounded: the '
        f"{len(rows)} cycle(s) of the first and last saves of the run&#x27;s {total}; "
        "every cycle is in <code>converge show --json</code>.</p>"
    )
    return note + table(
        ["cycle", "started", "calls", "promoted", "rejected", "call time"],
        rows,
        kind="cycles",
        right=(0, 2, 3, 4, 5),
    )


def _summary(head: RecordHead) -> str:
    """The result: how the run stopped, its failures not made good, its decisions."""
    record = head.record
    detail = f": {esc(record.detail)}" if record.detail else ""
    return (
        f'<p data-summary="stop">The run stopped <b>{esc(record.outcome.replace("_", " "))}</b>'
        f"{detail}.</p>"
        + flaws_note(
            [execution for _, execution in head.failures],
            head.invalid,
            head.rolled_back,
        )
        + decisions_list(record)
    )


def _shown_facts(head: RecordHead, shown: Ends, problem: str | None, store_argument: str) -> str:
    """Each key's count, then the first and last facts; how to see the rest."""
    record = head.record
    quoted = esc(shlex.quote(record.run_id))
    first, last = shown.first, shown.last
    anchors = listed_anchors(
        {
            **{f"last-{index}": fact for index, fact in enumerate(last)},
            **{f"first-{index}": fact for index, fact in enumerate(first)},
        }
    )
    hidden = record.integrity.fact_count - len(first) - len(last)
    return (
        ("" if problem is not None else rows_note(None))  # a failure is said at the top
        + f'<p class="note" data-count="facts-left-out" data-value="{hidden}">{hidden} of the '
        f"run&#x27;s {record.integrity.fact_count} facts are not shown here: page through "
        "each key&#x27;s facts below, or export them all with <code>converge export "
        f"{quoted} --format jsonl{esc(store_argument)}</code>.</p>"
        + _keys(head)
        + _facts(f"The first {len(first)} facts, in promotion order", "first", first, anchors)
        + _facts(f"The last {len(last)} facts, in promotion order", "last", last, anchors)
    )


def _proof(head: RecordHead, store_argument: str) -> str:
    """The integrity proof the head holds, and the command that checks it."""
    proof = head.record.integrity
    quoted = esc(shlex.quote(head.record.run_id))
    return (
        '<dl class="proof"><dt>verification</dt><dd data-verified="not-checked">not checked '
        f"by this page: <code>converge verify {quoted}{esc(store_argument)}</code> checks "
        "every fact against this root</dd>"
        f'<dt>Merkle root</dt><dd class="mono">{esc(proof.merkle_root)}</dd>'
        f"<dt>Lamport clock</dt><dd>{proof.clock}</dd>"
        f"<dt>fact count</dt><dd>{proof.fact_count}</dd>"
        f"<dt>journal entries</dt><dd>{head.journal_length}</dd>"
        f'<dt>journal digest</dt><dd class="mono">{esc(head.journal_digest)}</dd></dl>'
    )


def head_page(
    head: RecordHead,
    shown: Ends,
    problem: str | None,
    *,
    check: SignatureCheck,
    viewer: Viewer,
    store_argument: str,
    family: str = "",
    fork_from: str = "",
) -> str:
    """The page of a large finished run stored as rows, from its head and `shown`.

    `shown` holds its first and last facts and cycles; `problem` is why those facts do not
    verify (`None`: each matches its digest).
    """
    record = head.record
    title = record.name or "Run report"
    failed = failures_table(head.failures, "Calls that failed and were not made good")
    body = "".join(
        [
            head_header(head, title),
            f'<section id="summary"><h2>Result</h2>{_summary(head)}</section>',
            section(
                "timeline",
                "Cycles",
                _cycles(shown.cycles, record.cycles) + fork_from + failed,
            ),
            section(
                "facts",
                "Facts by key",
                _shown_facts(head, shown, problem, store_argument),
                count=record.integrity.fact_count,
            ),
            rejections_section(head.shown_rejections, head.rejections),
            section("integrity", "Integrity proof", _proof(head, store_argument)),
        ]
    )
    data = {
        "run-id": record.run_id,
        "status": record.status.value,
        "stop-reason": record.outcome,
        "version": str(record.version),
        "layout": "rows",
    }
    unverified = rows_note(problem) if problem is not None else ""
    return page(
        title, family + body, viewer=viewer, banner=head_banner(check) + unverified, data=data
    )
