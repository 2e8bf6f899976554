"""Engine events: typed records of what really happened, for observers and `Engine.stream`."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Annotated, Final, Literal, Protocol, cast, final, get_args

import anyio
from pydantic import ConfigDict, Field, JsonValue, TypeAdapter

from ._fact import GateKind
from ._invariant import InvariantClass
from ._key import KeyField
from ._model import FrozenModel

__all__ = [
    "EVENT_TYPES",
    "CycleFinished",
    "CycleStarted",
    "EngineEvent",
    "FactPromoted",
    "GateDecided",
    "GateRequested",
    "InvariantViolated",
    "Observer",
    "ProposalRejected",
    "RunFinished",
    "RunStarted",
    "SuggestorBlocked",
    "SuggestorFailed",
    "SuggestorFinished",
    "deliver",
    "event_adapter",
    "wanted",
]


class _Event(FrozenModel, frozen=True):
    """Fields every event has."""

    run_id: str
    """The run it belongs to."""
    cycle: int
    """The cycle it happened in (0 for the inputs)."""


@final
class RunStarted(_Event, frozen=True):
    """A run (or a resumed stretch of one) began."""

    type: Literal["run_started"] = "run_started"
    """Discriminator."""
    suggestors: int
    """Registered suggestors."""
    inputs: int
    """Inputs given."""
    facts: int
    """Facts in the starting context."""


@final
class CycleStarted(_Event, frozen=True):
    """A cycle began."""

    type: Literal["cycle_started"] = "cycle_started"
    """Discriminator."""
    dirty: tuple[KeyField, ...]
    """Keys that gained facts since the last cycle."""


@final
class SuggestorFinished(_Event, frozen=True):
    """A suggestor's `execute` returned an effect."""

    type: Literal["suggestor_finished"] = "suggestor_finished"
    """Discriminator."""
    suggestor: str
    """Its name."""
    suggestor_id: int
    """Its id."""
    duration_ms: float
    """How long `execute` took."""
    proposals: int
    """Proposals in its effect."""
    tokens: int
    """Tokens it reported."""
    metadata: JsonValue = Field(default=None, exclude_if=lambda v: not v)
    """The call's `Execution.metadata`: what the suggestor recorded, and an isolated call's
    `worker_pid`. Left out of JSON when empty."""


@final
class SuggestorBlocked(_Event, frozen=True):
    """A suggestor held the event loop past its time limit without awaiting.

    Its result came too late and was dropped (its execution is `timed_out`); the event says
    which suggestor blocked, so its blocking call can be moved to a worker thread.
    """

    type: Literal["suggestor_blocked"] = "suggestor_blocked"
    """Discriminator."""
    suggestor: str
    """Its name."""
    held_seconds: float
    """How long it held the loop without awaiting."""


@final
class SuggestorFailed(_Event, frozen=True):
    """A suggestor's `accepts` or `execute` raised, returned the wrong type, or timed out."""

    type: Literal["suggestor_failed"] = "suggestor_failed"
    """Discriminator."""
    suggestor: str
    """Its name."""
    suggestor_id: int
    """Its id."""
    phase: Literal["accepts", "execute"]
    """Which call failed."""
    outcome: Literal["failed", "timed_out"]
    """How."""
    error: str
    """`"ExceptionType: message"`."""
    metadata: JsonValue = Field(default=None, exclude_if=lambda v: not v)
    """The call's `Execution.metadata`: an isolated call's `worker_pid`, and `kill_reason`
    when its worker was killed. Left out of JSON when empty."""


@final
class FactPromoted(_Event, frozen=True):
    """A proposal became a fact (an idempotent re-proposal is not a promotion)."""

    type: Literal["fact_promoted"] = "fact_promoted"
    """Discriminator."""
    ref: str
    """`"key/id"` of the new fact."""
    suggestor: str
    """Who proposed it."""
    clock: int
    """Its Lamport time."""
    gate: GateKind
    """Which gate let it through."""
    digest: str
    """Its leaf digest."""


@final
class ProposalRejected(_Event, frozen=True):
    """A proposal was refused by the gate or as a conflict."""

    type: Literal["proposal_rejected"] = "proposal_rejected"
    """Discriminator."""
    ref: str
    """`"key/id"` it asked for."""
    suggestor: str
    """Who proposed it."""
    reason: str
    """Why it was refused."""


@final
class GateRequested(_Event, frozen=True):
    """A proposal was held for a human."""

    type: Literal["gate_requested"] = "gate_requested"
    """Discriminator."""
    gate_id: str
    """The gate."""
    ref: str
    """`"key/id"` of the held proposal."""
    suggestor: str
    """Who proposed it."""


@final
class GateDecided(_Event, frozen=True):
    """A human (or a timeout) decided a gate."""

    type: Literal["gate_decided"] = "gate_decided"
    """Discriminator."""
    gate_id: str
    """The gate."""
    approved: bool
    """Whether the proposal was let through."""
    by: str
    """Who decided."""


@final
class InvariantViolated(_Event, frozen=True):
    """An invariant did not hold."""

    type: Literal["invariant_violated"] = "invariant_violated"
    """Discriminator."""
    invariant: str
    """Its name."""
    invariant_class: InvariantClass
    """Its class."""
    reason: str
    """Why."""


@final
class CycleFinished(_Event, frozen=True):
    """A cycle's merge is done."""

    type: Literal["cycle_finished"] = "cycle_finished"
    """Discriminator."""
    eligible: int
    """Suggestors that ran."""
    promoted: int
    """Facts promoted."""
    rejected: int
    """Proposals refused."""
    held: int
    """Proposals held for a human."""
    facts: int
    """Facts in the context afterwards."""
    by_key: tuple[tuple[KeyField, int], ...] = ()
    """How many facts each key gained, in key order (keys that gained none left out)."""


@final
class RunFinished(_Event, frozen=True):
    """The run stopped (converged, paused, or for another reason)."""

    type: Literal["run_finished"] = "run_finished"
    """Discriminator."""
    stop_reason: str
    """The `StopReason` value."""
    detail: str
    """The stop detail."""
    facts: int
    """Facts in the final context."""
    merkle_root: str
    """Its Merkle root."""
    tokens: int
    """Tokens spent."""


EngineEvent = Annotated[
    RunStarted
    | CycleStarted
    | SuggestorFinished
    | SuggestorFailed
    | SuggestorBlocked
    | FactPromoted
    | ProposalRejected
    | GateRequested
    | GateDecided
    | InvariantViolated
    | CycleFinished
    | RunFinished,
    Field(discriminator="type"),
]
"""Any engine event, discriminated by its `type`."""

# built on first use, as the events are (`FrozenModel`)
event_adapter: TypeAdapter[EngineEvent] = TypeAdapter(
    EngineEvent, config=ConfigDict(defer_build=True)
)
"""Validates and serialises any `EngineEvent` (e.g. `event_adapter.validate_json(text)`)."""


EVENT_TYPES: Final = frozenset(
    member.model_fields["type"].default for member in get_args(get_args(EngineEvent)[0])
)
"""Every `EngineEvent`'s `type`: what an observer's `event_types` may name."""


class Observer(Protocol):
    """Receives every event of every run, in order. Sync or async `on_event` both work.

    An observer that raises is isolated and logged; it never breaks a run. An observer
    with an `event_types` attribute (a set of event `type`s, from `EVENT_TYPES`) receives
    only those: the engine builds no event that nobody receives, so one that leaves out
    `fact_promoted` spares a run one event built per fact.
    """

    def on_event(self, event: EngineEvent, /) -> Awaitable[None] | None:
        """Handle one event."""
        ...


def wanted(observer: object) -> frozenset[str] | None:
    """The event types `observer` receives (its `event_types`); `None`: every type.

    Raises:
        ValueError: `event_types` is not a collection of strings, or names an unknown type.
    """
    events: object = getattr(observer, "event_types", None)
    if events is None:
        return None
    if isinstance(events, str) or not isinstance(events, Collection):
        raise ValueError(f"event_types must be a set of event types, not {type(events).__name__}")
    chosen = frozenset(cast("Collection[object]", events))
    unknown = sorted(repr(name) for name in chosen if name not in EVENT_TYPES)
    if unknown:
        raise ValueError(
            f"event_types names unknown event type(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(EVENT_TYPES))}"
        )
    return cast("frozenset[str]", chosen)


async def deliver(
    observers: Sequence[tuple[Observer, frozenset[str] | None]],
    events: Sequence[EngineEvent],
    on_error: Callable[[Observer, EngineEvent, Exception], None],
    within: float | None = None,
) -> tuple[Observer, EngineEvent] | None:
    """Hand `events` to every observer in order, each only the types it wants (`None`:
    all); report failures through `on_error`.

    With `within`, delivery stops when that many seconds have passed: the observer it was
    waiting for then, and the event, are returned (`None` when everything was delivered).
    """
    if within is None:
        await _deliver(observers, events, on_error, [])
        return None
    current: list[tuple[Observer, EngineEvent]] = []
    with anyio.move_on_after(within) as scope:
        await _deliver(observers, events, on_error, current)
    return current[0] if scope.cancel_called and current else None


async def _deliver(
    observers: Sequence[tuple[Observer, frozenset[str] | None]],
    events: Sequence[EngineEvent],
    on_error: Callable[[Observer, EngineEvent, Exception], None],
    current: list[tuple[Observer, EngineEvent]],
) -> None:
    for event in events:
        kind = event.type
        for observer, wants in observers:
            if wants is not None and kind not in wants:
                continue
            try:
                outcome = observer.on_event(event)
                if inspect.isawaitable(outcome):
                    current[:] = ((observer, event),)
                    await outcome
            except Exception as error:
                on_error(observer, event, error)
