"""The console's pages: the runs, one run (the report, live), and what a refusal says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final
from urllib.parse import quote

from .._report import report_body
from .._stop import RunStatus, StopReason
from .._store import RunRecord, RunSummary
from .._trace import RunTrace
from ._html import hidden, page, text, when

__all__ = [
    "Filters",
    "Listed",
    "gate_url",
    "message_page",
    "run_page",
    "run_url",
    "runs_page",
    "span",
]


def run_url(run_id: str) -> str:
    """The console path of a run."""
    return f"/runs/{quote(run_id, safe='')}"


def gate_url(run_id: str, gate_id: str) -> str:
    """The console path of a run's pending gate."""
    return f"{run_url(run_id)}/gates/{quote(gate_id, safe='')}"


def span(trace: RunTrace) -> tuple[str, str, float | None]:
    """When the run started and ended (UTC, `"—"` if not recorded), and its own time in seconds.

    The end is the last cycle's start plus its longest execution; the duration is the run's
    own time there (a human's wait excluded).
    """
    cycles = trace.cycles
    if not cycles or cycles[0].started_at is None:
        return "—", "—", None
    last = cycles[-1]
    longest = max((e.duration_ms for e in last.executions), default=0.0) / 1000.0
    end = None if last.started_at is None else last.started_at + timedelta(seconds=longest)
    seconds = None if last.at_seconds is None else last.at_seconds + longest
    return when(cycles[0].started_at), when(end), seconds


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


_STATUS_CLASS: Final = {
    RunStatus.RUNNING: "stop-running",
    RunStatus.PAUSED: "stop-awaiting_human",
    RunStatus.INTERRUPTED: "stop-invariant_violated",
    RunStatus.FINISHED: "stop-converged",
}


def _status(status: RunStatus, stop: StopReason | None, clean: bool) -> str:
    cls = _STATUS_CLASS[status]
    if status is RunStatus.FINISHED and (stop is not StopReason.CONVERGED or not clean):
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
        f'<option value="{text(option)}"{" selected" if option == chosen else ""}>'
        f"{text(option or 'any')}</option>"
        for option in ("", *options)
    )
    return f'<label>{name}<select name="{name}">{items}</select></label>'


def _filters(filters: Filters) -> str:
    return (
        '<form class="filters" method="get" action="/">'
        + _select("status", filters.status, [s.value for s in RunStatus])
        + _select("stop", filters.stop, [s.value for s in StopReason])
        + f'<label>run id or formation<input type="search" name="text" value="'
        f'{text(filters.text)}"></label><button type="submit">Filter</button></form>'
    )


def _run_row(listed: Listed) -> str:
    run = listed.summary
    record = listed.record
    started, _, seconds = span(record.trace) if record is not None else ("—", "—", None)
    pending = len(record.pending) if record is not None else 0
    clean = record is None or not (record.trace.failures() or record.trace.rolled_back())
    stop = run.stop_reason.value.replace("_", " ") if run.stop_reason else "—"
    problem = f'<br><span class="bad">{text(listed.problem)}</span>' if listed.problem else ""
    gates = f'<b class="warn">{pending}</b>' if pending else "0"
    return (
        f'<tr data-run="{text(run.run_id)}"><td class="wrap"><a href="{run_url(run.run_id)}">'
        f"<code>{text(run.run_id)}</code></a>{problem}</td>"
        f'<td class="wrap">{text(run.name or "—")}</td>'
        f"<td>{_status(run.status, run.stop_reason, clean)}</td><td>{text(stop)}</td>"
        f"<td>{started}</td><td class='num'>{_duration(seconds)}</td>"
        f'<td class="num">{run.fact_count}</td><td class="num" data-pending="{pending}">{gates}'
        f"</td><td>{when(run.saved_at)}</td></tr>"
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
            f"<code>{text(gate.gate_id)}</code></a>: {text(gate.summary)}</li>"
            for gate in record.pending
        )
        return (
            f'<div class="message" data-waiting><b>{len(record.pending)} proposal(s) wait for '
            f"your decision.</b><ul>{links}</ul></div>"
        )
    if record.status is RunStatus.INTERRUPTED:
        return (
            f'<form class="message" method="post" action="{run_url(record.run_id)}/continue">'
            f"<b>This run was interrupted ({text(record.interruption or 'lost')}).</b> "
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
        f'<h1>{text(title)}</h1><div class="{kind}" data-message><p>{text(message)}</p></div>'
        f"{link}",
        reviewer=reviewer,
    )
