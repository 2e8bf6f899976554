"""`WorkerProcess`: one worker as the engine holds it, and how a worker ended, in words.

A worker is its process, the engine's end of its socket, the specs it has built a suggestor
for, and what it has been sent of the context: `delta` says what a call must send it (the
facts its copy lacks, or all of them again when its copy is of another line), so a call
costs what changed since the worker's last one, not the context.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from typing import final

from pydantic import JsonValue

from .._core._checkpoint import fact_records
from .._core._context import ContextSnapshot
from .._core._fact import Fact
from .._core._key import AnyKey
from ._wire import encode, receive_frame, send_frame

__all__ = ["WorkerProcess", "exit_said"]


def exit_said(returncode: int | None) -> str:
    """How a worker ended, in words: its exit status or the signal that killed it."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (out of memory, or killed from outside)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {returncode}"


@final
class WorkerProcess:
    """One worker: its process, its end of the socket, and what it has been sent."""

    __slots__ = ("built", "pid", "process", "sent", "sock", "version")

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.process: subprocess.Popen[bytes] = process
        self.pid: int = process.pid
        self.sock: socket.socket = sock
        self.built: set[int] = set()
        """The specs this worker has built a suggestor for."""
        self.sent: dict[AnyKey, tuple[int, Fact]] = {}
        """Per key, how many facts the worker's context copy holds and the last of them."""
        self.version: int | None = 0
        """How many facts the worker's copy holds; `None`: unknown, start it again."""

    def forget(self) -> None:
        """The worker's copy is in doubt (a call failed): the next call starts it again."""
        self.sent.clear()
        self.version = None

    def delta(self, snapshot: ContextSnapshot) -> tuple[bool, list[JsonValue], str | None]:
        """Whether the worker must start its copy again, the facts to send it, and what
        changed below the API in `snapshot` (`None`: nothing)."""
        sent = self.sent
        reset = self.version is None or snapshot.version < self.version
        if not reset:
            for key, (held, last) in sent.items():
                facts = snapshot.get(key)
                if len(facts) < held or facts[held - 1] is not last:
                    reset = True  # another run, an older cycle, a fork: not this line
                    break
        since = None if reset else {key: held for key, (held, _) in sent.items()}
        records, problem = fact_records(snapshot, since)
        if reset:
            sent.clear()
        for key in snapshot.keys() if records else ():
            facts = snapshot.get(key)
            sent[key] = (len(facts), facts[-1])
        self.version = snapshot.version
        return reset, [record.model_dump(mode="json") for record in records], problem

    async def ask(self, message: dict[str, object], spun: float = 0.0) -> dict[str, object]:
        """Send one message and wait for the reply, polling for it `spun` seconds first
        (`ProcessPool.spin`)."""
        await send_frame(self.sock, encode(message))
        return await receive_frame(self.sock, spun)

    def kill(self, *, dying: bool = True) -> str:
        """Kill the worker (if it still runs) and say how it ended.

        `dying`: its socket closed, so it is on its way out: give it a moment to end by
        itself, so that its own exit status or signal is what is said.
        """
        process = self.process
        ended = process.poll()
        if ended is None and dying:
            try:
                ended = process.wait(0.2)
            except subprocess.TimeoutExpired:
                ended = None
        said = exit_said(ended)
        if ended is None:
            process.kill()
            try:
                process.wait(2.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process in D state
                pass
        self.sock.close()
        return said
