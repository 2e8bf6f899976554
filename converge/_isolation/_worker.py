"""A worker's main loop: `python -m converge._isolation._worker FD PARENT PDEATHSIG`.

The worker builds suggestors from their locators, keeps a read-only copy of the context that
the engine updates with what changed since its last call, and answers each call with the
suggestor's name and its effect as JSON. It exits when the engine closes the socket, and
within a quarter of a second when the engine process dies (the parent-death signal where
the engine started it from its main thread, a watchdog thread everywhere).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import cast

import anyio

from .._core._checkpoint import FactRecord, restore_fact
from .._core._context import ContextSnapshot
from .._core._effect import AgentEffect
from .._core._fact import Fact
from .._core._key import STORED
from .._core._suggestor import describe_suggestor
from ._wire import WireError, encode, read_buffered, read_frame

__all__ = ["build", "main"]

_PR_SET_PDEATHSIG = 1


def build(locator: str, arguments: Mapping[str, object]) -> object:
    """The suggestor that `locator` (`"package.module:Attribute"`) builds from `arguments`.

    Raises:
        ValueError: The locator is malformed, does not import, or names nothing callable.
    """
    module_name, _, attribute = locator.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"locator {locator!r}: use 'package.module:Attribute'")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(f"locator {locator!r}: cannot import {module_name!r}: {error!r}") from None
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"locator {locator!r}: {module_name} has no {attribute!r}") from None
    if not callable(target):
        raise ValueError(f"locator {locator!r}: {attribute!r} is not callable")
    return target(**arguments)


def _watch_parent(parent: int) -> None:
    """Exit the worker as soon as the engine that started it is gone."""
    while True:
        if os.getppid() != parent:
            os._exit(70)
        time.sleep(0.25)


_CAP_SYS_PTRACE = 19
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAPBSET_DROP = 24


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _drop_ptrace() -> None:
    """Give up `CAP_SYS_PTRACE` (a worker started as root has it): with the engine marked
    non-dumpable, no process without it may read the engine's memory or environment."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        if libc.capget(ctypes.byref(header), data) != 0:
            return
        libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_PTRACE, 0, 0, 0)  # for what it may exec
        mask = ~(1 << _CAP_SYS_PTRACE) & 0xFFFFFFFF
        data[0].effective &= mask
        data[0].permitted &= mask
        data[0].inheritable &= mask
        libc.capset(ctypes.byref(header), data)
    except (OSError, AttributeError):  # not Linux
        pass


def _die_with_parent() -> None:
    """Ask the kernel to kill this worker when the thread that started it ends (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog alone
        pass


class _Worker:
    """The worker's state: the suggestors it built and its copy of the context."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.built: dict[int, tuple[object, str]] = {}
        """Each spec's suggestor and its name, checked when built."""
        self.context = ContextSnapshot.empty()

    def suggestor(self, message: Mapping[str, object]) -> tuple[object, str]:
        spec = cast("int", message["spec"])
        known = self.built.get(spec)
        if known is None:
            arguments = cast("Mapping[str, object]", message["arguments"])
            made = build(cast("str", message["locator"]), arguments)
            known = made, describe_suggestor(made)[0]
            self.built[spec] = known
        return known

    def describe(self, message: Mapping[str, object]) -> dict[str, object]:
        made = self.suggestor(message)[0]
        name, dependencies, writes = describe_suggestor(made)
        return {
            "ok": True,
            "name": name,
            "dependencies": [str.__str__(key) for key in dependencies],
            "writes": None if writes is None else [str.__str__(key) for key in writes],
        }

    def update(self, message: Mapping[str, object]) -> None:
        """Bring the context copy up to date with the facts the message carries."""
        base = ContextSnapshot.empty() if message["reset"] else self.context
        facts: list[Fact] = []
        leaves: list[bytes] = []
        for item in cast("Sequence[object]", message["facts"]):
            record = FactRecord.model_validate(item, strict=False, context=STORED)
            fact = restore_fact(record)
            facts.append(fact)
            leaves.append(fact.__dict__["digest"])
        cycle = cast("int", message["cycle"])
        clock = cast("int", message["clock"])
        extend = base._extend  # pyright: ignore[reportPrivateUsage]
        self.context = extend(facts, leaves, cycle, clock)
        if self.context.version != message["version"]:
            raise ValueError(
                f"the context copy holds {self.context.version} facts, the engine's "
                f"{message['version']}"
            )

    async def call(self, message: Mapping[str, object]) -> dict[str, object]:
        made, name = self.suggestor(message)
        accepts = cast("Callable[[ContextSnapshot], object]", getattr(made, "accepts"))  # noqa: B009
        verdict = accepts(self.context)
        if verdict is False:
            return {"ok": True, "name": name, "declined": True, "effect": None}
        if verdict is not True:
            raise TypeError(f"accepts() returned {type(verdict).__name__}, expected bool")
        execute: object = getattr(made, "execute")  # noqa: B009
        effect: object = await cast("Callable[[ContextSnapshot], Awaitable[object]]", execute)(
            self.context
        )
        if not isinstance(effect, AgentEffect):
            raise TypeError(f"execute() returned {type(effect).__name__}, expected AgentEffect")
        return {
            "ok": True,
            "name": name,
            "declined": False,
            "effect": effect.model_dump(mode="json"),
        }

    async def serve(self) -> None:
        # Blocking reads between calls: the worker serves one call at a time, so nothing
        # else needs its event loop meanwhile, and a read wakes sooner than the loop would.
        sock = self.sock
        sock.setblocking(True)
        reader = sock.makefile("rb")
        while True:
            try:
                message = read_buffered(reader)
            except (WireError, OSError):
                return  # the engine closed the socket: nothing more to do
            op = message.get("op")
            reply: dict[str, object]
            try:
                if op == "call":
                    self.update(message)
                    reply = await self.call(message)
                elif op == "describe":
                    reply = self.describe(message)
                else:
                    reply = {"ok": False, "error": f"unknown op {op!r}"}
            except BaseException as error:
                if isinstance(error, anyio.get_cancelled_exc_class()):
                    raise
                reply = {"ok": False, "error": _said(error)}
            try:
                frame = encode(reply)
            except (TypeError, ValueError) as error:
                frame = encode({"ok": False, "error": f"the reply does not serialise: {error}"})
            try:
                sock.sendall(frame)
            except OSError:
                return  # the engine closed the socket mid-call (it killed the call)


def _said(error: BaseException) -> str:
    lines = traceback.format_exception(error)
    text = "".join(lines[-12:]).strip()
    return text[-4000:]


def _hello(sock: socket.socket) -> None:
    """The first message: where to import from, and the memory limit if any."""
    message = read_frame(sock)
    path = cast("list[str]", message.get("path", []))
    sys.path[:] = [entry for entry in path if isinstance(entry, str)]  # pyright: ignore[reportUnnecessaryIsInstance]
    limit = message.get("memory_limit")
    if isinstance(limit, int):
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: Sequence[str]) -> None:
    """Serve the engine on the socket `argv[0]` until it closes it or dies."""
    fd, parent, pdeathsig = int(argv[0]), int(argv[1]), argv[2] == "1"
    if pdeathsig:
        _die_with_parent()
    if os.getppid() != parent:  # the engine died before the signal was armed
        os._exit(70)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _drop_ptrace()
    sock = socket.socket(fileno=fd)
    _hello(sock)
    anyio.run(_Worker(sock).serve)


if __name__ == "__main__":
    main(sys.argv[1:])
