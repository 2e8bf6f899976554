"""`verdict`: what a human decided of a promoted fact, as the command and the report say it.

A proposal a human approved is promoted with its approver (`approved_by`). A human's
rejection is promoted too, as the `DIAGNOSTIC` note `hitl-rejected:{id}` with the decider as
its approver (only the human gate may write such a note): that fact records a rejection,
and is never to be labelled "approved".
"""

from __future__ import annotations

from typing import Literal, Protocol

from ._fact import PromotionRecord
from ._gate import RESERVED_PREFIX
from ._key import AnyKey, ContextKey

__all__ = ["Verdict", "verdict"]

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
