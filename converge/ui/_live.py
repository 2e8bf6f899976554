"""A run's event stream: server-sent events fed by the store's per-cycle saves.

The stream reads the run every `poll` seconds and sends `changed` as soon as its stored
version differs from the one the page showed (every save makes a new version) and closes
(the page reloads and opens a new stream); `end` when the run is finished; and a comment
every 15 seconds so that proxies keep the connection open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Final

import anyio
from starlette.responses import StreamingResponse

from .._core._exceptions import RunNotFoundError
from .._core._stop import RunStatus
from .._core._store import RunRecord, RunStore

__all__ = ["event_stream", "run_events"]

_KEEPALIVE: Final = 15.0


def _event(name: str, record: RunRecord) -> str:
    data = json.dumps(
        {"version": record.version, "status": record.status.value, "cycles": record.cycles}
    )
    return f"event: {name}\ndata: {data}\n\n"


async def event_stream(store: RunStore, run_id: str, seen: int, poll: float) -> AsyncGenerator[str]:
    """The server-sent events of a run a page showed at version `seen`."""
    quiet = 0.0
    yield "retry: 2000\n\n"
    while True:
        try:
            record = await store.load(run_id)
        except RunNotFoundError:
            return
        if record.version != seen:
            yield _event("changed", record)
            return
        if record.status is RunStatus.FINISHED:
            yield _event("end", record)
            return
        await anyio.sleep(poll)
        quiet += poll
        if quiet >= _KEEPALIVE:
            quiet = 0.0
            yield ": keep-alive\n\n"


def run_events(store: RunStore, run_id: str, seen: int, poll: float) -> StreamingResponse:
    """The event stream of a run a page showed at version `seen`: `changed` once it is not."""
    return StreamingResponse(
        event_stream(store, run_id, seen, poll),
        media_type="text/event-stream",
        headers={"x-accel-buffering": "no"},
    )
