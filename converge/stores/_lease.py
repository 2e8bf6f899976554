"""Leases renewed from a thread of their own, which no suggestor can starve.

A running run's lease says that its process is alive: once it runs out, another process may
continue the run. Renewing it from the run's own event loop ties it to that loop, and a
suggestor that blocks the loop (CPU work, a synchronous call) longer than the lease would
let a second process take over a run whose owner is alive; the two would then take it from
each other for ever. `LEASES` renews every running run of the process from one daemon
thread with its own event loop: the lease lasts exactly as long as the process does.

A store's `renew_lease` is therefore called from that thread, in that event loop, while the
run's own calls go on in the run's loop. Renewal never changes a run's version, so it needs
no lock against saves: a renewal that lands after a save fails harmlessly (the save renewed
the lease itself), and only a failure at the version the run still holds means that someone
else took the run over.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from time import monotonic
from typing import Final, Protocol, final

import anyio

from .._core._exceptions import StaleRecordError
from .._kernel._log import warn

__all__ = ["LEASES", "LeaseKeeper", "Leased"]


_LONGEST_TICK: Final = 1.0
"""The longest the keeper sleeps between two looks at its runs."""


class Leased(Protocol):
    """A running run whose lease the keeper renews (`CycleSaver`)."""

    @property
    def run_id(self) -> str:
        """The run."""
        ...

    @property
    def lease(self) -> float:
        """Seconds the run counts as running after a save or a renewal."""
        ...

    @property
    def version(self) -> int:
        """The stored version the run holds (0: not saved yet, nothing to renew)."""
        ...

    @property
    def fresh_at(self) -> float:
        """When (`time.monotonic`) it was last saved or renewed."""
        ...

    async def renew(self, version: int) -> None:
        """Renew the lease at `version`; raises `StaleRecordError` if the run is not there."""
        ...


@final
class LeaseKeeper:
    """Renews the leases of the runs it holds every third of their lease, from its thread.

    The thread starts with the first run held and stops when none is left. It sleeps on a
    condition that `hold` wakes, so a run with a short lease is renewed in time even when the
    thread was waiting for runs with long ones; each round of renewals runs in a short-lived
    event loop of the thread's own.
    """

    __slots__ = ("_held", "_thread", "_wake")

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._held: dict[int, Leased] = {}
        self._thread: threading.Thread | None = None

    def hold(self, run: Leased) -> None:
        """Keep `run`'s lease alive until `release`."""
        with self._wake:
            self._held[id(run)] = run
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name="converge-leases", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def release(self, run: Leased) -> None:
        """Stop renewing `run`'s lease (it stopped, or was taken over).

        The thread is woken, and stops when no run is left: it keeps no reference to a
        released run (a run's saver holds its journal, which can be large).
        """
        with self._wake:
            self._held.pop(id(run), None)
            self._wake.notify()

    def holds(self, run: Leased) -> bool:
        """Whether `run`'s lease is being kept alive."""
        with self._wake:
            return id(run) in self._held

    def _forked(self) -> None:
        """In a forked child: the parent's thread and runs are not this process's."""
        self._wake = threading.Condition()
        self._held = {}
        self._thread = None

    def _main(self) -> None:
        while True:
            with self._wake:
                pause = self._pause(self._held.values())
                if pause is None:
                    self._thread = None
                    return
                now = monotonic()
                due = [
                    run
                    for run in self._held.values()
                    if run.version and now - run.fresh_at >= run.lease / 3
                ]
                if not due:
                    self._wake.wait(pause)
                    continue
            pause = self._renew_all_of(due)
            if pause is not None:  # the store failed: try again a little later, not at once
                with self._wake:
                    self._wake.wait(pause)

    @staticmethod
    def _pause(runs: Iterable[Leased]) -> float | None:
        """How long to sleep before looking at `runs` again; `None` when there are none."""
        pauses = [run.lease / 6 for run in runs]
        return min(_LONGEST_TICK, *pauses) if pauses else None

    def _renew_all_of(self, due: list[Leased]) -> float | None:
        """Renew the leases of `due`; how long to wait before trying the failed ones again.

        `None`: none failed. No reference to a run outlives the call: a thread asleep must
        not keep a finished run's saver, and its journal, alive.
        """
        failed: list[Leased] = []
        anyio.run(self._renew_all, due, failed, backend="asyncio")
        due.clear()
        return self._pause(failed)

    async def _renew_all(self, due: list[Leased], failed: list[Leased]) -> None:
        async with anyio.create_task_group() as group:
            for run in due:
                group.start_soon(self._renew, run, failed)

    async def _renew(self, run: Leased, failed: list[Leased]) -> None:
        version = run.version
        try:
            with anyio.fail_after(run.lease / 3):
                await run.renew(version)
        except StaleRecordError:
            if run.version == version:  # not a save of its own meanwhile: taken over
                self.release(run)  # the run's next save says so
        except Exception as error:
            failed.append(run)
            warn(
                "converge.durable",
                "lease not renewed",
                run_id=run.run_id,
                error=f"{type(error).__name__}: {error}",
            )


LEASES: Final = LeaseKeeper()
"""The process's lease keeper."""

os.register_at_fork(after_in_child=LEASES._forked)  # pyright: ignore[reportPrivateUsage]
