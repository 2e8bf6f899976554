"""`IntegrityProof` and `verify`: check that a snapshot holds exactly the facts a run promoted.

`changed` is the engine's own check of the same, against what the context kept at promotion:
each fact's leaf re-derived from its fields. A run whose facts leave the process (it has a
store or a signing key) ends with it (`RunState.changed_facts`, from `RunLoop._finish`), and
every record built for saving or signing runs it (`_checkpoint.fact_records`).
"""

from __future__ import annotations

from itertools import chain, repeat
from typing import Final, final

from ._canonical import merkle_root
from ._context import ContextSnapshot
from ._invariant import InvariantClass, Violation
from ._model import FrozenModel, trusted
from ._seal import fact_digest, unchanged
from ._witness import Witnesses, as_sealed

__all__ = [
    "INTEGRITY",
    "IntegrityProof",
    "changed",
    "changed_since",
    "ended_on",
    "verify",
    "violation",
]

INTEGRITY: Final = "integrity"
"""The name of the engine's built-in check that the facts are those it promoted."""


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


def changed(snapshot: ContextSnapshot, witnesses: Witnesses | None = None) -> str | None:
    """What changed below the API in `snapshot`'s facts since their promotion, in one line
    naming the first fact found, or `None` when every fact is as promoted.

    Each fact's leaf is re-derived from its fields and compared with the leaf the context
    kept when it promoted (or restored) the fact, and with the `digest` the fact carries.
    A fact with a witness in `witnesses` (`_witness`) whose fields are still its very
    objects is not written again: they give that leaf. The fact is named by the key and id
    the context kept, not by what the fact says now.
    """
    for key, store, facts, leaves in snapshot._columns():  # pyright: ignore[reportPrivateUsage]
        start, held = (0, ()) if witnesses is None else witnesses.span(key)
        kept = chain(repeat(None, start), held, repeat(None))  # each fact's witness, if any
        for fact, leaf, witness in zip(facts, leaves, kept, strict=False):
            if witness is not None and as_sealed(fact, leaf, witness):
                continue
            if not unchanged(fact, leaf):
                return changed_since(key, store.ident(fact))
    return None


def changed_since(key: object, ident: str) -> str:
    """The words for a fact changed since its promotion (`key/ident`)."""
    return (
        f"fact {key}/{ident} was changed after its promotion: its fields no longer give "
        "the leaf digest the engine kept for it"
    )


def ended_on(problem: str) -> str:
    """The stop detail of a run that ended on `problem` (what `changed` found)."""
    return f"{INTEGRITY}: {problem}"


def violation(problem: str, cycle: int) -> Violation:
    """The built-in `integrity` violation of `problem` (what `changed` found) in `cycle`."""
    return Violation(
        invariant=INTEGRITY,
        invariant_class=InvariantClass.ACCEPTANCE,
        cycle=cycle,
        reason=problem,
    )


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
