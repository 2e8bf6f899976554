"""The console's pages: the runs, one run (the report, live), and what a refusal says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from .._report import report_body
from .._report_header import badge_class
from .._report_parts import RunTimes, format_seconds, format_time, run_times
from .._report_svg import esc
from .._stop import RunStatus, StopReason
from .._store import RunRecord, RunSummary
from ._html import hidden, page

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


def _status(run: RunSummary, record: RunRecord | None) -> str:
    """The status badge: green only for a run that converged without failures."""
    status = run.status
    cls = _STATUS_CLASS[status]
    flawed = record is not None and badge_class(record) == "converged_with_failures"
    if status is RunStatus.FINISHED and (run.stop_reason is not StopReason.CONVERGED or flawed):
        cls = "stop-cycle_budget_exhausted"
    return f'<span class="badge {cls}" data-status="{status.value}">{status.value}</span>'


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
    """One run of the list: its summary, and its record (or why it could not be read)."""

    summary: RunSummary
    record: RunRecord | None
    problem: str = ""


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
    times = run_times(record) if record is not None else RunTimes(None, None, None)
    pending = len(record.pending) if record is not None else 0
    stop = run.stop_reason.value.replace("_", " ") if run.stop_reason else "—"
    problem = f'<br><span class="bad">{esc(listed.problem)}</span>' if listed.problem else ""
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


def runs_page(runs: Sequence[Listed], filters: Filters, *, reviewer: str, limit: int) -> str:
    """The runs, newest first, with their filters."""
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
        f"<h1>Runs</h1><p class='note'>The newest {limit} runs in the store, newest first."
        f"</p>{_filters(filters)}{table}",
        reviewer=reviewer,
    )


def _actions(record: RunRecord, csrf: str) -> str:
    """What a reviewer can do to the run: its gates, or continue it when interrupted."""
    if record.status is RunStatus.PAUSED and record.pending:
        links = "".join(
            f'<li><a href="{gate_url(record.run_id, gate.gate_id)}" data-gate-link>'
            f"<code>{esc(gate.gate_id)}</code></a>: {esc(gate.summary)}</li>"
            for gate in record.pending
        )
        return (
            f'<div class="message" data-waiting><b>{len(record.pending)} proposal(s) wait for '
            f"your decision.</b><ul>{links}</ul></div>"
        )
    if record.status is RunStatus.INTERRUPTED:
        return (
            f'<form class="message" method="post" action="{run_url(record.run_id)}/continue">'
            f"<b>This run was interrupted ({esc(record.interruption or 'lost')}).</b> "
            f"{hidden('csrf', csrf)}{hidden('version', record.version)}"
            '<button type="submit">Continue the run</button></form>'
        )
    if record.status is RunStatus.RUNNING:
        return (
            '<p class="message"><span class="live" id="live">running: this page follows '
            "each saved cycle</span></p>"
        )
    return ""


def run_page(record: RunRecord, *, reviewer: str, csrf: str, store_argument: str) -> str:
    """A run: what a reviewer can do, then the report's content; live while it can change."""
    title = record.name or "Run report"
    body = report_body(
        record,
        title=title,
        store_argument=store_argument,
        gate_href=lambda gate_id: gate_url(record.run_id, gate_id),
    )
    live = (
        None
        if record.status is RunStatus.FINISHED
        else f"{run_url(record.run_id)}/events?seen={record.version}"
    )
    data = {
        "run-id": record.run_id,
        "status": record.status.value,
        "stop-reason": record.outcome,
        "version": str(record.version),
    }
    return page(title, _actions(record, csrf) + body, reviewer=reviewer, events=live, data=data)


def message_page(
    title: str,
    message: str,
    *,
    reviewer: str | None,
    refused: bool = False,
    back: str | None = None,
) -> str:
    """A page that only says something: a refusal, a conflict, an error."""
    kind = "message refused" if refused else "message"
    link = f'<p><a href="{back}">back</a></p>' if back else ""
    return page(
        title,
        f'<h1>{esc(title)}</h1><div class="{kind}" data-message><p>{esc(message)}</p></div>{link}',
        reviewer=reviewer,
    )
