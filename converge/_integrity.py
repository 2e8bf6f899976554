"""`IntegrityProof` and `verify`: check that a snapshot holds exactly the facts a run promoted."""

from __future__ import annotations

from typing import final

from ._canonical import merkle_root
from ._context import ContextSnapshot
from ._model import FrozenModel, trusted
from ._seal import fact_digest

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
        """The proof for `snapshot`, from the leaf digests the engine kept for its facts.

        Built without validation: the snapshot's own figures are of the declared types.
        """
        fields: dict[str, object] = {
            "merkle_root": snapshot.merkle_root(),
            "clock": snapshot.clock,
            "fact_count": len(snapshot),
        }
        return trusted(cls, fields)


def verify(snapshot: ContextSnapshot, proof: IntegrityProof) -> bool:
    """Whether `snapshot` holds exactly the facts the engine promoted, as `proof` commits.

    Each fact's digest is recomputed from its fields and compared with the leaf the context
    kept when the engine promoted (or restored) that fact, and with the `digest` the fact
    carries; the root is built from the kept leaves. A fact changed in any way since (its
    digest recomputed or not), or a fact added, missing or reordered, makes this false.
    """
    if len(snapshot) != proof.fact_count or snapshot.clock != proof.clock:
        return False
    leaves: list[bytes] = []
    for fact, leaf in snapshot._sealed():  # pyright: ignore[reportPrivateUsage]
        try:
            digest = fact_digest(fact)
        except (ValueError, TypeError, LookupError, AttributeError):  # changed below the API
            return False
        if digest != leaf or fact.__dict__.get("digest") != leaf:
            return False
        leaves.append(leaf)
    return merkle_root(leaves) == proof.merkle_root
