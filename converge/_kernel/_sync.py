"""`call_sync`: what every `*_sync` method does, once it has checked that no loop is running."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Literal, ParamSpec, TypeVar

import anyio

from .._core._exceptions import ConfigurationError

__all__ = ["Backend", "call_sync"]

P = ParamSpec("P")
T = TypeVar("T")

Backend = Literal["asyncio", "trio"]
"""The event loops a `*_sync` method can start."""


def call_sync(
    backend: Backend, method: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run `method(*args, **kwargs)` on a new event loop on `backend`; refuse inside one.

    A new loop cannot start inside a running one (an async function, a Jupyter cell, a
    formation file that `converge run` loads), so that is a `ConfigurationError`, raised
    before anything runs, that names the method to await instead (`method.__qualname__`).
    What the run raises comes out as it was raised, chained to nothing of this check.
    """
    if not _in_event_loop():
        # called outside the handler that found no loop: what the run raises (and the
        # tracebacks its failures record) is chained to nothing of this check
        return anyio.run(partial(method, *args, **kwargs), backend=backend)
    name: str = getattr(method, "__qualname__", "Engine.run")  # or "Formation.run", ...
    owner, _, called = name.rpartition(".")
    instead = f"{owner.lower()}.{called}(...)" if owner else f"{called}(...)"
    raise ConfigurationError(
        f"{name}_sync was called inside a running event loop (in an async function, a Jupyter "
        f"cell, or a formation file that `converge run` loads); it starts a loop of its own, "
        f"which cannot run there. Use `await {instead}` instead; in a formation file, define "
        "the module-level `formation` and let `converge run` run it"
    )


def _in_event_loop() -> bool:
    """Whether this thread is running an event loop anyio knows."""
    try:
        anyio.get_current_task()  # sniffio may be missing (anyio >= 4.12 does not need it)
    except RuntimeError:  # no loop: `NoEventLoopError`, or sniffio's `AsyncLibraryNotFoundError`
        return False
    return True
