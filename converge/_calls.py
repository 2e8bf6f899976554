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

from ._canonical import freeze_json
from ._effect import AgentEffect
from ._model import trusted, trusted_builder
from ._registry import Registration
from ._trace import Execution, Outcome

__all__ = ["Returned", "Slot", "describe_error", "failure", "records", "returned"]

_build_execution: Final = trusted_builder(Execution)


def describe_error(error: BaseException) -> str:
    """`"TypeName: message"`, or the type name alone when the message is empty."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _metadata_of(error: BaseException) -> JsonValue:
    """A failure's `metadata` attribute as frozen JSON, if it is a JSON object (else none)."""
    value: object = getattr(error, "metadata", None)
    if not isinstance(value, Mapping) or not value:
        return None
    try:
        return freeze_json(cast("Mapping[str, object]", value), "metadata")
    except ValueError:
        return None


def failure(
    reg: Registration,
    outcome: Outcome,
    started: float,
    error: BaseException | str,
    *,
    phase: Literal["accepts", "execute"] = "execute",
    text: str | None = None,
) -> Execution:
    """An `Execution` record for a call that did not produce an effect.

    `text` replaces the error's description, keeping its traceback.
    """
    tokens = 0
    unknown = False
    metadata: JsonValue = None
    if isinstance(error, BaseException):
        formatted = "".join(traceback.format_exception(error))
        spent: object = getattr(error, "tokens", 0)
        if isinstance(spent, int) and spent > 0:
            tokens = spent  # a failure may still have cost model tokens
        # It cannot say what it spent (`tokens is None`), or only a part (`tokens_unknown`):
        # the count is then a lower bound.
        unknown = (hasattr(error, "tokens") and spent is None) or (
            getattr(error, "tokens_unknown", False) is True
        )
        metadata = _metadata_of(error)
        if text is None:
            text = describe_error(error)
    else:
        text, formatted = error, None
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
"""What a call that returned an effect leaves for its record: the registration, the duration
(ms), the proposal count, the tokens, the metadata, the effect itself only when effects
are recorded (so a cycle's log does not keep every effect's proposals alive), and whether its
tokens are only part of what it spent."""


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
        self, effect: AgentEffect, started: float, finished: float, record_effect: bool
    ) -> None:
        """The call returned `effect` between `started` and `finished` (`perf_counter()`);
        its record keeps the effect if `record_effect` (`returned`)."""
        self.returned = returned(self.reg, effect, started, finished, record_effect)
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


def returned(
    reg: Registration, effect: AgentEffect, started: float, finished: float, record_effect: bool
) -> Returned:
    """What the record of a call that returned `effect` between `started` and `finished`
    (`perf_counter()` readings) says; it keeps the effect itself if `record_effect`.

    What it says of the effect (how many proposals, the tokens, the metadata) is read now,
    as the executor checked it: an effect changed below the API afterwards does not change
    its call's record.
    """
    kept = effect if record_effect else None
    duration = (finished - started) * 1000.0
    return (
        reg,
        duration,
        len(effect.proposals),
        effect.tokens,
        effect.metadata,
        kept,
        effect.tokens_unknown,
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
    return tuple([_ok(c) if type(c) is tuple else cast("Execution", c) for c in calls])
