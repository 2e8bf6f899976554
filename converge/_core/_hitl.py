"""Human in the loop: which proposals wait for a person, the requests, and the decisions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final, Literal, final

from pydantic import ConfigDict, Field, field_validator

from ._key import KeyField
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._text import identity_problem, storable

__all__ = ["GateDecision", "GateRequest", "HitlPolicy", "TimeoutAction", "utc_now"]

TimeoutAction = Literal["reject", "approve"]

_SAID: Final = 200
"""At most this many characters of a predicate's exception go into a gate's rule."""


def _storable(text: str) -> str:
    """`text` with any lone surrogate escaped, so that a record holding it can be saved."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _said(error: Exception) -> str:
    """What `error` says, or that it cannot say (its `__str__` raised)."""
    try:
        return str(error)
    except Exception:
        return "(its message cannot be shown)"


def _name(predicate: object) -> str:
    """A predicate's name, as a rule names it."""
    return _storable(getattr(predicate, "__qualname__", None) or type(predicate).__name__)


def utc_now() -> datetime:
    """Now, in UTC: the engine's clock unless one is given (`Engine(clock=...)`)."""
    return datetime.now(UTC)


@final
class HitlPolicy(FrozenModel, frozen=True):
    """Which proposals are held for a human, and what happens when nobody decides in time.

    A proposal is gated when its key is in `gated_keys`, its confidence is strictly below
    `confidence_below`, or `predicate` returns true (a predicate that raises gates too).
    Inputs are never gated.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True, extra="forbid", strict=True, arbitrary_types_allowed=True
    )

    gated_keys: frozenset[KeyField] = frozenset()
    """Keys whose every proposal waits for a human."""
    confidence_below: float | None = Field(default=None, ge=0.0, le=1.0, strict=False)
    """Gate proposals with a confidence strictly below this."""
    predicate: Callable[[ProposedFact], bool] | None = None
    """Gate proposals for which this returns true."""
    timeout: timedelta | None = None
    """How long a gate may wait; `None` waits forever."""
    on_timeout: TimeoutAction = "reject"
    """What an expired gate becomes, decided by `"timeout"`."""

    def gates(self, proposal: ProposedFact) -> bool:
        """Whether `proposal` must wait for a human."""
        return self.held_by(proposal) is not None

    def held_by(self, proposal: ProposedFact) -> str | None:
        """The rule that holds `proposal` for a human, said for a reviewer; `None` if none does.

        The first rule that holds it, in the order key, confidence, predicate, with the
        proposal's value that triggered it (the text is recorded as `GateRequest.rule`).
        """
        key = proposal.key
        if key in self.gated_keys:
            return f"its key {getattr(key, 'value', key)} is in HitlPolicy.gated_keys"
        threshold = self.confidence_below
        confidence = proposal.confidence
        if threshold is not None and confidence < threshold:
            return (
                f"its confidence {confidence:g} is below HitlPolicy.confidence_below {threshold:g}"
            )
        predicate = self.predicate
        if predicate is None:
            return None
        try:
            held = bool(predicate(proposal))
        except Exception as error:  # fail closed: an undecidable proposal waits for a human
            said = _storable(f"{type(error).__name__}: {_said(error)}")[:_SAID]
            return (
                f"HitlPolicy.predicate {_name(predicate)} raised {said} (a predicate that "
                "raises holds the proposal)"
            )
        return f"HitlPolicy.predicate {_name(predicate)} returned true" if held else None


@final
class GateRequest(FrozenModel, frozen=True):
    """A proposal held for a human decision."""

    gate_id: str
    """`"gate:{cycle}:{key}/{id}"`, unique within a run."""
    proposal: ProposedFact
    """The held proposal."""
    suggestor: str
    """The suggestor that proposed it."""
    suggestor_id: int
    """Its registration id."""
    cycle: int
    """The cycle that held it."""
    summary: str
    """What to show a reviewer: the proposal's content."""
    deadline: datetime | None = None
    """When the gate expires (UTC), or `None`."""
    rule: str = Field(default="", exclude_if=lambda rule: not rule)
    """The policy rule that held it, with the value that triggered it (`HitlPolicy.held_by`);
    `""` for a gate held before converge recorded it. Left out of the JSON when empty, so
    older records load and their signatures still verify."""


@final
class GateDecision(FrozenModel, frozen=True):
    """A human's answer to one gate: build with `approve` or `reject`."""

    gate_id: str
    """The gate decided."""
    approved: bool
    """Whether the proposal becomes a fact."""
    by: str = Field(min_length=1)
    """Who decided (`"timeout"` for an expired gate): a name, so no lone surrogate, control
    character, or invisible or bidirectional control."""
    reason: str | None = None
    """Why, for a rejection. Text that cannot be stored (a lone surrogate, NUL) is escaped
    and said so, and a reason is cut past 65,536 characters."""

    @field_validator("gate_id", "by", mode="before")
    @classmethod
    def _is_a_name(cls, value: object) -> object:
        if isinstance(value, str):
            problem = identity_problem(value)
            if problem is not None:
                raise ValueError(f"{value!r} {problem}")
        return value

    @field_validator("reason", mode="before")
    @classmethod
    def _reason_is_storable(cls, value: object) -> object:
        return storable(value) if isinstance(value, str) else value

    @classmethod
    def approve(cls, gate_id: str, *, by: str) -> GateDecision:
        """Let the proposal through."""
        return cls(gate_id=gate_id, approved=True, by=by)

    @classmethod
    def reject(cls, gate_id: str, *, by: str, reason: str | None = None) -> GateDecision:
        """Refuse the proposal; it cannot be proposed again in this run."""
        return cls(gate_id=gate_id, approved=False, by=by, reason=reason)
