"""Suggestors that the isolation tests build in worker processes, by locator.

Each is an ordinary suggestor; several misbehave on purpose (they hunt for the signing key,
crash their process, hang, eat memory, or write garbage to the worker's socket).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path

from converge import AgentEffect, Context, ContextKey, ProposedFact


def _hypothesis(name: str, ident: str, content: str, evidence: tuple[str, ...] = ()) -> AgentEffect:
    return AgentEffect.with_proposal(
        ProposedFact(
            key=ContextKey.HYPOTHESES,
            id=ident,
            content=content,
            provenance=name,
            evidence=evidence,
        )
    )


class Echo:
    """Proposes one hypothesis per seed it has not answered yet."""

    dependencies = (ContextKey.SEEDS,)

    def __init__(self, name: str = "echo", prefix: str = "echo") -> None:
        self.name = name
        self.prefix = prefix

    def accepts(self, ctx: Context, /) -> bool:
        return any(
            ctx.find(ContextKey.HYPOTHESES, f"{self.prefix}-{seed.id}") is None
            for seed in ctx.get(ContextKey.SEEDS)
        )

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.HYPOTHESES,
                    id=f"{self.prefix}-{seed.id}",
                    content=f"{self.prefix}: {seed.content}",
                    provenance=self.name,
                    evidence=(seed.ref,),
                )
                for seed in ctx.get(ContextKey.SEEDS)
                if ctx.find(ContextKey.HYPOTHESES, f"{self.prefix}-{seed.id}") is None
            ]
        )


class Counter:
    """Counts the facts it sees under every key, once per cycle, until `until` hypotheses."""

    dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

    def __init__(self, name: str = "counter", until: int = 3) -> None:
        self.name = name
        self.until = until

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) < self.until

    async def execute(self, ctx: Context, /) -> AgentEffect:
        seen = ctx.count(ContextKey.HYPOTHESES)
        return _hypothesis(
            self.name,
            f"{self.name}-{seen}",
            f"saw {ctx.count(ContextKey.SEEDS)} seeds, {seen} hypotheses, version {ctx.version}",
        )


class Spinner:
    """Holds a core for `seconds` of pure Python, then proposes one hypothesis."""

    dependencies = (ContextKey.SEEDS,)

    def __init__(self, name: str, seconds: float = 0.05) -> None:
        self.name = name
        self.seconds = seconds

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.HYPOTHESES, self.name) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        started = time.time()
        end = time.process_time() + self.seconds
        spins = 0
        while time.process_time() < end:
            spins += 1
        effect = _hypothesis(self.name, self.name, "spun")
        return AgentEffect(proposals=effect.proposals, metadata={"wall": [started, time.time()]})


def _block(seconds: float) -> None:
    time.sleep(seconds)


class Misbehaver:
    """Misbehaves as `how` says when it executes: raise, exit, crash, hang, eat memory."""

    dependencies = (ContextKey.SEEDS,)

    def __init__(self, how: str, name: str = "misbehaver", seconds: float = 30.0) -> None:
        self.name = name
        self.how = how
        self.seconds = seconds

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.HYPOTHESES, self.name) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        how = self.how
        if how == "raise":
            raise ValueError("no answer today")
        if how == "system-exit":
            raise SystemExit(3)
        if how == "os-exit":
            os._exit(7)
        if how == "segfault":
            ctypes.string_at(0)
        if how == "hang":
            _block(self.seconds)  # blocks the worker, never the engine
        if how == "memory":
            hoard = bytearray(4 << 30)
            return _hypothesis(self.name, self.name, str(len(hoard)))
        if how == "mutate":  # changes a fact of its own copy below the API
            seed = ctx.get(ContextKey.SEEDS)[0]
            object.__setattr__(seed, "content", "forged")
            return _hypothesis(self.name, self.name, f"changed {seed.ref}")
        if how in _FORGED:
            fd = int(sys.argv[1])  # the worker's socket: answer before the worker does
            body = _FORGED[how]
            os.write(fd, len(body).to_bytes(4, "big") + body)
            _block(0.5)
        if how == "spoof":  # claims another worker, and a kill that never happened
            return AgentEffect(
                proposals=_hypothesis(self.name, self.name, how).proposals,
                metadata={"worker_pid": 1, "kill_reason": "forged", "own": "kept"},
            )
        return _hypothesis(self.name, self.name, how)


_FORGED = {
    "impostor": b'{"ok":true,"name":"someone-else","declined":true}',
    "garbage": b"\xff\xfe not json at all",
    "invalid-effect": b'{"ok":true,"name":"misbehaver","declined":false,"effect":{"tokens":-5}}',
    "not-an-effect": b'{"ok":true,"name":"misbehaver","declined":false,"effect":[1,2]}',
    "no-ok": b'{"name":"misbehaver","effect":null}',
}
"""Replies a misbehaving suggestor writes to the worker's socket in the worker's place."""


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def _in_memory(pid: int, secret: bytes) -> bool:
    """Whether `secret` is in a readable, writable mapping of process `pid`'s memory."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        with Path(f"/proc/{pid}/mem").open("rb", 0) as mem:
            for line in maps:
                fields = line.split()
                start, end = (int(bound, 16) for bound in fields[0].split("-"))
                if not fields[1].startswith("rw") or end - start > 1 << 28:
                    continue
                try:
                    mem.seek(start)
                    if secret in mem.read(end - start):
                        return True
                except OSError:
                    continue
    except OSError:  # not allowed: what isolation is for
        return False
    return False


class KeyHunter:
    """Looks for `secret` everywhere a worker could find it; proposes where it found it."""

    dependencies = (ContextKey.SEEDS,)
    name = "key-hunter"

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.HYPOTHESES, "hunt") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        secret = self.secret
        found: list[str] = []
        if any(secret in f"{k}={v}".encode() for k, v in os.environ.items()):
            found.append("os.environ")
        names = [name for name in os.environ if "CONVERGE" in name or "KEY" in name]
        if names:
            found.append(f"variables {names}")
        if secret in _read("/proc/self/environ"):
            found.append("/proc/self/environ")
        if secret in _read(f"/proc/{os.getppid()}/environ"):
            found.append("the engine's /proc environ")
        if secret in _read(f"/proc/{os.getppid()}/cmdline"):
            found.append("the engine's command line")
        if _in_memory(os.getppid(), secret):
            found.append("the engine's memory")
        files: list[str] = []
        for fd in sorted(int(fd) for fd in os.listdir("/proc/self/fd")):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # the descriptor that listed the directory, closed since
                continue
            if target.startswith("/") and target != "/dev/null":
                files.append(target)
            if secret in _read(f"/proc/self/fd/{fd}"):
                found.append(f"fd {fd}")
        return _hypothesis(self.name, "hunt", "; ".join(found) or f"nothing; files {files}")


class Declining:
    """Never accepts."""

    name = "declining"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return False

    async def execute(self, ctx: Context, /) -> AgentEffect:
        raise AssertionError("execute of a suggestor that never accepts")


def make_echo(name: str) -> Echo:
    """A factory, as a locator may name one."""
    return Echo(name=name, prefix=name)


def make_nothing() -> object:
    """A factory that builds no suggestor."""
    return object()


NOT_CALLABLE = 3
