"""`RecordedEffects`: a cycle's effects read from a recorded trace, calling no suggestor.

Replay runs the same cycle as a live run over these effects, so the inputs, effects and
human decisions of the trace pass the same gate, invariants and conflict rules again.
Time is not replayed: where the trace stopped on a budget, replay stops there too.

The cycles come one at a time from an async iterator, read as the replay reaches them
(with one cycle read ahead, so that whether the trace goes on is known before the next
cycle starts): a whole trace's `cycles`, or a stored run's rows a page at a time
(`converge.stores._rows_replay`), so that a large run's recorded effects are never all
held at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import final

from .._core._context import ContextSnapshot
from .._core._effect import AgentEffect
from .._core._exceptions import ReplayError
from .._core._hitl import GateDecision, GateRequest
from .._core._key import AnyKey, undeclared_names
from .._core._proposal import ProposedFact
from .._core._result import ConvergeResult
from .._core._stop import StopReason
from .._core._trace import CycleTrace, RunTrace
from ._config import RunConfig
from ._registry import Registration, RegistryView
from ._run import RunLoop
from ._source import Batch, End
from ._state import RunState

__all__ = ["RecordedEffects", "replay_run"]

_BUDGET_STOPS = frozenset(
    {
        StopReason.CYCLE_BUDGET_EXHAUSTED,
        StopReason.FACT_BUDGET_EXHAUSTED,
        StopReason.TOKEN_BUDGET_EXHAUSTED,
        StopReason.TIME_BUDGET_EXHAUSTED,
    }
)
_FIXED_POINT = frozenset({StopReason.CONVERGED, StopReason.INVARIANT_VIOLATED})


@final
class RecordedEffects:
    """The `EffectSource` of a replay: the trace's effects and decisions, cycle by cycle.

    Made by `open`, which reads the first cycle ahead; each `produce` reads the next.
    """

    __slots__ = ("_ahead", "_cycles", "_decisions", "_reason", "_registrations", "_trace")

    def __init__(
        self,
        trace: RunTrace,
        registrations: Sequence[Registration],
        cycles: AsyncIterator[CycleTrace],
        ahead: CycleTrace | None,
    ) -> None:
        self._trace = trace
        self._registrations = registrations
        self._cycles = cycles
        self._ahead = ahead
        self._reason = trace.stop_reason or StopReason.CONVERGED
        self._decisions = {decision.gate_id: decision for decision in trace.decisions}

    @classmethod
    async def open(
        cls,
        trace: RunTrace,
        registrations: Sequence[Registration],
        cycles: AsyncIterator[CycleTrace] | None = None,
    ) -> RecordedEffects:
        """The effects of `trace`'s cycles, or of `cycles` when given (`trace` then gives
        the rest: the run's id, stop, decisions; its own `cycles` are not read)."""
        feed = _Listed(trace.cycles) if cycles is None else cycles
        return cls(trace, registrations, feed, await anext(feed, None))

    @property
    def ahead(self) -> CycleTrace | None:
        """The next recorded cycle, not yet replayed; `None` when every one was."""
        return self._ahead

    def end(self, cycle: int, /) -> End | None:
        """The trace has no more cycles: stop as it stopped."""
        if self._ahead is not None:
            return None
        reason = None if self._reason in _FIXED_POINT else self._reason
        return End(reason, self._trace.detail, cycle - 1)

    async def produce(
        self, cycle: int, dirty: frozenset[AnyKey], snapshot: ContextSnapshot, /
    ) -> Batch:
        """The recorded cycle `cycle`, checked against this engine's registrations."""
        recorded = self._ahead
        run_id = self._trace.run_id
        if recorded is None or recorded.cycle != cycle:
            where = "no cycle" if recorded is None else f"cycle {recorded.cycle}"
            raise ReplayError(
                f"the trace of run {run_id} records {where} where cycle {cycle} comes next"
            )
        _check_keys(run_id, _keys_of(e.effect for e in recorded.executions))
        eligible, effects = self._effects(recorded)
        tokens = 0
        for execution in recorded.executions:
            effect = execution.effect
            tokens += effect.tokens if execution.outcome == "ok" and effect else execution.tokens
        cancelled = None if recorded.merged else (self._reason, self._trace.detail)
        failed = any(execution.outcome != "ok" for execution in recorded.executions)
        self._ahead = await anext(self._cycles, None)
        return Batch(eligible, recorded.executions, effects, tokens, cancelled, failed)

    def retrying(self, cycle: int, /) -> bool:
        """Whether the trace records more cycles (the run went on to retry a suggestor)."""
        return self._ahead is not None

    def budget_stop(self, facts: int, tokens: int, /) -> tuple[StopReason, str] | None:
        """The recorded budget stop, after the trace's last cycle (or its inputs)."""
        if self._ahead is None and self._reason in _BUDGET_STOPS:
            return self._reason, self._trace.detail
        return None

    def decisions(self, held: Sequence[GateRequest], /) -> list[GateDecision] | None:
        """The recorded decisions for `held`, or `None` where the recorded run paused."""
        chosen: list[GateDecision] = []
        for request in held:
            decision = self._decisions.get(request.gate_id)
            if decision is None:
                return None
            chosen.append(decision)
        return chosen

    def _effects(
        self, recorded: CycleTrace
    ) -> tuple[tuple[Registration, ...], tuple[tuple[Registration, AgentEffect], ...]]:
        registrations = self._registrations
        cycle = recorded.cycle
        eligible: list[Registration] = []
        effects: list[tuple[Registration, AgentEffect]] = []
        for execution in recorded.executions:
            sid = execution.suggestor_id
            reg = registrations[sid] if 0 <= sid < len(registrations) else None
            if reg is None or reg.name != execution.suggestor:
                raise ReplayError(
                    f"cycle {cycle}: the trace ran {execution.suggestor!r} as id {sid}, "
                    "which this engine does not have"
                )
            if execution.phase == "execute":
                eligible.append(reg)
            if execution.outcome != "ok":
                continue
            if execution.effect is None:
                raise ReplayError(
                    f"cycle {cycle}: no recorded effect for {execution.suggestor!r}; "
                    "record the run with Engine(record_effects=True)"
                )
            effects.append((reg, execution.effect))
        return tuple(eligible), tuple(effects)


@final
class _Listed(AsyncIterator[CycleTrace]):
    """Cycles held in memory, one at a time (a class, not an async generator: one left
    unfinished by a failed replay has nothing to finalise)."""

    __slots__ = ("_cycles",)

    def __init__(self, cycles: Iterable[CycleTrace]) -> None:
        self._cycles = iter(cycles)

    async def __anext__(self) -> CycleTrace:
        try:
            return next(self._cycles)
        except StopIteration:
            raise StopAsyncIteration from None


def _keys_of(
    effects: Iterable[AgentEffect | None], inputs: Iterable[ProposedFact] = ()
) -> Iterator[AnyKey | None]:
    """Every key that `inputs` and the proposals of `effects` name."""
    proposals = (p for effect in effects if effect is not None for p in effect.proposals)
    for proposal in (*inputs, *proposals):
        yield proposal.key
        yield proposal.target


def _check_keys(run_id: str, keys: Iterable[AnyKey | None]) -> None:
    """Refuse a trace naming a key this process has not declared."""
    unknown = undeclared_names(keys)
    if unknown:
        raise ReplayError(
            f"trace of run {run_id} names keys this process has not declared: {unknown}; "
            "import the module that declares them (Key(name, payload=...)) first"
        )


async def replay_run(
    config: RunConfig,
    view: RegistryView,
    trace: RunTrace,
    start: ContextSnapshot,
    cycles: AsyncIterator[CycleTrace] | None = None,
) -> ConvergeResult:
    """Re-merge `trace` from `start` through the one cycle; refuse a different root.

    `cycles`: the trace's cycles, read as the replay reaches them (`trace.cycles` when not
    given); each cycle's keys are checked as it comes.

    Raises:
        ReplayError: `start` is not the trace's starting context, an effect is missing or
            a suggestor differs, or the replayed root differs from the recorded one.
    """
    initial_root = start.merkle_root()
    if initial_root != trace.initial_root:
        raise ReplayError(
            f"trace of run {trace.run_id} starts from root {trace.initial_root}, but the "
            f"given context has root {initial_root}"
        )
    _check_keys(trace.run_id, _keys_of((), trace.inputs))
    state = RunState.start(start, trace.inputs, run_id=trace.run_id)
    loop = RunLoop(config, view, state)
    source = await RecordedEffects.open(trace, view.registrations, cycles)
    result = await loop.start(source)
    final_root = result.integrity.merkle_root
    if trace.final_root is not None and final_root != trace.final_root:
        raise ReplayError(
            f"replaying run {trace.run_id} gives root {final_root}, not the recorded "
            f"{trace.final_root}: the trace or the registrations differ"
        )
    if source.ahead is not None:
        raise ReplayError(
            f"replaying run {trace.run_id} stopped at cycle {result.cycles}, but its trace "
            f"records cycle {source.ahead.cycle} after it"
        )
    return result
