"""The promotion gate: the checks every proposal passes, and the one place it becomes a fact.

`PromotionPolicy` holds the gate's limits and checks. A `Gate` applies them for one merge
(one cycle, one gate kind: the engine's, the input gate or a human's) and promotes what
passes, stamping each fact with its `PromotionRecord`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final, final

from pydantic import Field

from ._fact import Fact, GateKind, PromotionRecord, seal
from ._key import ContextKey
from ._model import FrozenModel, trusted
from ._proposal import ProposedFact

__all__ = ["Gate", "PromotionPolicy"]

_BAD_ID_CHARACTER: Final = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")


@final
class PromotionPolicy(FrozenModel, frozen=True):
    """Limits of the engine gate. The gate itself is always on.

    The gate rejects, in this order: blank content; blank provenance; an id that is empty,
    too long, or holds whitespace or control characters; content over `max_content_bytes`;
    a key the suggestor may not write; a `PROPOSALS` proposal without a `target` or targeting
    `PROPOSALS`, and a `target` on any other key; a `(key, id)` a human rejected in this run.
    """

    max_content_bytes: int = Field(default=1024 * 1024, ge=1)
    """Largest content, in UTF-8 bytes (default 1 MiB)."""
    max_id_length: int = Field(default=256, ge=1)
    """Longest id, in characters."""

    def check(
        self,
        proposal: ProposedFact,
        writes: Collection[ContextKey] | None,
        refused: Collection[tuple[ContextKey, str]] = (),
    ) -> str | None:
        """The reason the gate refuses `proposal`, or `None` when it passes."""
        if not proposal.content.strip():
            return "content is blank"
        if not proposal.provenance.strip():
            return "provenance is blank"
        ident = proposal.id
        if not ident:
            return "id is empty"
        if len(ident) > self.max_id_length:
            return f"id is {len(ident)} characters long, over the limit of {self.max_id_length}"
        if _BAD_ID_CHARACTER.search(ident):
            return f"id {ident!r} contains whitespace or control characters"
        content = proposal.content
        if len(content) * 4 > self.max_content_bytes:
            size = len(content.encode("utf-8"))
            if size > self.max_content_bytes:
                return f"content is {size} bytes, over the limit of {self.max_content_bytes}"
        key = proposal.key
        if writes is not None and key not in writes:
            return f"not authorised to write {key.value}"
        target = proposal.target
        if key is ContextKey.PROPOSALS:
            if target is None:
                return "a proposal under proposals needs a target"
            if target is ContextKey.PROPOSALS:
                return "a staged proposal cannot target proposals"
        elif target is not None:
            return f"target is only allowed under proposals, not under {key.value}"
        if refused and (key, ident) in refused:
            return f"{proposal.ref} was rejected by a human in this run"
        return None


@final
class Gate:
    """The gate of one merge: checks proposals against the policy and promotes them."""

    __slots__ = ("_cycle", "_kind", "_policy", "_refused")

    def __init__(
        self,
        policy: PromotionPolicy,
        *,
        cycle: int,
        kind: GateKind,
        refused: frozenset[tuple[ContextKey, str]] = frozenset(),
    ) -> None:
        self._policy = policy
        self._cycle = cycle
        self._kind: GateKind = kind
        self._refused = refused

    def check(self, proposal: ProposedFact, writes: Collection[ContextKey] | None) -> str | None:
        """Why the gate refuses `proposal` from a suggestor allowed to write `writes`, or `None`."""
        return self._policy.check(proposal, writes, self._refused)

    def promote(
        self,
        proposal: ProposedFact,
        suggestor: str,
        suggestor_id: int,
        clock: int,
        approved_by: str | None = None,
    ) -> Fact:
        """The fact of a proposal that passed, at Lamport time `clock`.

        Raises:
            ValueError: The proposal skipped validation and its payload cannot be hashed.
        """
        record = trusted(
            PromotionRecord,
            {
                "cycle": self._cycle,
                "suggestor": suggestor,
                "suggestor_id": suggestor_id,
                "clock": clock,
                "gate": self._kind,
                "approved_by": approved_by,
            },
        )
        return seal(proposal, record)
