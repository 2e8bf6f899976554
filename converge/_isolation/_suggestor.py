"""`isolated`, `WorkerPool` and `IsolatedSuggestor`: a suggestor that runs in a worker process.

The engine sees an ordinary suggestor. Its `accepts` answers true without asking anyone; its
`execute` borrows a worker, sends it the facts the worker has not seen yet and the call,
and waits: the worker runs the real `accepts` (a false one comes back as an empty effect)
and `execute` against its read-only copy of the context. What comes back is JSON, validated
here into a new `AgentEffect`; the worker's own objects never reach the engine. A call
that is cancelled (its timeout, the run's) kills the worker and leaves its pid and the kill
reason for the call's `timed_out` record (`_call_note`); a worker that dies, or
answers something that is not a reply for this suggestor, is killed too, and the call fails
with a `WorkerError` naming the suggestor, the cycle and the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import cast, final

import anyio
from pydantic import JsonValue, ValidationError

from .._core._call_note import leave_note
from .._core._context import Context, ContextSnapshot
from .._core._effect import AgentEffect
from .._core._exceptions import ConfigurationError, WorkerError
from .._core._key import AnyKey, key_named
from ._pool import ProcessPool
from ._process import WorkerProcess
from ._spec import arguments_json, spec_id
from ._wire import WireError

__all__ = ["CANCELLED", "IsolatedSuggestor", "WorkerPool", "default_pool", "isolated"]

CANCELLED = "the engine cancelled the call (its suggestor_timeout or the run's time budget)"
"""The `kill_reason` of a call the engine cancelled: its worker was killed mid-call."""

_ENGINE_KEYS = frozenset(("worker_pid", "kill_reason"))
"""The metadata an isolated call's record gets from the engine; a worker's own are dropped."""


@final
class WorkerPool:
    """Worker processes for isolated suggestors, shared by every run of this process.

    `workers` (default: the core count) calls run at once, each in a process of its own;
    the workers start together on first use and are reused across cycles and runs. A worker
    whose call failed for good (it died, timed out or answered garbage) is killed, and the
    next call starts another. `memory_limit` caps each worker's address space in bytes
    (`RLIMIT_AS`); `python` is the interpreter the workers run (default: this one).
    `timeout` bounds every call, even in a run without `suggestor_timeout`: a worker that
    does not answer within it is killed and the call fails with a `WorkerError`.
    `start_timeout` bounds building a suggestor when `isolated` is called. With `guard`
    (the default) the engine's process is made non-dumpable when its first worker starts,
    so that no worker can read its memory or starting environment (on Linux; it also turns
    off the engine's core dumps); see the threat model in the docs.

    Raises:
        ConfigurationError: `workers`, `memory_limit` or `timeout` is not positive.
    """

    __slots__ = ("__weakref__", "_processes")

    def __init__(
        self,
        workers: int | None = None,
        *,
        memory_limit: int | None = None,
        python: str | None = None,
        timeout: float | None = 600.0,
        start_timeout: float = 60.0,
        guard: bool = True,
    ) -> None:
        self._processes = ProcessPool(
            workers,
            memory_limit=memory_limit,
            python=python,
            timeout=timeout,
            start_timeout=start_timeout,
            guard=guard,
        )

    @property
    def workers(self) -> int:
        """How many calls run at once, each in its own worker process."""
        return self._processes.size

    @property
    def timeout(self) -> float | None:
        """The longest a call waits for its worker's answer (`None`: the engine's limits)."""
        return self._processes.timeout

    @property
    def pids(self) -> tuple[int, ...]:
        """The process ids of the idle workers (a worker lent to a call is not listed)."""
        return self._processes.pids()

    def isolated(self, locator: str, /, **arguments: JsonValue) -> IsolatedSuggestor:
        """A suggestor built by `locator` from `arguments` in this pool's workers.

        See [`isolated`][converge.isolated].
        """
        return IsolatedSuggestor(self._processes, locator, arguments)

    def close(self) -> None:
        """Kill every idle worker; a worker lent to a call is killed when it comes back."""
        self._processes.close()

    def __repr__(self) -> str:
        return repr(self._processes)


_DEFAULT: list[WorkerPool] = []
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> WorkerPool:
    """The pool `isolated` uses: one per process, with as many workers as cores."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(WorkerPool())
        return _DEFAULT[0]


def isolated(locator: str, /, **arguments: JsonValue) -> IsolatedSuggestor:
    """A suggestor that is built and runs in a worker process of the default `WorkerPool`.

    `locator` is `"package.module:Attribute"`, a class or a function that returns a
    suggestor (a pack's suggestor, say); the worker calls it with `arguments`, which must
    be JSON. The suggestor is built here once, in a worker, to learn its name and keys, so
    a locator that does not import, arguments that do not serialise, or a pool that cannot
    start raise at once. Register the result like any suggestor.

    Raises:
        ConfigurationError: The locator, the arguments or the pool; the message says which.
    """
    return default_pool().isolated(locator, **arguments)


@final
class IsolatedSuggestor:
    """A suggestor built and called in worker processes; made by [`isolated`][converge.isolated].

    Its `accepts` is always true here: the worker runs the real one before `execute`, and
    a false `accepts` comes back as an empty effect.
    """

    __slots__ = ("_arguments", "_dependencies", "_locator", "_name", "_pool", "_spec", "_writes")

    def __init__(self, pool: ProcessPool, locator: str, arguments: Mapping[str, object]) -> None:
        if not isinstance(locator, str) or ":" not in locator:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"isolated {locator!r}: the locator must read 'package.module:Attribute'"
            )
        self._pool = pool
        self._locator = locator
        self._arguments = arguments_json(locator, arguments)
        self._spec = spec_id()
        reply = pool.describe(
            {
                "op": "describe",
                "spec": self._spec,
                "locator": locator,
                "arguments": self._arguments,
            }
        )
        if reply.get("ok") is not True:
            said = str(reply.get("error")).strip().splitlines() or [""]
            raise ConfigurationError(
                f"isolated {locator!r} cannot be built in a worker: {said[-1]}"
            )
        name = reply.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"isolated {locator!r}: the worker named it {name!r}")
        self._name = name
        self._dependencies = _keys(locator, "dependencies", reply.get("dependencies"))
        writes = reply.get("writes")
        self._writes = None if writes is None else _keys(locator, "writes", writes)

    @property
    def name(self) -> str:
        """The name of the suggestor built in the worker."""
        return self._name

    @property
    def dependencies(self) -> tuple[AnyKey, ...]:
        """The keys the suggestor built in the worker reads."""
        return self._dependencies

    @property
    def writes(self) -> tuple[AnyKey, ...] | None:
        """The keys the suggestor built in the worker may write (`None`: any)."""
        return self._writes

    @property
    def locator(self) -> str:
        """What the worker imports to build it."""
        return self._locator

    @property
    def arguments(self) -> Mapping[str, JsonValue]:
        """What the worker builds it with."""
        return dict(self._arguments)

    def accepts(self, ctx: Context, /) -> bool:
        """Always true here: the worker asks the real `accepts` first."""
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Run the suggestor's `accepts` and `execute` in a worker against `ctx`.

        Raises:
            WorkerError: The suggestor raised in the worker, the worker died, or its reply
                is not a valid effect of this suggestor.
        """
        if not isinstance(ctx, ContextSnapshot):
            raise TypeError(
                f"an isolated suggestor reads a ContextSnapshot, not {type(ctx).__name__}"
            )
        cycle = ctx.cycle + 1
        pool = self._pool
        worker = await pool.acquire()
        reply: dict[str, object] = {}
        try:
            with (
                anyio.CancelScope()
                if pool.timeout is None
                else anyio.move_on_after(pool.timeout) as scope
            ):
                reply = await self._ask(worker, ctx, cycle)
        except BaseException as error:
            said = pool.discard(worker, dying=isinstance(error, WireError))
            if isinstance(error, WireError):
                raise self._error(
                    f"worker {worker.pid} {said} ({error})", cycle, worker, "died", said
                ) from None
            if isinstance(error, anyio.get_cancelled_exc_class()):
                # the engine's timeout or the run's time budget: the record says whose worker
                leave_note(self, {"worker_pid": worker.pid, "kill_reason": CANCELLED})
            raise
        if scope.cancelled_caught:
            pool.discard(worker, dying=False)
            raise self._error(
                f"worker {worker.pid} did not answer within the pool's timeout "
                f"({pool.timeout:g} s) and was killed",
                cycle,
                worker,
                "timeout",
                f"no answer within {pool.timeout:g} s",
            )
        try:
            effect = self._effect(reply, cycle, worker)
        except WorkerError as error:
            if error.reason == "raised":
                pool.release(worker)
                raise
            said = pool.discard(worker)
            error.metadata["kill_reason"] = f"answered garbage; {said}"
            raise
        pool.release(worker)
        return effect

    async def _ask(
        self, worker: WorkerProcess, ctx: ContextSnapshot, cycle: int
    ) -> dict[str, object]:
        reset, facts, problem = worker.delta(ctx)
        if problem is not None:
            worker.forget()
            raise self._error(f"not sent to a worker: {problem}", cycle, worker, "raised")
        message: dict[str, object] = {
            "op": "call",
            "spec": self._spec,
            "reset": reset,
            "facts": facts,
            "cycle": ctx.cycle,
            "clock": ctx.clock,
            "version": ctx.version,
        }
        if self._spec not in worker.built:
            message["locator"] = self._locator
            message["arguments"] = self._arguments
        reply = await worker.ask(message, self._pool.spin())
        worker.built.add(self._spec)
        return reply

    def _effect(
        self, reply: Mapping[str, object], cycle: int, worker: WorkerProcess
    ) -> AgentEffect:
        """The effect a worker's reply holds, validated into new objects."""
        if reply.get("ok") is False:
            error = reply.get("error")
            said = error if isinstance(error, str) else repr(error)
            worker.forget()  # the call may have failed before the copy was updated
            raise self._error(f"raised in worker {worker.pid}:\n{said}", cycle, worker, "raised")
        if reply.get("ok") is not True:
            raise self._error(
                f"worker {worker.pid} answered {_short(reply)}", cycle, worker, "garbage"
            )
        name = reply.get("name")
        if name != self._name:
            raise self._error(
                f"worker {worker.pid} answered for {_short(name)}, not for this suggestor",
                cycle,
                worker,
                "garbage",
            )
        if reply.get("declined") is True:  # its `accepts` said no: an empty effect
            return AgentEffect(metadata={"worker_pid": worker.pid})
        effect = reply.get("effect")
        if isinstance(effect, dict):  # the worker's pid joins what the suggestor recorded
            own = cast("dict[str, object]", effect)
            metadata = own.get("metadata")
            if metadata is None or isinstance(metadata, dict):
                # `worker_pid` and `kill_reason` are the engine's to say, never the worker's
                kept = {
                    name: value
                    for name, value in cast("dict[str, object]", metadata or {}).items()
                    if name not in _ENGINE_KEYS
                }
                own["metadata"] = {**kept, "worker_pid": worker.pid}
        try:
            return AgentEffect.model_validate(effect, strict=False)
        except ValidationError as error:
            problem = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in problem["loc"]) or "effect"
            raise self._error(
                f"worker {worker.pid} answered an invalid effect: {where}: {problem['msg']}",
                cycle,
                worker,
                "garbage",
            ) from None

    def _error(
        self,
        said: str,
        cycle: int,
        worker: WorkerProcess,
        reason: str,
        kill_reason: str | None = None,
    ) -> WorkerError:
        return WorkerError(
            f"isolated suggestor {self._name!r}, cycle {cycle}: {said}",
            suggestor=self._name,
            cycle=cycle,
            pid=worker.pid,
            reason=reason,
            kill_reason=kill_reason,
        )

    def __repr__(self) -> str:
        return f"IsolatedSuggestor({self._locator!r}, name={self._name!r})"


def _keys(locator: str, member: str, value: object) -> tuple[AnyKey, ...]:
    if not isinstance(value, list):
        raise ConfigurationError(f"isolated {locator!r}: the worker sent {member} {value!r}")
    keys: list[AnyKey] = []
    for item in value:  # pyright: ignore[reportUnknownVariableType]
        try:
            keys.append(key_named(str(item)))  # pyright: ignore[reportUnknownArgumentType]
        except ValueError as error:
            raise ConfigurationError(f"isolated {locator!r}: {member}: {error}") from None
    return tuple(keys)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
