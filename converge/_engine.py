"""`Engine`: registrations, settings, and the entry points of a run."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Literal, final

import anyio

from ._budget import Budget
from ._checkpoint import Checkpoint, restore_snapshot, verify_signature
from ._context import ContextSnapshot
from ._events import EngineEvent, Observer
from ._exceptions import ConfigurationError, InvalidResumeError
from ._executor import ErrorMode
from ._hitl import GateDecision, HitlPolicy
from ._invariant import Invariant
from ._key import ContextKey
from ._merge import ConflictMode
from ._promotion import PromotionPolicy
from ._proposal import ProposedFact
from ._registry import Registry
from ._replay import replay_trace
from ._result import ConvergeResult
from ._run import RunConfig, RunLoop, RunState
from ._store import RunRecord, RunStore, StoreError
from ._suggestor import Suggestor, SuggestorId
from ._trace import RunTrace


def _utc_now() -> datetime:
    return datetime.now(UTC)


__all__ = ["Engine"]


@final
class Engine:
    """Runs registered suggestors to a fixed point, a budget, a conflict or a human decision.

    Args:
        budget: Limits on each run.
        policy: Limits of the engine gate.
        max_concurrency: Most suggestors executing at once in a cycle (`None`: all eligible).
        suggestor_timeout: Seconds one `execute` may take before it is cancelled and recorded
            as `"timed_out"` (`None`: no limit).
        on_conflict: `"stop"` ends the run with `CONFLICT` when a proposal contradicts a fact;
            `"reject"` records a rejection and goes on.
        on_suggestor_error: `"isolate"` records a failing `accepts`/`execute` and goes on;
            `"raise"` re-raises the exception from `run`.
        hitl: Which proposals wait for a human; `None` lets every proposal through.
        clock: Returns the current aware `datetime`, for gate deadlines (default: now in UTC).
        signing_key: Signs checkpoints with HMAC-SHA256 and refuses unsigned or mis-signed
            ones on resume.
        store: Saves every finished or paused run before `run`/`resume` returns.
        observers: Receive every event of every run (see `EngineEvent`).
        record_effects: Keep each execution's `AgentEffect` in the trace, for `replay`.
    """

    def __init__(
        self,
        *,
        budget: Budget | None = None,
        policy: PromotionPolicy | None = None,
        max_concurrency: int | None = None,
        suggestor_timeout: float | None = None,
        on_conflict: ConflictMode = "stop",
        on_suggestor_error: ErrorMode = "isolate",
        hitl: HitlPolicy | None = None,
        clock: Callable[[], datetime] | None = None,
        signing_key: bytes | str | None = None,
        store: RunStore | None = None,
        observers: Sequence[Observer] = (),
        record_effects: bool = False,
    ) -> None:
        for index, observer in enumerate(observers):
            if not callable(getattr(observer, "on_event", None)):
                raise ConfigurationError(
                    f"observers[{index}] ({type(observer).__name__}) has no on_event method"
                )
        if max_concurrency is not None and max_concurrency < 1:
            raise ConfigurationError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if suggestor_timeout is not None and not suggestor_timeout > 0:
            raise ConfigurationError(f"suggestor_timeout must be positive, got {suggestor_timeout}")
        if on_conflict not in ("stop", "reject"):
            raise ConfigurationError(f"on_conflict must be 'stop' or 'reject', got {on_conflict!r}")
        if on_suggestor_error not in ("isolate", "raise"):
            raise ConfigurationError(
                f"on_suggestor_error must be 'isolate' or 'raise', got {on_suggestor_error!r}"
            )
        self._config = RunConfig(
            budget=budget or Budget(),
            policy=policy or PromotionPolicy(),
            on_conflict=on_conflict,
            on_suggestor_error=on_suggestor_error,
            max_concurrency=max_concurrency,
            suggestor_timeout=suggestor_timeout,
            hitl=hitl,
            clock=clock or _utc_now,
            signing_key=signing_key.encode() if isinstance(signing_key, str) else signing_key,
            observers=tuple(observers),
            record_effects=record_effects,
        )
        if self._config.signing_key is not None and not self._config.signing_key:
            raise ConfigurationError("signing_key must not be empty")
        self._registry = Registry()
        self._store = store

    def __repr__(self) -> str:
        return f"Engine(suggestors={len(self._registry.names)}, budget={self._config.budget!r})"

    @property
    def budget(self) -> Budget:
        """The budget each run is held to."""
        return self._config.budget

    @property
    def suggestor_names(self) -> tuple[str, ...]:
        """Registered suggestor names, in registration (and merge) order."""
        return self._registry.names

    def register_suggestor(self, suggestor: Suggestor, /) -> SuggestorId:
        """Register a suggestor, always active; returns its id (0, 1, 2, ... in order).

        Raises:
            ConfigurationError: It does not satisfy `Suggestor` (the message names the missing
                member), or its name is already taken.
        """
        return self._registry.add(suggestor, None)

    def register_suggestor_in_pack(self, pack_id: str, suggestor: Suggestor, /) -> SuggestorId:
        """Register a suggestor that runs only while `pack_id` is active (all packs are by default).

        Raises:
            ConfigurationError: As for `register_suggestor`, or `pack_id` is blank.
        """
        return self._registry.add(suggestor, pack_id)

    def register_invariant(self, invariant: Invariant, /) -> None:
        """Register an invariant, checked according to its `invariant_class`.

        Raises:
            ConfigurationError: It does not satisfy `Invariant`, or its name is taken.
        """
        self._registry.add_invariant(invariant, None)

    def register_pack(
        self,
        pack_id: str,
        *,
        suggestors: Sequence[Suggestor] = (),
        invariants: Sequence[Invariant] = (),
    ) -> tuple[SuggestorId, ...]:
        """Register a bundle of suggestors and invariants that are active with `pack_id`.

        Returns the suggestors' ids, in order.

        Raises:
            ConfigurationError: As for `register_suggestor` and `register_invariant`.
        """
        ids = tuple(self._registry.add(s, pack_id) for s in suggestors)
        for invariant in invariants:
            self._registry.add_invariant(invariant, pack_id)
        return ids

    def set_active_packs(self, pack_ids: Iterable[str] | None, /) -> None:
        """Run only the suggestors of these packs (plus those registered without a pack).

        `None` makes every pack active again.

        Raises:
            ConfigurationError: A pack id was never registered.
        """
        self._registry.set_active(pack_ids)

    async def run(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] = (),
    ) -> ConvergeResult:
        """Run to a stop reason, starting from `context` (empty by default) plus `inputs`.

        Inputs are merged at cycle 0 by the pseudo-suggestor `"input"`, through the gate.
        A stopped run returns its last consistent snapshot; caller cancellation propagates.

        Raises:
            ConfigurationError: `context` is not a `ContextSnapshot`, or an input is not a
                `ProposedFact`.
            StoreError: The engine has a store and saving failed (`error.result` keeps the run).
        """
        return await self._run(self._config, context, inputs)

    async def _run(
        self,
        config: RunConfig,
        context: ContextSnapshot | None,
        inputs: Iterable[ProposedFact],
    ) -> ConvergeResult:
        start = ContextSnapshot.empty() if context is None else context
        if not isinstance(start, ContextSnapshot):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"context must be a ContextSnapshot, got {type(start).__name__}"
            )
        given = tuple(inputs)
        for index, item in enumerate(given):
            if not isinstance(item, ProposedFact):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError(
                    f"inputs[{index}] must be a ProposedFact, got {type(item).__name__}"
                )
        state = RunLoop.new_state(start._at_cycle(0), given)  # pyright: ignore[reportPrivateUsage]
        result = await RunLoop(config, self._registry.view(), state).start()
        return await self._save(result)

    @property
    def store(self) -> RunStore | None:
        """Where runs are saved, if anywhere."""
        return self._store

    async def _save(self, result: ConvergeResult) -> ConvergeResult:
        store = self._store
        if store is None:
            return result
        try:
            with anyio.CancelScope(shield=True):
                await store.save(RunRecord.of(result))
        except Exception as error:
            raise StoreError(
                f"run {result.run_id} ({result.stop_reason.value}) could not be saved: "
                f"{type(error).__name__}: {error}",
                result=result,
            ) from error
        return result

    async def resume(
        self, checkpoint: Checkpoint, decisions: Iterable[GateDecision] = ()
    ) -> ConvergeResult:
        """Apply human decisions to a paused run and continue it where it stopped.

        Every pending gate that has not expired needs exactly one decision; expired gates get
        the policy's `on_timeout`, decided by `"timeout"`. Approved proposals become facts with
        `gate == "human"`; rejected ones leave a `DIAGNOSTIC` fact `hitl-rejected:{id}` and
        cannot be proposed again in this run. The clock, spent budgets and the rejected set
        carry over.

        Raises:
            InvalidCheckpointError: A fact, the Merkle root or the signature does not verify.
            InvalidResumeError: The decisions do not fit the pending gates, or this engine's
                registrations differ from the paused run's; nothing changes.
            StoreError: The engine has a store and saving failed (`error.result` keeps the run).
        """
        view = self._registry.view()
        verify_signature(checkpoint, self._config.signing_key)
        registrations, invariants = view.fingerprint
        if (registrations, invariants) != (checkpoint.registrations, checkpoint.invariants):
            raise InvalidResumeError(
                f"run {checkpoint.run_id} was paused with registrations "
                f"{list(checkpoint.registrations)} and invariants {list(checkpoint.invariants)}; "
                f"this engine has {list(registrations)} and {list(invariants)}"
            )
        chosen = self._check_decisions(checkpoint, tuple(decisions))
        snapshot = restore_snapshot(checkpoint)
        state = RunState(
            run_id=checkpoint.run_id,
            snapshot=snapshot,
            initial_root=checkpoint.initial_root,
            inputs=checkpoint.inputs,
            cycle=checkpoint.cycle,
            dirty=frozenset(checkpoint.dirty),
            tokens=checkpoint.tokens,
            elapsed_before=checkpoint.elapsed_seconds,
            refused=frozenset(_parse_ref(ref) for ref in checkpoint.refused),
            decisions=list(checkpoint.decisions),
            rejections=list(checkpoint.rejections),
            cycles=list(checkpoint.cycles),
            input_violations=checkpoint.input_violations,
        )
        loop = RunLoop(self._config, view, state)
        return await self._save(await loop.resume(checkpoint.pending, chosen))

    def _check_decisions(
        self, checkpoint: Checkpoint, decisions: tuple[GateDecision, ...]
    ) -> tuple[GateDecision, ...]:
        """One decision per live gate, plus timeout decisions for the expired ones."""
        now = self._config.clock()
        policy = self._config.hitl
        on_timeout = "reject" if policy is None else policy.on_timeout
        pending = {request.gate_id: request for request in checkpoint.pending}
        given: dict[str, GateDecision] = {}
        for decision in decisions:
            if not isinstance(decision, GateDecision):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise InvalidResumeError(
                    f"decisions must be GateDecision, got {type(decision).__name__}"
                )
            request = pending.get(decision.gate_id)
            if request is None:
                raise InvalidResumeError(
                    f"run {checkpoint.run_id} has no pending gate {decision.gate_id!r}; "
                    f"pending: {sorted(pending)}"
                )
            if decision.gate_id in given:
                raise InvalidResumeError(f"gate {decision.gate_id!r} has more than one decision")
            if request.deadline is not None and request.deadline <= now:
                raise InvalidResumeError(
                    f"gate {decision.gate_id!r} expired at {request.deadline.isoformat()}; "
                    f"it is decided by its timeout ({on_timeout})"
                )
            given[decision.gate_id] = decision
        chosen: list[GateDecision] = []
        missing: list[str] = []
        for gate_id, request in pending.items():
            if request.deadline is not None and request.deadline <= now:
                reason = f"deadline {request.deadline.isoformat()} passed"
                chosen.append(
                    GateDecision.approve(gate_id, by="timeout")
                    if on_timeout == "approve"
                    else GateDecision.reject(gate_id, by="timeout", reason=reason)
                )
            elif gate_id in given:
                chosen.append(given[gate_id])
            else:
                missing.append(gate_id)
        if missing:
            raise InvalidResumeError(f"run {checkpoint.run_id}: no decision for gates {missing}")
        return tuple(chosen)

    async def replay(
        self, trace: RunTrace, context: ContextSnapshot | None = None
    ) -> ConvergeResult:
        """Re-merge a recorded run without calling any suggestor; reproduce its Merkle root.

        The trace must come from an engine with `record_effects=True` and the same
        registrations; `context` must be the run's starting context (empty by default). The
        inputs, effects and human decisions in the trace go through the same gate, invariants
        and conflict rules. Time is not replayed: a run stopped by its time budget replays to
        the same facts and reports the recorded stop reason.

        Raises:
            ReplayError: An effect is missing, a suggestor differs, the starting context does
                not match, or the replayed root differs from the recorded one.
        """
        start = ContextSnapshot.empty() if context is None else context
        state = RunState(
            run_id=trace.run_id,
            snapshot=start._at_cycle(0),  # pyright: ignore[reportPrivateUsage]
            initial_root=start.merkle_root(),
            inputs=trace.inputs,
        )
        return await replay_trace(RunLoop(self._config, self._registry.view(), state), trace)

    async def stream(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] = (),
        buffer: int = 16,
    ) -> AsyncGenerator[EngineEvent | ConvergeResult, None]:
        """Run like `run`, yielding every event as it happens and the result last.

        The run waits for the consumer at phase boundaries (a slow consumer slows it; nothing
        is dropped). To stop early, break out inside `contextlib.aclosing(engine.stream())`:
        closing the stream cancels the run.
        """
        send, receive = anyio.create_memory_object_stream[EngineEvent | ConvergeResult](buffer)

        class Channel:
            async def on_event(self, event: EngineEvent, /) -> None:
                await send.send(event)

        config = replace(self._config, observers=(*self._config.observers, Channel()))

        failure: list[Exception] = []

        async def produce() -> None:
            try:
                async with send:
                    result = await self._run(config, context, inputs)
                    await send.send(result)
            except anyio.BrokenResourceError:  # the consumer went away
                pass
            except Exception as error:  # re-raised to the consumer as `run` would raise it
                failure.append(error)

        closed = False
        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            try:
                async for item in receive:
                    yield item
            except GeneratorExit:
                closed = True
                group.cancel_scope.cancel()
            finally:
                receive.close()
        if closed:
            raise GeneratorExit
        if failure:
            raise failure[0]

    def run_sync(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] = (),
        backend: Literal["asyncio", "trio"] = "asyncio",
    ) -> ConvergeResult:
        """`run` for scripts: starts an event loop on `backend` and runs to a stop reason."""
        given = tuple(inputs)

        async def main() -> ConvergeResult:
            return await self.run(context, inputs=given)

        return anyio.run(main, backend=backend)


def _parse_ref(ref: str) -> tuple[ContextKey, str]:
    key, _, ident = ref.partition("/")
    return ContextKey(key), ident
