"""How converge stays out of the way of Python's cyclic garbage collector.

`paused_collector` holds the collector off while a stored run's facts are checked whole,
and while a run's end builds the records of its facts (which it then `settle`s). Restoring
a stored run builds about ten objects a fact, and every one of them outlives the loop: none
is garbage, and none is in a reference cycle. Yet each allocation counts toward
the collector's thresholds, so the collector walks the growing heap again and again for
nothing: a fifth of the time of checking 100,000 facts.

`LongLived` and `settle` do the same for a run, cycle by cycle. The collector's oldest
generation is walked whole each time it has grown by a quarter, so a run that keeps its
facts pays for walking all of them again and again: at 100,000 facts, seven full
collections took 0.6 s of the engine's 1.7 s. Yet what a cycle leaves behind is what the
run keeps (its facts, their records, the trace), and a cycle's cyclic garbage is collected
within the cycle by the young generations. So at the end of each merged cycle `settle`
moves every object the process holds into the permanent generation (`gc.freeze`, which
costs the same whatever the heap's size), which the collector never walks, and the run's
end moves them back (`gc.unfreeze`): the collector then works as before. At most the
cyclic garbage still young at a cycle's end outlives its collection until the run ends.

The switch is the process's, so it is shared: concurrent runs (in tasks or threads) hold it
together, and the last to end moves the objects back. It stays off when the collector is
disabled, or when the process froze objects itself (`gc.freeze` at start-up, to share
memory with forked workers): converge never unfreezes what it did not freeze. CPython 3.12
starts with its built-in types' bases and MROs frozen, so there the switch stays off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Generator
from contextlib import contextmanager
from typing import final

__all__ = ["LongLived", "paused_collector", "settle"]

_lock = threading.Lock()
_holders = 0
"""How many blocks of `LongLived` are running with the switch on."""


@contextmanager
def paused_collector() -> Generator[None]:
    """Hold the cyclic collector off for the block, when it is on; turn it back on after.

    For synchronous work that only allocates what it keeps. The switch is the process's:
    another thread's allocations are not collected during the block either.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@final
class LongLived:
    """Let `settle` freeze the heap during the block; move what it froze back at the end.

    The block joins the runs already holding the switch, or turns it on when the
    collector is enabled and nothing is frozen; otherwise it leaves the collector alone.
    """

    __slots__ = ("_joined",)

    def __init__(self) -> None:
        self._joined = False

    def __enter__(self) -> None:
        global _holders
        with _lock:
            self._joined = _holders > 0 or (gc.isenabled() and gc.get_freeze_count() == 0)
            if self._joined:
                _holders += 1

    def __exit__(self, *_exc: object) -> None:
        global _holders
        if not self._joined:
            return
        with _lock:
            _holders -= 1
            if not _holders:
                gc.unfreeze()


def settle() -> None:
    """Move every object the process holds out of the collector's walks, while a block of
    `LongLived` runs (a merged cycle's end: what it left is what the run keeps)."""
    if _holders:
        gc.freeze()
