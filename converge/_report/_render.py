"""`render_report` and `report_body`: a stored run as one self-contained HTML page.

The page has inline CSS, inline SVG and a few lines of inline script, allowed by a content
security policy that admits nothing else: no network, no external fonts, and any script a fact
might smuggle in is escaped and would be refused anyway. `report_body` is the part inside
`<main>`, which the review console embeds in its own page; `render_report` wraps it. The
header and summary live in `_report_header`, the gates in `_report_gates`, the charts in
`_report_timeline` and `_report_svg`, the stylesheet, script and policy in `_report_assets`.
Every count the page shows carries `data-count` and `data-value`, so tests and tools can read
them from the DOM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Final

from .._core._checkpoint import AnyFact
from .._core._collector import paused_collector
from .._core._escape import esc
from .._core._record import RunRecord
from .._core._stop import StopReason
from .._core._trace import Execution, Rejection
from .._version import __version__
from ._assets import CSS, POLICY, SCRIPT
from ._facts import fact_table, facts_section, pinned_refs
from ._gates import gates
from ._header import header, summary
from ._parts import executions, section, table, violations
from ._svg import format_ms, latest_facts, lineage_svg, short
from ._timeline import timeline_svg

__all__ = [
    "failures_table",
    "rejections_section",
    "render_built_report",
    "render_report",
    "report_body",
]


def _saved_by(record: RunRecord) -> str:
    """`" saved by converge 0.2.0"`, or nothing for a record older than the field."""
    version = record.converge_version
    return f" saved by converge {esc(version)}" if version else ""


def _timeline(record: RunRecord, extra: str = "") -> str:
    legend = (
        '<div class="legend"><span><i style="background:var(--bar)"></i>ok</span>'
        '<span><i style="background:var(--bad)"></i>failed ✕</span>'
        '<span><i style="background:#fde2c8;border:1px solid var(--budget)"></i>timed out ◷</span>'
        '<span><b class="human-key">◆</b> human decisions applied</span>'
        '<span><b class="continuation-key">■</b> continued after an interruption</span>'
        "<span>x axis: the run&#x27;s own time (a human&#x27;s wait left out); vertical lines: "
        "cycle starts; hover a bar or a line for details</span></div>"
    )
    failed = [(cycle, e) for cycle, e in executions(record) if e.outcome != "ok"]
    failures = failures_table(failed, "Failures and timeouts")
    return section("timeline", "Timeline", legend + timeline_svg(record.trace) + extra + failures)


def failures_table(failed: Sequence[tuple[int, Execution]], title: str) -> str:
    """The calls that did not finish (with their cycles) under `title`, or that none failed."""
    rows = [
        f'<tr data-outcome="{e.outcome}"><td class="num">{cycle}</td>'
        f"<td><code>{esc(e.suggestor)}</code></td>"
        f'<td class="{"bad" if e.outcome == "failed" else "warn"}">'
        f"{e.outcome.replace('_', ' ')}</td><td>{e.phase}</td>"
        f'<td class="num">{format_ms(e.duration_ms)}</td><td class="wrap">'
        f"{esc(e.error or '')}"
        + (
            f"<details><summary>traceback</summary><pre>{esc(e.traceback)}</pre></details>"
            if e.traceback
            else ""
        )
        + "</td></tr>"
        for cycle, e in failed
    ]
    if not rows:
        return '<p class="empty">Every execution finished without error.</p>'
    return f"<h3>{esc(title)}</h3>" + table(
        ["cycle", "suggestor", "outcome", "phase", "duration", "error"],
        rows,
        kind="failures",
        right=(0, 4),
        widths=(7, 20, 10, 9, 10, 44),
    )


_EVIDENCE: Final = attrgetter("evidence")


def _lineage(facts: Sequence[AnyFact], latest: Sequence[int], anchors: dict[str, str]) -> str:
    edges = sum(map(len, map(_EVIDENCE, facts)))
    intro = (
        f'<p class="note">Columns are promotion cycles; an arrow runs from each piece of evidence '
        f"to the fact derived from it ({edges} evidence link(s) in all). Hover a node to "
        "highlight its links; click it to jump to its row. Dashed outline: approved by a human.</p>"
    )
    return section("lineage", "Lineage", intro + lineage_svg(facts, latest, anchors))


def _rejections(record: RunRecord) -> str:
    return rejections_section(record.rejections, len(record.rejections))


def rejections_section(rejections: Sequence[Rejection], total: int) -> str:
    """The rejections section: `rejections` listed, of `total` (the rest said, not listed)."""
    rows = [
        f'<tr data-rejection><td class="num">{r.cycle}</td><td><code>{esc(r.suggestor)}</code></td>'
        f"<td><code>{esc(r.proposal.key.value)}/{esc(r.proposal.id)}</code></td>"
        f'<td class="wrap">{esc(short(r.proposal.content, 400))}</td>'
        f'<td class="wrap">{esc(r.reason)}</td></tr>'
        for r in rejections
    ]
    body = (
        table(
            ["cycle", "suggestor", "proposal", "content", "reason"],
            rows,
            kind="rejections",
            right=(0,),
            widths=(7, 18, 20, 27, 28),
        )
        if rows
        else '<p class="empty">No proposal was rejected.</p>'
    )
    if total > len(rows):
        body += (
            f'<p class="note" data-count="rejections-left-out" data-value="{total - len(rows)}">'
            f"... and {total - len(rows)} more, not listed here.</p>"
        )
    return section("rejections", "Rejections", body, count=total)


def _invariants(record: RunRecord) -> str:
    rows = [
        f'<tr data-violation><td class="num">{v.cycle}</td><td><code>{esc(v.invariant)}</code></td>'
        f'<td>{v.invariant_class.value}</td><td class="wrap">{esc(v.reason)}</td></tr>'
        for v in violations(record)
    ]
    body = (
        table(
            ["cycle", "invariant", "class", "reason"],
            rows,
            kind="violations",
            right=(0,),
            widths=(7, 28, 12, 53),
        )
        if rows
        else '<p class="empty">No invariant violation was recorded.</p>'
    )
    if record.conflict is not None:
        body += (
            f'<h3>Conflict</h3><p class="bad" data-conflict>{esc(record.conflict.describe())}</p>'
            f"<pre>{esc(record.conflict.proposal.content)}</pre>"
        )
    return section("invariants", "Invariants and conflicts", body, count=len(rows))


def _integrity(record: RunRecord, built: str | None) -> str:
    proof = record.integrity
    if built is not None:  # each fact was checked against its kept leaf `built`
        verdict = (
            '<span class="ok">✓ verified</span>: each fact was checked against the leaf the '
            f"engine kept for it {built}"
        )
        return _proof(record, "true", verdict)
    try:
        # The restore recomputes every digest from the stored fields and checks the order and
        # the root; `verify` on the facts it just built would only do that again.
        with paused_collector():
            context = record.restore_context()
        holds = len(context) == proof.fact_count and context.clock == proof.clock
    except Exception as error:  # a report must render whatever the record holds
        status = "error"
        verdict = (
            f'<span class="bad">cannot restore the stored facts</span>: '
            f"<code>{esc(type(error).__name__)}: {esc(error)}</code>"
        )
    else:
        status = "true" if holds else "false"
        verdict = (
            '<span class="ok">✓ verified</span>: the stored facts reproduce the root and clock'
            if holds
            else '<span class="bad">✗ does not verify</span>: the facts do not match the proof'
        )
    return _proof(record, status, verdict)


def _proof(record: RunRecord, status: str, verdict: str) -> str:
    proof = record.integrity
    final = record.trace.final_root or "—"
    body = (
        f'<dl class="proof"><dt>verification</dt><dd data-verified="{status}">{verdict}</dd>'
        f'<dt>Merkle root</dt><dd class="mono">{esc(proof.merkle_root)}</dd>'
        f"<dt>Lamport clock</dt><dd>{proof.clock}</dd>"
        f"<dt>fact count</dt><dd>{proof.fact_count}</dd>"
        f'<dt>initial root</dt><dd class="mono">{esc(record.trace.initial_root)}</dd>'
        f'<dt>trace final root</dt><dd class="mono">{esc(final)}</dd></dl>'
    )
    return section("integrity", "Integrity proof", body)


_NAV: Final = (
    ("summary", "Result"),
    ("timeline", "Timeline"),
    ("facts", "Facts"),
    ("lineage", "Lineage"),
    ("rejections", "Rejections"),
    ("gates", "Human gates"),
    ("invariants", "Invariants"),
    ("integrity", "Integrity"),
)


def _checked(built: bool, facts: Sequence[AnyFact] | None) -> str | None:
    """When the report's facts were checked against their leaves, if the report need not
    restore them to check them (`_integrity`)."""
    if facts is not None:
        return "as the run ended"
    return "as this record was built" if built else None


def _heading(record: RunRecord, title: str | None) -> str:
    if title is not None:
        return title
    return record.name if record.name is not None else "Run report"


def report_body(
    record: RunRecord,
    *,
    title: str | None = None,
    store_argument: str = "",
    gate_href: Callable[[str], str] | None = None,
    facts_href: Callable[[str, int], str] | None = None,
    timeline_extra: str = "",
    built: bool = False,
    facts: Sequence[AnyFact] | None = None,
) -> str:
    """The report's HTML inside `<main>`: header, navigation and every section.

    Without `<html>`, `<head>`, the stylesheet or the script, so another page (the review
    console) can embed it beside `CSS` and `SCRIPT` from `_report_assets`.

    Args:
        record: The run.
        title: The heading; by default the formation's name, else `"Run report"`.
        store_argument: Appended to every printed command so it finds the same store, e.g.
            `" --store /tmp/runs.db"` (already shell-quoted; `""` for the default store).
        gate_href: When given, each pending gate also links to `gate_href(gate_id)`.
        facts_href: When given, a key with facts left out of its table links to
            `facts_href(key, 1)`, the first page of all its facts.
        timeline_extra: HTML shown below the timeline (the console's "fork from this cycle").
        built: `record` was just built by `RunRecord.of`, which checked each fact against
            the leaf the engine kept for it: the integrity section does not restore them.
        facts: The run's facts, when `record` leaves them out (a run saved as rows: its
            result's, which the run's end checked against their leaves); `built` then.
    """
    shown = record.facts if facts is None else facts
    latest = latest_facts(shown)
    table = fact_table(shown, pinned_refs(record, shown, latest))
    anchors = table.anchors
    nav = "".join(f'<a href="#{ident}">{label}</a>' for ident, label in _NAV)
    held = gates(record, anchors, store_argument=store_argument, gate_href=gate_href)
    paused = bool(record.pending)
    return "".join(
        [
            header(record, _heading(record, title), len(shown)),
            f"<nav>{nav}</nav>",
            summary(record, shown, table),
            held if paused else "",
            _timeline(record, timeline_extra),
            facts_section(
                record, shown, table, store_argument=store_argument, facts_href=facts_href
            ),
            _lineage(shown, latest, anchors),
            _rejections(record),
            "" if paused else held,
            _invariants(record),
            _integrity(record, _checked(built, facts)),
        ]
    )


def render_report(record: RunRecord, *, title: str | None = None, store_argument: str = "") -> str:
    """The run as one self-contained HTML page (inline CSS, SVG and a few lines of script).

    It shows the formation, stop reason, times and counts; a summary of what the run decided
    and who approved it; every held proposal in full with the commands that decide it; the
    timeline of every execution on one time axis; the facts by key (with a filter), their
    provenance and promotion record; the lineage graph drawn from `evidence`; rejections,
    human decisions, invariant violations, and the integrity proof with whether the stored
    facts verify against it. Every user-provided text is escaped, and the page loads nothing
    from the network.

    Args:
        record: The run, e.g. `RunRecord.of(result)` or `await store.load(run_id)`.
        title: The heading and page title; by default the heading is the formation's name
            (else `"Run report"`) and the page title `"converge run {run_id}"`.
        store_argument: Appended to the printed `converge review` and `converge resume`
            commands so they find the same store (`" --store PATH"`, shell-quoted).
    """
    return _page(record, title, store_argument, built=False)


def render_built_report(
    record: RunRecord, *, store_argument: str = "", facts: Sequence[AnyFact] | None = None
) -> str:
    """`render_report` of a record `RunRecord.of` just built from a live result.

    Its facts were each checked against the leaf the engine kept at their promotion as the
    record was built, so the integrity section says so instead of restoring them again; a
    record that ended on a violated invariant (a fact changed below the API ends so) is
    restored and checked as any other. `facts`: the run's own, which the run's end checked,
    for a record saved as rows that leaves them out (`_record.saved_facts`).
    """
    built = record.stop_reason is not StopReason.INVARIANT_VIOLATED
    return _page(record, None, store_argument, built=built, facts=facts if built else None)


def _page(
    record: RunRecord,
    title: str | None,
    store_argument: str,
    *,
    built: bool,
    facts: Sequence[AnyFact] | None = None,
) -> str:
    page_title = title if title is not None else f"converge run {record.run_id}"
    body = report_body(record, title=title, store_argument=store_argument, built=built, facts=facts)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="converge"><title>{esc(page_title)}</title>'
        f"<style>{CSS}</style></head>"
        f'<body data-run-id="{esc(record.run_id)}" data-stop-reason="{record.outcome}"><main>'
        f"{body}<footer>Generated by converge {__version__} from a stored run record"
        f"{_saved_by(record)}. This file is self-contained: it loads nothing from the "
        "network.</footer></main>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
