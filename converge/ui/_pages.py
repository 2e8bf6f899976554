"""The console's pages: the runs, one run (the report, live), and what a refusal says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from .._core._escape import esc
from .._core._listing import RunSummary
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._stop import RunStatus, StopReason
from .._report._header import badge_class
from .._report._parts import RunTimes, format_seconds, format_time, run_times
from .._report._render import report_body
from .._review import SignatureCheck
from ._fact_page import facts_url
from ._html import Viewer, hidden, page
from ._trust import Trust, banner, formation_note

__all__ = [
    "Filters",
    "Listed",
    "gate_url",
    "message_page",
    "run_page",
    "run_url",
    "runs_page",
]


def run_url(run_id: str) -> str:
    """The console path of a run."""
    return f"/runs/{quote(run_id, safe='')}"


def gate_url(run_id: str, gate_id: str) -> str:
    """The console path of a run's pending gate."""
    return f"{run_url(run_id)}/gates/{quote(gate_id, safe='')}"


_STATUS_CLASS: Final = {
    RunStatus.RUNNING: "stop-running",
    RunStatus.PAUSED: "stop-awaiting_human",
    RunStatus.INTERRUPTED: "stop-invariant_violated",
    RunStatus.FINISHED: "stop-converged",
}


def _status(run: RunSummary, record: RunRecord | RecordHead | None) -> str:
    """The status badge: how a finished run ended, or where the others stand.

    Green only for a run that converged without failures.
    """
    status = run.status
    label, cls = status.value, _STATUS_CLASS[status]
    if status is RunStatus.FINISHED:
        outcome = badge_class(record) if record is not None else run.outcome
        label, cls = outcome.replace("_", " "), f"stop-{outcome}"
    return (
        f'<span class="badge {cls}" data-status="{status.value}" data-outcome="'
        f'{esc(label)}">{esc(label)}</span>'
    )


@dataclass(frozen=True, slots=True)
class Filters:
    """What the runs list shows: a status, a stop reason, text in the run id or name."""

    status: str = ""
    stop: str = ""
    text: str = ""

    def keeps(self, run: RunSummary) -> bool:
        """Whether `run` passes every filter set."""
        if self.status and run.status.value != self.status:
            return False
        if self.stop and (run.stop_reason is None or run.stop_reason.value != self.stop):
            return False
        needle = self.text.casefold()
        return not needle or needle in f"{run.run_id} {run.name or ''}".casefold()


@dataclass(frozen=True, slots=True)
class Listed:
    """One run of the list: its summary, record (or why not), and its signature check."""

    summary: RunSummary
    record: RunRecord | RecordHead | None
    """The record, or the head of a finished run stored as rows (all the list needs)."""
    problem: str = ""
    check: SignatureCheck | None = None


def _select(name: str, chosen: str, options: Sequence[str]) -> str:
    items = "".join(
        f'<option value="{esc(option)}"{" selected" if option == chosen else ""}>'
        f"{esc(option or 'any')}</option>"
        for option in ("", *options)
    )
    return f'<label>{name}<select name="{name}">{items}</select></label>'


def _filters(filters: Filters) -> str:
    return (
        '<form class="filters" method="get" action="/">'
        + _select("status", filters.status, [s.value for s in RunStatus])
        + _select("stop", filters.stop, [s.value for s in StopReason])
        + f'<label>run id or formation<input type="search" name="text" value="'
        f'{esc(filters.text)}"></label><button type="submit">Filter</button></form>'
    )


def _run_row(listed: Listed) -> str:
    run = listed.summary
    record = listed.record
    if isinstance(record, RecordHead):
        times, pending = record.times, 0  # a finished run waits on nobody
    else:
        times = run_times(record) if record is not None else RunTimes()
        pending = len(record.pending) if record is not None else 0
    stop = run.stop_reason.value.replace("_", " ") if run.stop_reason else "—"
    problem = f'<br><span class="bad">{esc(listed.problem)}</span>' if listed.problem else ""
    if listed.check is not None and listed.check.failed:
        problem += '<br><b class="bad" data-signature="failed">signature check failed</b>'
    gates = f'<b class="warn">{pending}</b>' if pending else "0"
    return (
        f'<tr data-run="{esc(run.run_id)}"><td class="wrap"><a href="{run_url(run.run_id)}">'
        f"<code>{esc(run.run_id)}</code></a>{problem}</td>"
        f'<td class="wrap">{esc(run.name or "—")}</td>'
        f"<td>{_status(run, record)}</td><td>{esc(stop)}</td>"
        f"<td>{format_time(times.started)}</td>"
        f"<td class='num'>{format_seconds(times.seconds)}</td>"
        f'<td class="num">{run.fact_count}</td><td class="num" data-pending="{pending}">{gates}'
        f"</td><td>{format_time(run.saved_at)}</td></tr>"
    )


def _list_banner(runs: Sequence[Listed], key_set: bool) -> str:
    """Above the list: how many records failed their signature check, or that none can be."""
    if not key_set:
        return (
            '<p class="trust" data-signature="unchecked">Not authenticated: no signing key is '
            "set (CONVERGE_SIGNING_KEY), so nothing shows whether these records were changed "
            "in the store.</p>"
        )
    failed = sum(1 for listed in runs if listed.check is not None and listed.check.failed)
    if not failed:
        return ""
    return (
        f'<div class="banner" data-signature="failed" role="alert"><b>{failed} record(s) '
        "below failed their signature check</b>: they are unsigned, were changed in the "
        "store, or were signed with another key. Do not act on what they show.</div>"
    )


def runs_page(
    runs: Sequence[Listed],
    filters: Filters,
    *,
    viewer: Viewer,
    limit: int,
    key_set: bool,
    inbox: str = "",
) -> str:
    """The runs, newest first, with their filters; `inbox` (the waiting gates) above."""
    head = "".join(
        f"<th>{name}</th>"
        for name in (
            "run",
            "formation",
            "status",
            "stop reason",
            "started",
            "duration",
            "facts",
            "pending gates",
            "saved",
        )
    )
    rows = "".join(_run_row(listed) for listed in runs)
    table = (
        f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        if rows
        else '<p class="empty">No run matches.</p>'
    )
    return page(
        "Runs",
        f"<h1>Runs</h1><p class='note'>The newest {limit} runs in the store that match, newest "
        "first."
        f"</p>{inbox}{_filters(filters)}{table}",
        viewer=viewer,
        banner=_list_banner(runs, key_set),
    )


def _actions(record: RunRecord, csrf: str, found: Trust) -> str:
    """What a reviewer can do to the run: its gates, or continue it when interrupted."""
    cannot = (
        f'<p class="bad" data-cannot-resume>This console will not resume this run: '
        f"{esc(found.refusal)}.</p>"
        if found.refusal
        else ""
    )
    if record.status is RunStatus.PAUSED and record.pending:
        links = "".join(
            f'<li><a href="{gate_url(record.run_id, gate.gate_id)}" data-gate-link>'
            f"<code>{esc(gate.gate_id)}</code></a>: {esc(gate.summary)}</li>"
            for gate in record.pending
        )
        return (
            f'<div class="message" data-waiting><b>{len(record.pending)} proposal(s) wait for '
            f"a decision.</b><ul>{links}</ul>{cannot}</div>"
        )
    if record.status is RunStatus.INTERRUPTED:
        said = f"<b>This run was interrupted ({esc(record.interruption or 'lost')}).</b> "
        if found.refusal:
            return f'<div class="message">{said}{cannot}</div>'
        return (
            f'<form class="message" method="post" action="{run_url(record.run_id)}/continue">'
            f"{said}{hidden('csrf', csrf)}{hidden('version', record.version)}"
            '<button type="submit">Continue the run</button></form>'
        )
    if record.status is RunStatus.RUNNING:
        return (
            '<div class="message"><span class="live" id="live">running: this page follows '
            "each saved cycle</span>"
            '<ul class="live-facts" id="live-facts" data-live-facts></ul>'
            '<div class="live-tokens" id="live-tokens" data-live-tokens></div></div>'
        )
    return ""


def run_page(
    record: RunRecord,
    *,
    viewer: Viewer,
    store_argument: str,
    found: Trust,
    family: str = "",
    fork_from: str = "",
) -> str:
    """A run: its signature check, what a reviewer can do, then the report; live.

    The page follows the run's saves while it can still change. `family` (its parent and
    forks) goes above the report, `fork_from` (a form) below its timeline.
    """
    title = record.name or "Run report"
    body = report_body(
        record,
        title=title,
        store_argument=store_argument,
        gate_href=lambda gate_id: gate_url(record.run_id, gate_id),
        facts_href=lambda key, number: facts_url(record.run_id, key, number),
        timeline_extra=fork_from,
    )
    live = (
        None
        if record.status is RunStatus.FINISHED
        else f"{run_url(record.run_id)}/events?seen={record.version}"
    )
    if live is not None and record.status is RunStatus.RUNNING:
        live += f"&clock={record.integrity.clock}&running=1"  # deltas from this clock on
    data = {
        "run-id": record.run_id,
        "status": record.status.value,
        "stop-reason": record.outcome,
        "version": str(record.version),
    }
    resumable = record.status in (RunStatus.PAUSED, RunStatus.INTERRUPTED)
    note = formation_note(record, found) if resumable else ""
    return page(
        title,
        note + _actions(record, viewer.csrf, found) + family + body,
        viewer=viewer,
        banner=banner(found.check),
        events=live,
        data=data,
    )


def message_page(
    title: str,
    message: str,
    *,
    viewer: Viewer | None,
    refused: bool = False,
    back: str | None = None,
    check: SignatureCheck | None = None,
) -> str:
    """A page that only says something: a refusal, a conflict, an error.

    With `check`, the page shows the banner of the record it speaks of.
    """
    kind = "message refused" if refused else "message"
    link = f'<p><a href="{back}">back</a></p>' if back else ""
    return page(
        title,
        f'<h1>{esc(title)}</h1><div class="{kind}" data-message><p>{esc(message)}</p></div>{link}',
        viewer=viewer,
        banner=banner(check) if check is not None else "",
    )
