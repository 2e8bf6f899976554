"""A cycle's calls: one `Slot` per eligible suggestor, and their `Execution` records.

A call that failed or timed out gets its record the moment it ends (`failure`: its time and
traceback are of that moment). A call that returned an effect leaves what its record says
(`Returned`: the duration, the proposal count, the tokens and the metadata, read when it
returned; the effect itself only when effects are recorded), and the record is built the
first time something reads it (`Slot.execution`, or `records` of the cycle's calls): a run
whose trace nobody reads, with no observer at debug level and no failure to retry, never
builds one. That is about 1 µs per call (benchmark W4: 3 % of a one-fact cycle's
instructions; W2: 500 calls in one cycle).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import Final, Literal, cast, final

from pydantic import JsonValue

from .._core._canonical import freeze_json
from .._core._effect import MAX_TOKENS, AgentEffect, Refusal, metadata_problem
from .._core._error import describe_error
from .._core._model import share_names, trusted, trusted_builder
from .._core._proposal import ProposedFact
from .._core._text import storable
from .._core._trace import Execution, Outcome
from ._admit import admit, check_hashable
from ._gate import PromotionPolicy, field_reason
from ._recordable import recordable
from ._registry import Registration

__all__ = [
    "CUT",
    "Recorder",
    "Returned",
    "Slot",
    "failure",
    "records",
    "returned",
]

_build_execution: Final = trusted_builder(Execution)
_MISSING: Final = object()

CUT: Final = "cancelled: time budget exhausted"
"""The error of a call the run's time budget cancelled."""


def _attribute(error: BaseException, name: str, default: object) -> object:
    """`getattr(error, name, default)`, `default` as well when reading it raises."""
    try:
        return getattr(error, name, default)
    except Exception:  # a property that raises: the failure says nothing of it
        return default


def _traceback(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(error))
    except Exception as failed:  # whatever a hostile exception raises
        return f"(the traceback could not be formatted: {type(failed).__name__})"


def _metadata_of(error: BaseException) -> JsonValue:
    """A failure's `metadata` attribute as frozen JSON with its text made storable, if it is
    a JSON object within `MAX_METADATA_BYTES` (else none)."""
    return _frozen_metadata(_attribute(error, "metadata", None))


def _frozen_metadata(value: object) -> JsonValue:
    """`value` as frozen JSON with its text made storable, if it is a JSON object within
    `MAX_METADATA_BYTES` (else none)."""
    try:
        if not isinstance(value, Mapping) or not value:
            return None
        frozen = freeze_json(cast("Mapping[str, object]", value), "metadata", escape=True)
    except Exception:  # not JSON, or a mapping that raises when read
        return None
    return None if metadata_problem(frozen) is not None else frozen


def failure(
    reg: Registration,
    outcome: Outcome,
    started: float,
    error: BaseException | str,
    *,
    phase: Literal["accepts", "execute"] = "execute",
    text: str | None = None,
    note: Mapping[str, JsonValue] | None = None,
) -> Execution:
    """An `Execution` record for a call that did not produce an effect.

    `text` replaces the error's description, keeping its traceback. `note` is the metadata a
    cancelled call left (`_call_note`), kept in place of the error's. The description, the
    traceback and the metadata are made storable (`_text.storable`): whatever the exception
    holds, the record can be saved and read back.
    """
    tokens = 0
    unknown = False
    metadata: JsonValue = None
    formatted: str | None = None
    if isinstance(error, BaseException):
        formatted = storable(_traceback(error))
        spent = _attribute(error, "tokens", _MISSING)
        if type(spent) is int and 0 < spent <= MAX_TOKENS:
            tokens = spent  # a failure may still have cost model tokens
        # It cannot say what it spent (`tokens is None`), or only a part (`tokens_unknown`):
        # the count is then a lower bound.
        unknown = spent is None or _attribute(error, "tokens_unknown", False) is True
        metadata = _metadata_of(error)
        if text is None:
            text = describe_error(error)
    else:
        text = error
    if note is not None:
        metadata = _frozen_metadata(note)
    text = storable(text)
    return trusted(
        Execution,
        {
            "suggestor": reg.name,
            "suggestor_id": int(reg.id),
            "outcome": outcome,
            "duration_ms": (perf_counter() - started) * 1000.0,
            "proposals": 0,
            "tokens": tokens,
            "error": text,
            "phase": phase,
            "attempt": 1,
            "tokens_unknown": unknown,
            "metadata": metadata,
            "traceback": formatted,
            "effect": None,
        },
    )


Returned = tuple[Registration, float, int, int, JsonValue, AgentEffect | None, bool]
"""What a call that returned an effect leaves for its record (`records`): the registration,
the duration (ms), the proposal count, the tokens, the metadata, the effect itself only when
effects are recorded (so a cycle's log does not keep every effect's proposals alive), and
whether its tokens are only part of what it spent. A plain tuple typed by position, not a
NamedTuple: building a tuple subclass costs 0.35 µs a call more here (W4 +2 %)."""


@final
class Slot:
    """One eligible suggestor's call: its result, or its failure; neither if it was cancelled."""

    __slots__ = ("_execution", "effect", "error", "held", "late", "reg", "returned")

    def __init__(self, reg: Registration) -> None:
        self.reg = reg
        self.effect: AgentEffect | None = None
        """The effect the call returned, once it returned one in time."""
        self.returned: Returned | None = None
        """What its record says of that effect (`succeeded`)."""
        self.error: BaseException | None = None
        self.late = False
        """Its result came back after the run's deadline (and was dropped)."""
        self.held: float | None = None
        """Seconds the call ran without awaiting while its time limit passed (so nothing could
        cancel it): it held the event loop, with a blocking call."""
        self._execution: Execution | None = None

    @property
    def execution(self) -> Execution | None:
        """The call's record: its failure or timeout; an effect's, built on the first read;
        `None` while the call runs, and for good if it was cancelled."""
        execution = self._execution
        if execution is None and self.returned is not None:
            execution = self._execution = _ok(self.returned)
        return execution

    @execution.setter
    def execution(self, execution: Execution) -> None:
        self._execution = execution

    def succeeded(
        self, effect: AgentEffect, started: float, finished: float, recorder: Recorder | None
    ) -> None:
        """The call returned `effect` between `started` and `finished` (`perf_counter()`);
        its record keeps what `recorder` keeps of it, if any (`returned`)."""
        self.returned = returned(self.reg, effect, started, finished, recorder)
        self.effect = effect

    def failed(self, started: float, error: Exception) -> None:
        """The call raised `error` (or returned what is not an effect): a failure."""
        self._execution = failure(self.reg, "failed", started, error)
        self.error = error

    def stray(self, started: float, error: BaseException) -> None:
        """The call raised a cancellation exception that nothing requested: a failure."""
        reg = self.reg
        text = f"{describe_error(error)}, raised while nothing was cancelling the call"
        self._execution = failure(reg, "failed", started, error, text=text)
        wrapped = RuntimeError(f"execute() of {reg.name!r}: {text}")
        wrapped.__cause__ = error
        self.error = wrapped


@final
class Recorder:
    """What of an effect a trace keeps, when the engine records effects: what was validated,
    never the object the suggestor returned.

    The proposals kept are those the gate admits and whose own fields pass its checks
    (`field_reason`: blank text, sizes, ids), as validated; the others are left out (the
    merge rejects them, and records each once, bounded, in the cycle's rejections), so a
    replay of the trace rejects nothing that the run promoted and promotes nothing it
    rejected. Refusals keep their proposals bounded (`recordable`). An effect that needs
    nothing left out is kept as it is.
    """

    __slots__ = ("_policy",)

    def __init__(self, policy: PromotionPolicy) -> None:
        self._policy = policy

    def keep(self, effect: AgentEffect) -> AgentEffect:
        """`effect` as the trace keeps it (it has passed `Executor.settle`'s checks)."""
        policy = self._policy
        proposals = effect.proposals
        kept: list[object] = []
        changed = False
        for proposal in proposals:
            admitted = admit(proposal)
            if isinstance(admitted, str) or not _passes(policy, admitted):
                changed = True
                continue
            changed = changed or admitted is not proposal
            share_names(admitted)  # kept for the run's whole life: 728 bytes fewer each
            kept.append(admitted)
        refused: tuple[Refusal, ...] = effect.refused
        if refused:
            bounded: list[Refusal] = []
            for refusal in refused:
                proposal = recordable(refusal.proposal, policy)
                if proposal is not refusal.proposal:
                    changed = True
                    refusal = trusted(Refusal, {"proposal": proposal, "reason": refusal.reason})
                bounded.append(refusal)
            refused = tuple(bounded)
        if not changed:
            return effect
        return trusted(
            AgentEffect,
            {
                "proposals": tuple(kept),
                "tokens": effect.tokens,
                "refused": refused,
                "metadata": effect.metadata,
            },
        )


def _passes(policy: PromotionPolicy, proposal: ProposedFact) -> bool:
    """Whether an admitted proposal passes the gate's checks of its own fields and can be
    hashed (a copy that skipped validation may hold a lone surrogate)."""
    if field_reason(policy, proposal, "engine") is not None:
        return False
    try:
        check_hashable(proposal)
    except ValueError:
        return False
    return True


def returned(
    reg: Registration,
    effect: AgentEffect,
    started: float,
    finished: float,
    recorder: Recorder | None,
) -> Returned:
    """What the record of a call that returned `effect` between `started` and `finished`
    (`perf_counter()` readings) says; it keeps what `recorder` keeps of the effect, if any.

    What it says of the effect (how many proposals, the tokens, the metadata) is read now,
    as the executor checked it: an effect changed below the API afterwards does not change
    its call's record.
    """
    kept = None if recorder is None else recorder.keep(effect)
    own = effect.__dict__  # read once: a model's attributes are slower to load
    return (
        reg,
        (finished - started) * 1000.0,
        len(own["proposals"]),
        own["tokens"],
        own["metadata"],
        kept,
        own["tokens_unknown"],
    )


def _ok(returned: Returned) -> Execution:
    reg, duration, proposals, tokens, metadata, effect, unknown = returned
    return _build_execution(
        {
            "suggestor": reg.name,
            "suggestor_id": int(reg.id),
            "outcome": "ok",
            "duration_ms": duration,
            "proposals": proposals,
            "tokens": tokens,
            "error": None,
            "phase": "execute",
            "attempt": 1,
            "tokens_unknown": unknown,
            "metadata": metadata,
            "traceback": None,
            "effect": effect,
        },
    )


def records(calls: Sequence[Execution | Returned]) -> tuple[Execution, ...]:
    """The records of `calls`: an `Execution` as it is, what a returned call left built into
    its `Execution`."""
    return tuple([_ok(c) if isinstance(c, tuple) else c for c in calls])
