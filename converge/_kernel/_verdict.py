"""What a human decided of a proposal: the note a rejection leaves, and how to label a fact.

A proposal a human approved is promoted with its approver (`approved_by`). A human's
rejection is promoted too, as the `DIAGNOSTIC` note `hitl-rejected:{id}` (`rejection_note`)
with the decider as its approver (only the human gate may write such a note): that fact
records a rejection, and `verdict` never labels it "approved".
"""

from __future__ import annotations

from typing import Literal, Protocol

from .._core._fact import PromotionRecord
from .._core._hitl import GateDecision
from .._core._key import AnyKey, ContextKey
from .._core._proposal import ProposedFact
from ._gate import RESERVED_PREFIX

__all__ = ["Verdict", "rejection_note", "verdict"]

Verdict = Literal["approved", "rejected"]
"""What a human decided."""


class _Promoted(Protocol):
    @property
    def key(self) -> AnyKey: ...
    @property
    def id(self) -> str: ...
    @property
    def promotion(self) -> PromotionRecord: ...


def verdict(fact: _Promoted) -> tuple[Verdict, str] | None:
    """`("approved", by)` or `("rejected", by)` for a fact a human decision promoted."""
    by = fact.promotion.approved_by
    if by is None:
        return None
    if fact.key is ContextKey.DIAGNOSTIC and fact.id.startswith(RESERVED_PREFIX):
        return "rejected", by
    return "approved", by


def rejection_note(proposal: ProposedFact, decision: GateDecision) -> ProposedFact:
    """The `DIAGNOSTIC` fact a human rejection leaves behind."""
    reason = decision.reason or "no reason provided"
    return ProposedFact(
        key=ContextKey.DIAGNOSTIC,
        id=f"{RESERVED_PREFIX}{proposal.id}",
        content=f"HITL gate rejected proposal '{proposal.id}' by {decision.by}: {reason}",
        provenance=f"human:{decision.by}",
        evidence=tuple(proposal.evidence),
    )
