"""The top of the HTML run report: its header (name, status, times, counts) and its summary.

The badge agrees with `converge run`'s exit status: a run that converged with calls that
failed and were not made good, invalid proposals, or effects a structural invariant rolled
back (`_shortfall.Shortfall`), reads "converged with failures" in the warning colour, never
the green one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from .._core._checkpoint import AnyFact
from .._core._escape import esc
from .._core._invariant import Violation
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._shortfall import Shortfall
from .._core._stop import RunStatus, StopReason
from .._core._trace import Execution, Rejection, RunTimes
from ._facts import FactTable
from ._parts import (
    count_stat,
    executions,
    format_seconds,
    format_time,
    ref_link,
    run_times,
    violations,
)
from ._svg import short

__all__ = [
    "SUMMARY_FACT_LIMIT",
    "badge_class",
    "decisions_list",
    "flaws_note",
    "head_header",
    "header",
    "summary",
    "times_list",
]

SUMMARY_FACT_LIMIT: Final = 10
"""The summary lists at most this many of the facts the last promoting cycle promoted."""


def badge_class(source: RunRecord | RecordHead) -> str:
    """`converged_with_failures` when `converge run` would exit with its failures status (9),
    else the run's outcome (`converged`, `awaiting_human`, a budget, ...); of a record or
    of the head of a run stored as rows."""
    if isinstance(source, RecordHead):
        record, short = source.record, source.shortfall
    else:
        record, short = source, bool(Shortfall.of(source.trace, source.rejections))
    if record.stop_reason is StopReason.CONVERGED and short:
        return "converged_with_failures"
    return record.outcome


def _iso(moment: datetime | None) -> str:
    if moment is None:
        return ""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def times_list(times: RunTimes) -> str:
    """When the run started and ended, and how long it ran (a human's wait left out)."""
    seconds = "" if times.seconds is None else f"{times.seconds:.6f}"
    return (
        '<dl class="times">'
        f'<dt>started</dt><dd data-started="{_iso(times.started)}">'
        f"{format_time(times.started)}</dd>"
        f'<dt>ended</dt><dd data-ended="{_iso(times.ended)}">{format_time(times.ended)}</dd>'
        f'<dt>duration</dt><dd data-duration="{seconds}" title="the run&#x27;s own time: a '
        f'human&#x27;s wait is not counted">{format_seconds(times.seconds)}</dd></dl>'
    )


def _stats(record: RunRecord, facts: int) -> str:
    calls = [e for _, e in executions(record)]
    failures = sum(e.outcome == "failed" for e in calls)
    timeouts = sum(e.outcome == "timed_out" for e in calls)
    violated = len(violations(record))
    pending = len(record.pending)
    return "".join(
        [
            count_stat("cycles", record.cycles, "cycles"),
            count_stat("facts", facts, "facts"),
            count_stat("tokens", record.tokens, "tokens"),
            count_stat("executions", len(calls), "executions"),
            count_stat("failures", failures, "failures", level="alert" if failures else ""),
            count_stat("timeouts", timeouts, "timeouts", level="alert" if timeouts else ""),
            count_stat("rejections", len(record.rejections), "rejections"),
            count_stat("pending", pending, "pending gates", level="attention" if pending else ""),
            count_stat("decisions", len(record.trace.decisions), "decisions"),
            count_stat("violations", violated, "violations", level="alert" if violated else ""),
        ]
    )


def header(record: RunRecord, title: str, facts: int) -> str:
    """The header: title, formation, run id, status badge and detail, times, counts (the
    run's `facts`)."""
    return _header(record, title, badge_class(record), run_times(record), _stats(record, facts))


def head_header(head: RecordHead, title: str) -> str:
    """The header of a run stored as rows, from its head alone (`header`'s, with the counts
    the head keeps)."""
    record = head.record
    stats = "".join(
        [
            count_stat("cycles", record.cycles, "cycles"),
            count_stat("facts", record.integrity.fact_count, "facts"),
            count_stat("tokens", record.tokens, "tokens"),
            count_stat(
                "failures", len(head.failures), "failures", level="alert" if head.failures else ""
            ),
            count_stat("rejections", head.rejections, "rejections"),
            count_stat("decisions", len(record.trace.decisions), "decisions"),
            count_stat(
                "rolled-back",
                len(head.rolled_back),
                "rolled back",
                level="alert" if head.rolled_back else "",
            ),
        ]
    )
    return _header(record, title, badge_class(head), head.times, stats)


def _header(record: RunRecord, title: str, badge: str, times: RunTimes, stats: str) -> str:
    formation = ""
    if record.name is not None:
        formation += f"formation <b data-formation-name>{esc(record.name)}</b>"
    if record.formation is not None:
        formation += f" from <code data-formation>{esc(record.formation)}</code>"
    if formation:
        formation += " · "
    return (
        f'<header class="run"><h1>{esc(title)}</h1>'
        f'<p class="subtitle">{formation}run <code data-run-id>{esc(record.run_id)}</code></p>'
        f'<p><span class="badge stop-{badge}" data-stop-reason="{record.outcome}" '
        f'data-badge="{badge}">{esc(badge.replace("_", " "))}</span>'
        f'<span class="detail">{esc(record.detail)}</span></p>{times_list(times)}'
        f'<div class="stats">{stats}</div></header>'
    )


def _flaws(record: RunRecord) -> str:
    shortfall = Shortfall.of(record.trace, record.rejections)
    return flaws_note(shortfall.failures, shortfall.invalid, shortfall.rolled_back)


def flaws_note(
    failed: Sequence[Execution], invalid: Sequence[Rejection], rolled: Sequence[Violation]
) -> str:
    """What a converged run fell short of: failed calls not made good, invalid proposals,
    rolled-back effects (`""`: none)."""
    parts: list[str] = []
    if failed:
        names = ", ".join(f"<code>{esc(e.suggestor)}</code>" for e in failed)
        parts.append(f"{len(failed)} call(s) failed and were not made good ({names})")
    if invalid:
        refs = ", ".join(f"<code>{esc(r.proposal.ref)}</code>" for r in invalid)
        parts.append(f"{len(invalid)} proposal(s) were invalid ({refs})")
    if rolled:
        names = ", ".join(f"<code>{esc(v.invariant)}</code>" for v in rolled)
        parts.append(f"{len(rolled)} effect(s) were rolled back ({names})")
    if not parts:
        return ""
    return (
        f'<p class="warn-note" data-summary="failures">But {" and ".join(parts)}: see the '
        '<a href="#timeline">timeline</a> and the <a href="#invariants">invariants</a>.</p>'
    )


def decisions_list(record: RunRecord) -> str:
    """The human decisions the run applied, or that there were none."""
    items: list[str] = []
    for d in record.trace.decisions:
        verdict = (
            '<span class="ok">approved</span>'
            if d.approved
            else '<span class="bad">rejected</span>'
        )
        reason = f": {esc(d.reason)}" if d.reason else ""
        items.append(
            f'<li data-summary-decision="{esc(d.gate_id)}"><code>{esc(d.gate_id)}</code> '
            f"{verdict} by <b>{esc(d.by)}</b>{reason}</li>"
        )
    if not items:
        return '<p class="muted">No human decision was applied.</p>'
    return f'<h3>Human decisions</h3><ul class="decided">{"".join(items)}</ul>'


def _promoted(record: RunRecord, shown: Sequence[AnyFact], facts: FactTable) -> str:
    last = next((c for c in reversed(record.trace.cycles) if c.promoted), None)
    if last is None:
        inputs = sum(fact.promotion.cycle == 0 for fact in shown)
        told = f"; the {inputs} input(s) are the run&#x27;s facts" if inputs else ""
        return f'<p class="muted">No cycle promoted a fact{told}.</p>'
    items: list[str] = []
    for ref in last.promoted[:SUMMARY_FACT_LIMIT]:  # pinned (`pinned_refs`), so listed
        index = facts.rows.get(ref)
        content = "" if index is None else shown[index].content
        items.append(
            f'<li data-summary-fact="{esc(ref)}">{ref_link(ref, facts.anchors)} '
            f'<span class="wrap">{esc(short(content, 240))}</span></li>'
        )
    more = len(last.promoted) - SUMMARY_FACT_LIMIT
    if more > 0:
        items.append(f'<li class="muted">and {more} more</li>')
    return (
        f"<h3>Promoted by cycle {last.cycle}, the last to promote "
        f'<span class="muted">({len(last.promoted)})</span></h3>'
        f'<ul class="promoted">{"".join(items)}</ul>'
    )


def summary(record: RunRecord, shown: Sequence[AnyFact], facts: FactTable) -> str:
    """What the run decided: its stop reason, who decided what, what it last promoted
    (`shown`: the run's facts; `facts`: those the report lists)."""
    detail = f": {esc(record.detail)}" if record.detail else ""
    if record.status is RunStatus.RUNNING:
        said = f"The run is <b>running</b>{detail}; it has not stopped yet"
    elif record.status is RunStatus.INTERRUPTED:
        cause = "cancelled" if record.interruption == "cancelled" else "its process stopped saving"
        said = (
            f"The run was <b>interrupted</b> ({cause}){detail}; it has not stopped: it can be "
            "continued"
        )
    else:
        said = f"The run stopped <b>{esc(record.outcome.replace('_', ' '))}</b>{detail}"
    body = f'<p data-summary="stop">{said}.</p>'
    body += _flaws(record)
    if record.pending:
        body += (
            f'<p class="callout" data-summary="pending">{len(record.pending)} proposal(s) wait '
            'for a human decision: <a href="#held">review the held proposals</a>.</p>'
        )
    body += decisions_list(record) + _promoted(record, shown, facts)
    return f'<section id="summary"><h2>Result</h2>{body}</section>'
