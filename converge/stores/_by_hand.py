"""Running a short read of a SQLite store with no event loop (`drive`).

`converge runs`, `show` and `review` on a SQLite store make a few queries and print. Starting
anyio's event loop for them (importing asyncio and anyio's backend) took 35 to 60 ms on the
project's machine, more than the queries: a sixth of each command. `drive` runs such a
command's coroutine to its end on the calling thread instead, and while it runs, every
`SqliteRunStore` makes its queries on that thread too (`on_caller`), not in a worker thread.

Only a coroutine whose every `await` is a SQLite store's query can be driven so: anything
else an event loop provides (a sleep, a worker thread, a lock, a PostgreSQL connection)
raises anyio's `NoEventLoopError`, or `RuntimeError` if it waits anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Final, TypeVar

__all__ = ["drive", "on_caller"]

T = TypeVar("T")

_ON_CALLER: Final = ContextVar("converge_store_on_caller", default=False)


def on_caller() -> bool:
    """Whether a store's query runs on the calling thread: inside `drive`."""
    return _ON_CALLER.get()


def drive(start: Callable[[], Coroutine[object, object, T]]) -> T:
    """Run the coroutine `start` returns to its end with no event loop; return its value.

    Raises:
        RuntimeError: The coroutine waited for something only an event loop gives.
    """
    token = _ON_CALLER.set(True)
    try:
        coroutine = start()
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        coroutine.close()
    finally:
        _ON_CALLER.reset(token)
    raise RuntimeError("a coroutine driven with no event loop waited for one (`stores._by_hand`)")
