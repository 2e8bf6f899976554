"""`IntegrityProof` and `verify`: check that a snapshot holds exactly the facts a run promoted."""

from __future__ import annotations

from typing import final

from ._canonical import merkle_root
from ._context import ContextSnapshot
from ._fact import fact_digest
from ._model import FrozenModel

__all__ = ["IntegrityProof", "verify"]


@final
class IntegrityProof(FrozenModel, frozen=True):
    """What a run commits to: the Merkle root of its facts, the final clock, the fact count."""

    merkle_root: str
    """Hex SHA-256 Merkle root over every fact's leaf digest, in key then insertion order."""
    clock: int
    """The Lamport clock after the last promoted fact."""
    fact_count: int
    """How many facts the context holds."""

    @classmethod
    def of(cls, snapshot: ContextSnapshot) -> IntegrityProof:
        """The proof for `snapshot`, from its stored digests."""
        return cls(
            merkle_root=snapshot.merkle_root(), clock=snapshot.clock, fact_count=len(snapshot)
        )


def verify(snapshot: ContextSnapshot, proof: IntegrityProof) -> bool:
    """Whether `snapshot` matches `proof`, recomputing every digest from the facts' fields.

    A fact whose fields no longer match its stored digest (a payload mutated in place, say)
    makes this false, as does any added, missing or reordered fact.
    """
    facts = snapshot.facts()
    if len(facts) != proof.fact_count or snapshot.clock != proof.clock:
        return False
    digests: list[bytes] = []
    for fact in facts:
        digest = fact_digest(fact)
        if digest != fact.digest:
            return False
        digests.append(bytes.fromhex(digest))
    return merkle_root(digests) == proof.merkle_root
