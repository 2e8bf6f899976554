"""`ProcessPool`: worker processes started with a scrubbed environment, lent one call at a time.

A worker (`_process`) is `python -m converge._isolation._worker` started with
`subprocess.Popen`, joined to the engine by a `socketpair` (the only descriptor it inherits
beside `/dev/null` on 0, 1 and 2), in a session of its own (a Ctrl-C meant for the engine
does not reach it), with an environment that holds only `PATH`, the locale, `TZ`, `TMPDIR`,
`HOME` and the `PYTHONPATH` that finds converge (`_guard`). The pool is shared by the
threads and event loops of one process: a lock guards its idle list, and a call that finds
every worker busy polls for one (at most every 5 ms) rather than waiting on a primitive of
one event loop.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
import weakref
from time import perf_counter

import anyio

from .._core._exceptions import ConfigurationError
from ._guard import guard_engine, scrubbed_environment
from ._process import WorkerProcess
from ._wire import WireError, read_frame, write_frame

__all__ = ["SPIN_SECONDS", "ProcessPool", "spin_seconds"]

_POOLS: weakref.WeakSet[ProcessPool] = weakref.WeakSet()
_RECHECK = 0.005
"""The longest a call waits for a worker before looking again (a worker given back by
another thread wakes no one)."""


SPIN_SECONDS = 0.0003
"""How long a call polls for its worker's reply before the event loop sleeps on it."""
_LOAD_EVERY = 0.1
_load: list[float] = [-1.0, 0.0]
"""When the spin was last decided, and the spin decided then."""


def spin_seconds(loadavg: str = "/proc/loadavg") -> float:
    """`SPIN_SECONDS` while no more tasks than cores are runnable (field 4 of Linux's
    `loadavg`, read at most every 0.1 s), else 0: spinning on a busy machine takes a core
    from the worker it waits for. Elsewhere, never spin."""
    now = perf_counter()
    if now - _load[0] < _LOAD_EVERY:
        return _load[1]
    spun = 0.0
    try:
        with open(loadavg, "rb") as file:
            runnable = int(file.read().split()[3].split(b"/")[0])
        if runnable <= (os.cpu_count() or 1):
            spun = SPIN_SECONDS
    except (OSError, ValueError, IndexError):  # not Linux, or not a loadavg
        pass
    _load[0], _load[1] = now, spun
    return spun


class ProcessPool:
    """The workers of a `WorkerPool`: started, lent, given back, killed."""

    def __init__(
        self,
        workers: int | None = None,
        *,
        memory_limit: int | None = None,
        python: str | None = None,
        start_timeout: float = 60.0,
        timeout: float | None = 600.0,
        guard: bool = True,
    ) -> None:
        size = os.cpu_count() or 1 if workers is None else workers
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"WorkerPool: workers must be a positive int, got {workers!r}")
        if memory_limit is not None and (
            isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 1  # pyright: ignore[reportUnnecessaryIsInstance]
        ):
            raise ConfigurationError(
                f"WorkerPool: memory_limit must be a positive number of bytes, got {memory_limit!r}"
            )
        self._size = size
        self._memory_limit = memory_limit
        self._python = python or sys.executable
        self._start_timeout = start_timeout
        self._guard = guard
        if timeout is not None and not timeout > 0:
            raise ConfigurationError(
                f"WorkerPool: timeout must be positive or None, got {timeout!r}"
            )
        self.timeout = timeout
        """The longest a call may wait for its worker's answer, whatever the engine's
        `suggestor_timeout`; `None`: as long as the engine lets it."""
        self._lock = threading.Lock()
        self._idle: list[WorkerProcess] = []
        self._running = 0
        self._waiters: list[tuple[int, anyio.Event]] = []
        """Calls waiting for a worker, each with its thread: a worker given back wakes the
        first waiter of the same thread (an `anyio.Event` belongs to its thread's loop);
        others notice within `_RECHECK` seconds."""
        self._closed = False
        _POOLS.add(self)

    @property
    def size(self) -> int:
        """How many workers may run at once."""
        return self._size

    def pids(self) -> tuple[int, ...]:
        """The process ids of the idle workers (a worker lent to a call is not listed)."""
        with self._lock:
            return tuple(worker.pid for worker in self._idle)

    def spin(self) -> float:
        """How long a call polls for its reply before sleeping: `spin_seconds` while it is
        the pool's only call (polling holds the event loop, which the others need to send
        theirs), else 0."""
        lent = self._running - len(self._idle)  # a stale read costs one spin at most
        return spin_seconds() if lent <= 1 else 0.0

    def close(self) -> None:
        """Kill every idle worker; a worker lent to a call is killed when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._running -= len(idle)
        for worker in idle:
            worker.kill()

    # -- what the suggestor uses ---------------------------------------------------------

    def spawn(self) -> WorkerProcess:
        """Start one worker and send it where to import from.

        Raises:
            OSError: The worker's interpreter could not be started.
        """
        if self._guard:
            guard_engine()
        ours, theirs = socket.socketpair()
        try:
            pdeathsig = "1" if threading.current_thread() is threading.main_thread() else "0"
            process = subprocess.Popen(
                [
                    self._python,
                    "-m",
                    "converge._isolation._worker",
                    str(theirs.fileno()),
                    str(os.getpid()),
                    pdeathsig,
                ],
                env=scrubbed_environment(os.environ),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        worker = WorkerProcess(process, ours)
        hello: dict[str, object] = {"path": sys.path, "memory_limit": self._memory_limit}
        try:
            write_frame(ours, hello)
        except OSError as error:
            raise OSError(f"worker {worker.pid} {worker.kill()} ({error})") from None
        ours.setblocking(False)
        return worker

    def warm(self) -> None:
        """Start the workers not started yet, all at once (they import in parallel)."""
        started: list[WorkerProcess] = []
        with self._lock:
            wanted = self._size - self._running
            self._running += wanted
        try:
            for _ in range(wanted):
                started.append(self.spawn())
        finally:
            with self._lock:
                self._running -= wanted - len(started)
                self._idle.extend(started)

    def describe(self, message: dict[str, object]) -> dict[str, object]:
        """Ask a worker, blocking, what the suggestor of `message` is called and reads.

        Raises:
            ConfigurationError: No worker starts, or the worker died or answered garbage.
        """
        try:
            self.warm()
        except OSError as error:
            raise ConfigurationError(
                f"isolated {message['locator']!r}: the worker pool cannot start "
                f"({self._python}): {error}"
            ) from None
        worker = self._idle_worker()
        if worker is None:  # every worker is busy: ask a worker of its own
            try:
                worker = self.spawn()
            except OSError as error:
                raise ConfigurationError(
                    f"isolated {message['locator']!r}: no worker starts: {error}"
                ) from None
            with self._lock:
                self._running += 1
        sock = worker.sock
        sock.setblocking(True)
        sock.settimeout(self._start_timeout)
        try:
            write_frame(sock, message)
            reply = read_frame(sock)
        except (OSError, WireError) as error:
            said = self.discard(worker)
            raise ConfigurationError(
                f"isolated {message['locator']!r}: the worker pool cannot start: worker "
                f"{worker.pid} {said} ({error})"
            ) from None
        sock.settimeout(None)
        sock.setblocking(False)
        worker.built.add(int(str(message["spec"])))
        self.release(worker)
        return reply

    def _idle_worker(self) -> WorkerProcess | None:
        """An idle worker that still runs; those killed since their last call are dropped."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                worker = self._idle.pop()
                if worker.process.poll() is None:
                    return worker
                self._running -= 1
            worker.sock.close()  # killed between two calls: no call is lost

    async def acquire(self) -> WorkerProcess:
        """An idle worker, started if the pool has room, else the first to come back."""
        while True:
            worker = self._idle_worker()
            if worker is not None:
                return worker
            spawn = False
            with self._lock:
                if self._running < self._size:
                    self._running += 1
                    spawn = True
            if spawn:
                try:
                    return self.spawn()
                except BaseException:
                    with self._lock:
                        self._running -= 1
                    raise
            await self._wait_for_room()

    async def _wait_for_room(self) -> None:
        """Wait until a worker may be free: woken by `_wake`, or after `_RECHECK` seconds."""
        entry = (threading.get_ident(), anyio.Event())
        with self._lock:
            if self._idle or self._running < self._size:  # freed meanwhile
                return
            self._waiters.append(entry)
        try:
            with anyio.move_on_after(_RECHECK):
                await entry[1].wait()
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def _wake(self) -> None:
        """Wake the first call of this thread that waits for a worker."""
        me = threading.get_ident()
        with self._lock:
            index = next((i for i, (thread, _) in enumerate(self._waiters) if thread == me), -1)
            if index < 0:
                return
            _, event = self._waiters.pop(index)
        event.set()

    def release(self, worker: WorkerProcess) -> None:
        """Give back a worker whose call ended well."""
        with self._lock:
            closed = self._closed
            if closed:
                self._running -= 1
            else:
                self._idle.append(worker)
        if closed:
            worker.kill()
        self._wake()

    def discard(self, worker: WorkerProcess, *, dying: bool = True) -> str:
        """Kill a worker whose call failed for good; the next call starts another."""
        said = worker.kill(dying=dying)
        with self._lock:
            self._running -= 1
        self._wake()
        return said

    def __repr__(self) -> str:
        return f"WorkerPool(workers={self._size}, memory_limit={self._memory_limit!r})"


@atexit.register
def _close_all() -> None:  # pragma: no cover - at exit
    for pool in list(_POOLS):
        pool.close()
