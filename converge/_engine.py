"""`Engine`: registrations, settings, and the entry points of a run (each run, resume and
fork started by its `_launch.Launcher`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import aclosing
from datetime import datetime
from typing import Literal, final, overload

from ._core._budget import Budget
from ._core._checkpoint import Checkpoint
from ._core._context import ContextSnapshot
from ._core._events import EngineEvent, Observer
from ._core._exceptions import ConfigurationError
from ._core._hitl import GateDecision, HitlPolicy, utc_now
from ._core._invariant import Invariant
from ._core._proposal import ProposedFact
from ._core._record import RunRecord
from ._core._result import ConvergeResult
from ._core._store import RunStore
from ._core._suggestor import Suggestor, SuggestorId
from ._core._tokens import TokenStreamed, unheard
from ._core._trace import CycleTrace, RunTrace
from ._kernel._arguments import check_label, check_settings, checked_inputs
from ._kernel._config import RunConfig
from ._kernel._executor import ErrorMode
from ._kernel._gate import PromotionPolicy
from ._kernel._merge import ConflictMode
from ._kernel._registry import Registry
from ._kernel._replay import replay_run
from ._kernel._retry import NO_RETRY, RetryPolicy
from ._kernel._stream import stream_run
from ._kernel._sync import Backend, call_sync
from ._launch import Launcher
from .stores._durable import DEFAULT_LEASE, Durability, RunKeeper

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
        store: Saves every run: after every merged cycle with `durability="cycle"`, and
            always when it finishes or pauses, before `run`/`resume` returns.
        durability: With a store, `"cycle"` (the default) saves the run after every merged
            cycle, before the next one starts, so a crash, a kill or a cancelled caller
            loses at most the cycle in flight (`resume_run` continues it); `"exit"` saves
            only when the run finishes or pauses.
        lease: Seconds a running run counts as alive in the store without a save; the
            engine renews it every third of that while a long cycle runs. A run whose
            lease ran out is shown as interrupted and can be continued elsewhere.
        name: The formation's name, recorded with each saved run.
        formation: Where the formation can be loaded from (a file path or module name),
            recorded with each saved run for `converge resume` and `replay`.
        observers: Receive every event of every run (see `EngineEvent`).
        record_effects: Keep each execution's `AgentEffect` in the trace, for `replay`.
        retry: How a suggestor whose call failed or timed out is tried again (default: it
            is not); a suggestor's own `retry` attribute overrides it.
        inputs: Merged at cycle 0 of every `run` and `stream` not given `inputs=` (which
            replace them); `Formation.engine` passes the formation's.
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
        durability: Durability = "cycle",
        lease: float = DEFAULT_LEASE,
        name: str | None = None,
        formation: str | None = None,
        observers: Sequence[Observer] = (),
        record_effects: bool = False,
        retry: RetryPolicy | None = None,
        inputs: Iterable[ProposedFact] = (),
    ) -> None:
        check_settings(
            observers, max_concurrency, suggestor_timeout, on_conflict, on_suggestor_error
        )
        check_label("name", name)
        check_label("formation", formation)
        self._config = RunConfig(
            budget=budget or Budget(),
            policy=policy or PromotionPolicy(),
            on_conflict=on_conflict,
            on_suggestor_error=on_suggestor_error,
            max_concurrency=max_concurrency,
            suggestor_timeout=suggestor_timeout,
            hitl=hitl,
            clock=clock or utc_now,
            signing_key=signing_key.encode() if isinstance(signing_key, str) else signing_key,
            observers=tuple(observers),
            record_effects=record_effects,
            retry=retry or NO_RETRY,
        )
        if self._config.signing_key is not None and not self._config.signing_key:
            raise ConfigurationError("signing_key must not be empty")
        given = checked_inputs(inputs)
        self._registry = Registry()
        self._keeper = RunKeeper(
            store,
            durability=durability,
            lease=lease,
            label=(name, formation),
            key=self._config.signing_key,
        )
        self._launcher = Launcher(self._config, given, self._registry, self._keeper)

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
        inputs: Iterable[ProposedFact] | None = None,
        run_id: str | None = None,
    ) -> ConvergeResult:
        """Run to a stop reason, starting from `context` (empty by default) plus `inputs`.

        Inputs are merged at cycle 0 by the pseudo-suggestor `"input"`, through the gate;
        given, they replace the engine's own (`Engine(inputs=...)`, a formation's inputs).
        A stopped run returns its last consistent snapshot; caller cancellation propagates.
        `run_id` names the run (a new UUID by default); with a store, a run id that is already
        stored is refused (`StaleRecordError` at the first save), so a retried job can name its
        run and find it again.

        Raises:
            ConfigurationError: `context` is not a `ContextSnapshot`, or an input is not a
                `ProposedFact`.
            StoreError: The engine has a store and saving failed. When the final save
                failed, `error.result` keeps the run; when a per-cycle save failed, the run
                stopped there (`error.result` is `None`) and the store keeps it as of its last
                saved cycle, to be continued with `resume_run` once its lease runs out.
        """
        return await unheard(self._launcher.run(self._config, context, inputs, run_id))

    @property
    def store(self) -> RunStore | None:
        """Where runs are saved, if anywhere."""
        return self._keeper.store

    async def resume(
        self,
        checkpoint: Checkpoint,
        decisions: Iterable[GateDecision] = (),
        *,
        run_id: str | None = None,
    ) -> ConvergeResult:
        """Apply human decisions to a paused run and continue it where it stopped.

        Every pending gate that has not expired needs exactly one decision; expired gates get
        the policy's `on_timeout`, decided by `"timeout"`. Approved proposals become facts with
        `gate == "human"`; rejected ones leave a `DIAGNOSTIC` fact `hitl-rejected:{id}` and
        cannot be proposed again in this run. The clock, spent budgets and the rejected set
        carry over.

        With a store, a checkpoint is usable once: a checkpoint that is not the stored run's
        current one (the run was resumed or saved since) is refused, and the result is saved
        only if nobody saved the run in between, so of two concurrent resumes one wins. Without
        a store, a checkpoint is a value: each resume of it is its own continuation. Pass
        `run_id` to have the checkpoint checked to be that run's.

        Raises:
            InvalidCheckpointError: A fact, the Merkle root or the signature does not verify.
            InvalidResumeError: The checkpoint is another run's, already used, or no longer the
                stored run's; the decisions do not fit the pending gates; or this engine's
                registrations differ from the paused run's. Nothing changes.
            StaleRecordError: Someone saved the run while this resume ran; nothing was saved
                (`error.result` keeps this resume's result).
            StoreError: The engine has a store and saving failed. When the final save
                failed, `error.result` keeps the run; when a per-cycle save failed, the run
                stopped there (`error.result` is `None`) and the store keeps it as of its last
                saved cycle, to be continued with `resume_run` once its lease runs out.
        """
        return await self._launcher.resume(checkpoint, decisions, run_id)

    async def resume_run(
        self, run_id: str, decisions: Iterable[GateDecision] = (), /
    ) -> ConvergeResult:
        """Continue a stored run: decide a paused one, or pick up an interrupted one.

        A paused run gets `decisions` as `resume` applies them. An interrupted run (its
        caller cancelled it, or its process died and its lease ran out) continues from its
        last saved cycle, with no decisions; its clock, spent budgets and trace carry over,
        and its trace records the continuation. Of two processes continuing or resuming the
        same run, one wins; the other gets `StaleRecordError` before running any cycle
        (with `durability="cycle"`) or when it saves.

        Raises:
            ConfigurationError: The engine has no store.
            RunNotFoundError: The store has no such run.
            StoreError: With a signing key, the stored run is unsigned or its signature
                does not match; or the stored run does not verify.
            InvalidResumeError: The run is finished, or still running (its lease has not run
                out), or decisions were given for an interrupted run; or as for `resume`.
            StaleRecordError: Someone else continued or resumed the run first.
        """
        return await self._launcher.resume_run(run_id, decisions)

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
        return await self._replay_cycles(trace, None, context)

    async def _replay_cycles(
        self,
        trace: RunTrace,
        cycles: AsyncIterator[CycleTrace] | None,
        context: ContextSnapshot | None = None,
    ) -> ConvergeResult:
        """`replay`, with `trace`'s cycles read from `cycles` (when given) as the replay
        reaches them: `converge replay` of a run stored as rows (`JournalCycles`)."""
        start = ContextSnapshot.empty() if context is None else context
        return await replay_run(self._config, self._registry.view(), trace, start, cycles)

    async def fork(
        self,
        record: RunRecord,
        *,
        at_cycle: int,
        inputs: Iterable[ProposedFact] = (),
        retract: Iterable[str] = (),
        cascade: bool = False,
        replay: bool = False,
        run_id: str | None = None,
    ) -> ConvergeResult:
        """Start a new run from a stored run's context at the end of `at_cycle`, and run it
        live with this engine's suggestors.

        The context is rebuilt from `record`'s facts (0: the inputs only), each checked
        against its digest, without calling any suggestor; with `replay`, the record's
        recorded effects are merged again up to `at_cycle` first (with this engine's
        registrations), and the root they give must be the stored one. Then `retract`
        removes facts (`"key/id"`, or an id that names one fact), with `cascade` every fact
        whose evidence reaches one of them too, and `inputs` are merged at `at_cycle` as the
        fork's inputs. Cycles go on from `at_cycle + 1` (the budget counts the parent's
        cycles and tokens up to there). The parent's human decisions after `at_cycle` are
        not carried over: a gate the fork reaches again waits again.

        The result's `lineage` (and its stored record's) names the parent run, the cycle and
        the parent's Merkle root there. With a store, the fork is saved when it stops or
        pauses, as a new run.

        Raises:
            StoreError: With a signing key, `record` is unsigned or its signature fails.
            ForkError: The run has no such cycle, is still running, started from a context
                of its own, or its facts do not verify; a retracted fact does not exist at
                `at_cycle`; an input's key is undeclared or its payload does not fit it; a
                kept fact's key is not declared in this process. Nothing runs nor is saved.
            ReplayError: With `replay`, an effect is missing, a suggestor differs, or the
                replayed root is not the stored one.
        """
        return await self._launcher.fork(
            record,
            at_cycle,
            inputs,
            retract,
            cascade=cascade,
            replay=replay,
            run_id=run_id,
        )

    @overload
    def stream(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] | None = None,
        buffer: int = 16,
        tokens: Literal[False] = False,
    ) -> AsyncGenerator[EngineEvent | ConvergeResult, None]: ...

    @overload
    def stream(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] | None = None,
        buffer: int = 16,
        tokens: Literal[True],
    ) -> AsyncGenerator[EngineEvent | TokenStreamed | ConvergeResult, None]: ...

    async def stream(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] | None = None,
        buffer: int = 16,
        tokens: bool = False,
    ) -> AsyncGenerator[EngineEvent | TokenStreamed | ConvergeResult, None]:
        """Run like `run`, yielding every event as it happens and the result last.

        With `tokens=True`, a suggestor whose model calls stream (`LlmSuggestor(...,
        stream=True)`) adds `TokenStreamed` events, the text as it is generated; they are
        never recorded. The run waits for the consumer at phase boundaries (a slow consumer
        slows it; nothing is dropped). To stop early, break out inside
        `contextlib.aclosing(engine.stream())`: closing the stream cancels the run.
        """

        async def run(config: RunConfig) -> ConvergeResult:
            return await self._launcher.run(config, context, inputs)

        async with aclosing(stream_run(run, self._config, buffer, tokens=tokens)) as items:
            async for item in items:
                yield item

    def run_sync(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] | None = None,
        run_id: str | None = None,
        backend: Backend = "asyncio",
    ) -> ConvergeResult:
        """`run` for scripts: starts an event loop on `backend` and runs to a stop reason.

        Raises:
            ConfigurationError: An event loop is already running here: `await run` instead.
        """
        return call_sync(backend, self.run, context, inputs=inputs, run_id=run_id)

    def resume_sync(
        self,
        checkpoint: Checkpoint,
        decisions: Iterable[GateDecision] = (),
        *,
        run_id: str | None = None,
        backend: Backend = "asyncio",
    ) -> ConvergeResult:
        """`resume` for scripts, on an event loop of its own (raises as `run_sync` does)."""
        return call_sync(backend, self.resume, checkpoint, decisions, run_id=run_id)

    def resume_run_sync(
        self,
        run_id: str,
        decisions: Iterable[GateDecision] = (),
        /,
        *,
        backend: Backend = "asyncio",
    ) -> ConvergeResult:
        """`resume_run` for scripts, on an event loop of its own (raises as `run_sync` does)."""
        return call_sync(backend, self.resume_run, run_id, decisions)
