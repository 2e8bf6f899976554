"""The `Pack` protocol: a governed solver that `PackSuggestor` turns into a suggestor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeVar

from pydantic import BaseModel

from ._invariant import InvariantResult

__all__ = ["GateVerdict", "Pack"]

GateVerdict = Literal["promote", "escalate", "reject"]
"""What a pack's gate decides for a plan: promote it, escalate it for review, or reject it."""

InputT = TypeVar("InputT", bound=BaseModel)
PlanT = TypeVar("PlanT", bound=BaseModel)


class Pack(Protocol[InputT, PlanT]):
    """A governed solver: validated inputs in, a plan out, checked by its own invariants and gate.

    Any class with these members qualifies; `converge_suggestors.PackSuggestor` runs it on
    every input fact of one key.
    """

    @property
    def name(self) -> str:
        """The pack's name, used in fact ids (`"{pack}:{input id}"`)."""
        ...

    @property
    def version(self) -> str:
        """The pack's version, recorded in provenance."""
        ...

    @property
    def input_model(self) -> type[InputT]:
        """The pydantic model an input fact's payload must validate into."""
        ...

    def solve(self, inputs: InputT, /) -> PlanT:
        """Compute a plan."""
        ...

    def check_invariants(self, plan: PlanT, /) -> Sequence[InvariantResult]:
        """Check the plan against the pack's own rules."""
        ...

    def evaluate_gate(self, plan: PlanT, results: Sequence[InvariantResult], /) -> GateVerdict:
        """Decide what happens to the plan, given the invariant results."""
        ...
