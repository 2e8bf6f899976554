"""Invariant classes and recorded violations."""

from __future__ import annotations

from enum import StrEnum
from typing import final

from ._model import FrozenModel

__all__ = ["InvariantClass", "Violation"]


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
class Violation(FrozenModel, frozen=True):
    """One recorded invariant violation."""

    invariant: str
    """The invariant's name."""
    invariant_class: InvariantClass
    """Its class."""
    cycle: int
    """The cycle in which it was found."""
    reason: str
    """Why it failed, as the invariant (or the exception it raised) put it."""
