"""`Launcher`: how an engine starts, resumes and forks its runs, with its store.

`Engine` holds registrations and settings, and hands every run to its `Launcher`, which
builds the run's `RunLoop` over a frozen view of the registrations and wires it to the
engine's `RunKeeper`: the saves, the lease renewed while the run goes on, and the relay of
streamed tokens to the store. A resume and a fork are refused here, before anything runs,
when what they start from does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Literal, final

from ._core._checkpoint import Checkpoint
from ._core._context import ContextSnapshot
from ._core._exceptions import ConfigurationError, InvalidResumeError, ReplayError
from ._core._hitl import GateDecision
from ._core._proposal import ProposedFact
from ._core._record import RunRecord
from ._core._result import ConvergeResult
from ._core._stop import RunStatus
from ._core._tokens import unheard
from ._core._trace import Continuation
from ._kernel._abort import reraise
from ._kernel._arguments import checked_inputs, checked_start
from ._kernel._config import RunConfig
from ._kernel._fork import fork_state, replay_start, replay_trace
from ._kernel._fork_changes import checked_fork
from ._kernel._outcome import FactChecks
from ._kernel._pause import current_version, resume_state
from ._kernel._registry import Registry
from ._kernel._replay import RecordedEffects
from ._kernel._run import RunLoop
from ._kernel._state import RunState, new_run_id
from .stores._durable import RunKeeper, with_lease
from .stores._relay import relaying

__all__ = ["Launcher"]


@final
class Launcher:
    """Starts, resumes and forks the runs of one engine (its settings, inputs, registry and
    keeper, shared with it)."""

    __slots__ = ("_config", "_inputs", "_keeper", "_registry")

    def __init__(
        self,
        config: RunConfig,
        inputs: tuple[ProposedFact, ...],
        registry: Registry,
        keeper: RunKeeper,
    ) -> None:
        self._config = config
        self._inputs = inputs
        self._registry = registry
        self._keeper = keeper

    async def run(
        self,
        config: RunConfig,
        context: ContextSnapshot | None,
        inputs: Iterable[ProposedFact] | None,
        run_id: str | None = None,
    ) -> ConvergeResult:
        """A new run under `config` (the engine's, or the one `stream` relays), from `context`
        plus `inputs` (the engine's when `None`), saved as the engine's store says."""
        start = checked_start(context, run_id)
        given = self._inputs if inputs is None else checked_inputs(inputs)
        state = RunState.start(start, given, run_id=run_id)
        view = self._registry.view()
        saver = self._keeper.saver(state.run_id, view.fingerprint, 0)

        async def run_and_save() -> ConvergeResult:
            async with self._relaying(state.run_id, config) as relayed:
                loop = RunLoop(relayed, view, state, saver, **self._fact_checks())
                result = await loop.start()
            return await self._keeper.save(result, 0, saver)

        return await reraise(with_lease(saver, run_and_save))

    def _relaying(self, run_id: str, config: RunConfig) -> AbstractAsyncContextManager[RunConfig]:
        """The run's `config`, relaying its tokens to the store while in the block
        (`stores._relay.relaying`); without a store, `config` as it is, and no relay to set
        up or check for (1 % of a W4 run's instructions)."""
        store = self._keeper.store
        return nullcontext(config) if store is None else relaying(store, run_id, config)

    def _fact_checks(self) -> FactChecks:
        """Whether a run's facts leave this process (saved or signed), so the run ends with
        every fact checked against the leaf the context kept at its promotion; and whether
        that check keeps their records, for a record saved whole when the run stops (a run
        saved as rows needs none: its journal's entries hold the facts' JSON)."""
        keeper = self._keeper
        return {
            "check_facts": keeper.store is not None or self._config.signing_key is not None,
            "keep_facts": keeper.saves_whole,
        }

    async def resume(
        self,
        checkpoint: Checkpoint,
        decisions: Iterable[GateDecision],
        run_id: str | None,
    ) -> ConvergeResult:
        """`Engine.resume`: `checkpoint` checked to be `run_id`'s, paused and current."""
        if run_id is not None and checkpoint.run_id != run_id:
            raise InvalidResumeError(
                f"the checkpoint is of run {checkpoint.run_id}, not of run {run_id}"
            )
        if not checkpoint.pending:
            raise InvalidResumeError(
                f"the checkpoint of run {checkpoint.run_id} waits on no gate: it is where an "
                "interrupted run continues; continue it with Engine.resume_run(run_id)"
            )
        expected = await current_version(self._keeper.store, checkpoint)
        return await self._resume(checkpoint, tuple(decisions), expected=expected)

    async def resume_run(self, run_id: str, decisions: Iterable[GateDecision]) -> ConvergeResult:
        """`Engine.resume_run`: the stored run's checkpoint, checked to be resumable."""
        store = self._keeper.store
        if store is None:
            raise ConfigurationError("resume_run needs an engine with a store")
        record = await store.load(run_id)
        record.verify_signature(self._config.signing_key)
        given = tuple(decisions)
        checkpoint = record.checkpoint
        if record.status is RunStatus.PAUSED and checkpoint is not None:
            return await self._resume(checkpoint, given, expected=record.version)
        if record.status is not RunStatus.INTERRUPTED or checkpoint is None:
            raise InvalidResumeError(
                f"run {run_id} is {record.status.value} ({record.detail})"
                f"{record.decided_by()}; only a paused or interrupted run can be resumed"
            )
        if given:
            raise InvalidResumeError(
                f"run {run_id} is interrupted, not waiting for a decision; it continues "
                "without decisions"
            )
        cause = record.interruption or "lost"
        continuation = Continuation(after_cycle=checkpoint.cycle, cause=cause)
        return await self._resume(
            checkpoint, (), expected=record.version, key=None, continuation=continuation
        )

    async def _resume(
        self,
        checkpoint: Checkpoint,
        decisions: tuple[GateDecision, ...],
        *,
        expected: int,
        key: bytes | Literal[False] | None = False,
        continuation: Continuation | None = None,
    ) -> ConvergeResult:
        """Resume `checkpoint` (verified with `key`; the engine's own unless given)."""
        view = self._registry.view()
        state, chosen = resume_state(
            checkpoint,
            decisions,
            fingerprint=view.fingerprint,
            key=self._config.signing_key if key is False else key,
            now=self._config.clock(),
            hitl=self._config.hitl,
        )
        if continuation is not None:
            state.continuations = (*state.continuations, continuation)
        saver = self._keeper.saver(state.run_id, view.fingerprint, expected)

        async def resume_and_save() -> ConvergeResult:
            async with self._relaying(state.run_id, self._config) as relayed:
                loop = RunLoop(relayed, view, state, saver, **self._fact_checks())
                result = await loop.resume(checkpoint.pending, chosen)
            return await self._keeper.save(result, expected, saver)

        return await unheard(reraise(with_lease(saver, resume_and_save)))

    async def fork(
        self,
        record: RunRecord,
        at_cycle: int,
        inputs: Iterable[ProposedFact],
        retract: Iterable[str],
        *,
        cascade: bool,
        replay: bool,
        run_id: str | None,
    ) -> ConvergeResult:
        """`Engine.fork`: `record` at `at_cycle`, changed and checked, run live."""
        record.verify_signature(self._config.signing_key)
        point, given, retracted = checked_fork(record, at_cycle, inputs, retract, cascade=cascade)
        checked_start(None, run_id)
        if replay:
            await self._replayed_to(record, at_cycle, point.root)
        state = fork_state(
            record,
            point,
            inputs=given,
            retracted=retracted,
            kind="replay" if replay else "fork",
            run_id=run_id or new_run_id(),
        )
        view = self._registry.view()
        loop = RunLoop(self._config, view, state, None, **self._fact_checks())

        async def fork_and_save() -> ConvergeResult:
            return await self._keeper.save(await loop.start(held=point.held), 0, None)

        return await unheard(reraise(fork_and_save()))

    async def _replayed_to(self, record: RunRecord, cycle: int, root: str) -> None:
        """Merge `record`'s recorded effects up to `cycle` again; refuse another root."""
        trace = replay_trace(record, cycle)
        view = self._registry.view()
        loop = RunLoop(self._config, view, replay_start(record))
        replayed = await loop.start(await RecordedEffects.open(trace, view.registrations))
        got = replayed.context.merkle_root()
        if got != root:
            raise ReplayError(
                f"replaying run {record.run_id} to cycle {cycle} gives root {got}, not the "
                f"stored {root}: the recorded effects or the registrations differ"
            )
