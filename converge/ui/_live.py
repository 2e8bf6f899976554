"""A run's event stream: server-sent events fed by the store's per-cycle saves.

The stream reads the run every `poll` seconds. While the run is running, each new save is
sent as a `delta`: what changed since the last one the page has, not the run: the version,
status, cycle and fact counts, and the facts promoted since (the latest `DELTA_FACTS`, in
promotion order, with how many more there were); the page updates its counts and its list
of new facts in place. With a store that relays tokens (`TokenRelay`), a running run's
page is also sent `tokens` whenever the text of its running model calls changed: every
call's text so far (an empty list once the calls are done; a relay that cannot be read is
not read again by that stream). When the run's status changes (it stops, pauses, or a
decision taken elsewhere resumes it), the stream sends `changed` and closes, and the page reloads
once to show the whole report. `end` when the run is finished; and a comment every 15
seconds so that proxies keep the connection open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Final

import anyio
from starlette.responses import StreamingResponse

from .._core._escape import visible
from .._core._exceptions import RunNotFoundError
from .._core._live_text import LiveText, TokenRelay
from .._core._record import RunRecord
from .._core._stop import RunStatus
from .._core._store import RowStore, RunStore
from .._report._svg import short
from ..stores._rows_read import large

__all__ = ["DELTA_FACTS", "delta", "event_stream", "run_events", "tokens"]

_KEEPALIVE: Final = 15.0
DELTA_FACTS: Final = 50
"""A delta carries at most this many of the facts promoted since the page's last."""


def _event(name: str, record: RunRecord, version: int | None) -> str:
    data = json.dumps({"version": version, "status": record.status.value, "cycles": record.cycles})
    return f"event: {name}\ndata: {data}\n\n"


def delta(record: RunRecord, clock: int) -> dict[str, object]:
    """What changed in `record` since a page that shows it up to Lamport clock `clock`.

    The facts promoted after `clock`, the latest `DELTA_FACTS` of them in promotion order,
    each as `ref`, `content` (shortened) and `cycle`, its text made visible (control and
    invisible characters written as escapes); `more` says how many earlier ones were left
    out; `clock` is the run's clock now, which the next delta starts from.
    """
    new = [fact for fact in record.facts if fact.promotion.clock > clock]
    new.sort(key=lambda fact: fact.promotion.clock)
    sent = new[-DELTA_FACTS:]
    return {
        "version": record.version,
        "status": record.status.value,
        "cycles": record.cycles,
        "fact_count": len(record.facts),
        "clock": record.integrity.clock,
        "facts": [
            {
                "ref": visible(f"{fact.key.value}/{fact.id}"),
                "content": visible(short(fact.content, 160)),
                "cycle": fact.promotion.cycle,
            }
            for fact in sent
        ],
        "more": len(new) - len(sent),
    }


def tokens(texts: Sequence[LiveText]) -> list[dict[str, object]]:
    """The text of a run's running model calls, for the page.

    Each call's suggestor, call, attempt, cycle, whether earlier text was cut, and its text
    made visible (control and invisible characters written as escapes; newlines and tabs
    kept).
    """
    return [
        {
            "suggestor": visible(text.suggestor),
            "call": text.call,
            "attempt": text.attempt,
            "cycle": text.cycle,
            "cut": text.cut,
            "text": visible(text.text, lines=True),
        }
        for text in texts
    ]


async def event_stream(
    store: RunStore,
    run_id: str,
    seen: int | None,
    poll: float,
    *,
    clock: int | None = None,
    status: RunStatus | None = None,
) -> AsyncGenerator[str]:
    """The server-sent events of a run a page showed at version `seen` (`None`: as it is).

    With the page's `clock` and `status`, a new save of a run that was and still is running
    is sent as a `delta`; any other change as `changed`, which ends the stream. A large
    finished run stored as rows (`large`) is read from its head alone, never assembled: it
    no longer changes, so the stream ends, with `changed` when the page showed a version
    (no page of a finished run follows it: the run was not finished then); its version is
    not in its head and is sent as `null`.
    """
    quiet = 0.0
    relay = store if isinstance(store, TokenRelay) else None
    rows = isinstance(store, RowStore)
    shown: list[dict[str, object]] = []
    yield "retry: 2000\n\n"
    while True:
        try:
            head = await store.load_head(run_id) if rows else None
            if head is not None and large(head):
                yield _event("end" if seen is None else "changed", head.record, None)
                return
            record = await store.load(run_id)
        except RunNotFoundError:
            return
        if seen is None:
            seen = record.version
        if record.version != seen:
            running = status is RunStatus.RUNNING and record.status is RunStatus.RUNNING
            if not running or clock is None:
                yield _event("changed", record, record.version)
                return
            change = delta(record, clock)
            yield f"event: delta\ndata: {json.dumps(change)}\n\n"
            seen, clock, quiet = record.version, record.integrity.clock, 0.0
        elif record.status is RunStatus.FINISHED:
            yield _event("end", record, record.version)
            return
        if relay is not None and status is RunStatus.RUNNING:
            try:
                calls = tokens(await relay.live_text(run_id))
            except Exception:  # the relay is for watching: the run's page goes on without it
                relay, calls = None, shown
            if calls != shown:
                shown = calls
                yield f"event: tokens\ndata: {json.dumps({'calls': calls})}\n\n"
        await anyio.sleep(poll)
        quiet += poll
        if quiet >= _KEEPALIVE:
            quiet = 0.0
            yield ": keep-alive\n\n"


def run_events(
    store: RunStore,
    run_id: str,
    seen: int | None,
    poll: float,
    *,
    clock: int | None = None,
    status: RunStatus | None = None,
) -> StreamingResponse:
    """The event stream of a run a page showed at version `seen` (see `event_stream`)."""
    return StreamingResponse(
        event_stream(store, run_id, seen, poll, clock=clock, status=status),
        media_type="text/event-stream",
        headers={"x-accel-buffering": "no"},
    )
