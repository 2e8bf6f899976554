"""Invariants: what must hold of the context, when it is checked, and what a violation does."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, final, runtime_checkable

from ._context import Context
from ._model import FrozenModel, trusted
from ._text import storable

__all__ = [
    "Invariant",
    "InvariantClass",
    "InvariantResult",
    "Violation",
    "check_invariants",
]


@final
class InvariantClass(StrEnum):
    """When an invariant is checked and what a violation does."""

    STRUCTURAL = "structural"
    """After each suggestor's merge; a violation rolls that suggestor's effect back."""
    SEMANTIC = "semantic"
    """At the end of each cycle; a violation blocks convergence until repaired."""
    ACCEPTANCE = "acceptance"
    """At the fixed point; a violation ends the run `INVARIANT_VIOLATED`."""


@final
class InvariantResult(FrozenModel, frozen=True):
    """The outcome of one check: `InvariantResult.ok()` or `InvariantResult.violated(reason)`."""

    is_ok: bool
    """Whether the invariant holds."""
    reason: str | None = None
    """Why it does not hold."""

    @classmethod
    def ok(cls) -> InvariantResult:
        """The invariant holds."""
        return _OK

    @classmethod
    def violated(cls, reason: str) -> InvariantResult:
        """The invariant does not hold, for `reason`."""
        return cls(is_ok=False, reason=reason)


_OK = InvariantResult(is_ok=True)


@runtime_checkable
class Invariant(Protocol):
    """A condition on the context. Any class with these members qualifies."""

    @property
    def name(self) -> str:
        """Unique among an engine's invariants; used in violations."""
        ...

    @property
    def invariant_class(self) -> InvariantClass:
        """When it is checked."""
        ...

    def check(self, ctx: Context, /) -> InvariantResult:
        """Pure and deterministic: does the context satisfy it?"""
        ...


@final
class Violation(FrozenModel, frozen=True):
    """One recorded invariant violation."""

    invariant: str
    """The invariant's name."""
    invariant_class: InvariantClass
    """Its class."""
    cycle: int
    """The cycle in which it was found (0 for the inputs)."""
    reason: str
    """Why it failed, as the invariant (or the exception it raised) put it."""


def check_invariants(invariants: Sequence[Invariant], ctx: Context, cycle: int) -> list[Violation]:
    """Check each invariant; return every violation. One that raises counts as violated.

    A violation's name and reason are made storable (`_text.storable`): whatever text an
    invariant gives, the record keeps it.
    """
    found: list[Violation] = []
    for invariant in invariants:
        try:
            result = invariant.check(ctx)
            if isinstance(result, InvariantResult):  # pyright: ignore[reportUnnecessaryIsInstance]
                if result.is_ok:
                    continue
                reason = result.reason or "violated"
            else:
                reason = f"check() returned {type(result).__name__}, expected InvariantResult"
        except Exception as error:
            reason = _raised(error)
        found.append(
            trusted(
                Violation,
                {
                    "invariant": storable(invariant.name),
                    "invariant_class": InvariantClass(invariant.invariant_class),
                    "cycle": cycle,
                    "reason": storable(reason),
                },
            )
        )
    return found


def _raised(error: Exception) -> str:
    """What an invariant's `check` raised, and where."""
    last = traceback.extract_tb(error.__traceback__)[-1:]
    where = f" at {last[0].filename}:{last[0].lineno}" if last else ""
    try:
        message = str(error)
    except Exception as failed:  # a hostile or broken __str__
        message = f"(its str() raised {type(failed).__name__})"
    return f"check() raised {type(error).__name__}: {message}{where}"
