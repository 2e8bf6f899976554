"""`Checkpoint`: a paused run as plain JSON, and the only way facts come back from JSON.

Restoring recomputes every fact's digest and the Merkle root and refuses any mismatch. With
a signing key, checkpoints carry an HMAC-SHA256 over their canonical JSON; unsigned or
mis-signed ones are refused.
"""

from __future__ import annotations

import hmac
from hashlib import sha256
from typing import Literal, final

from pydantic import Field, JsonValue

from ._canonical import canonical_json
from ._context import ContextSnapshot
from ._exceptions import InvalidCheckpointError
from ._fact import Fact, PromotionRecord, restore
from ._hitl import GateDecision, GateRequest
from ._invariant import Violation
from ._key import KEY_ORDER, ContextKey
from ._model import FrozenModel, trusted
from ._proposal import ProposedFact
from ._trace import CycleTrace, Rejection

__all__ = ["Checkpoint", "FactRecord", "restore_snapshot", "sign", "verify_signature"]


@final
class FactRecord(FrozenModel, frozen=True):
    """A fact as stored in JSON. Only a verified restore turns it back into a `Fact`."""

    key: ContextKey
    """The context key."""
    id: str
    """The fact's id."""
    content: str
    """The claim."""
    payload: JsonValue | None = None
    """Structured data."""
    confidence: float
    """The proposer's confidence."""
    provenance: str
    """Who claimed it."""
    target: ContextKey | None = None
    """The staged target, under `PROPOSALS`."""
    evidence: tuple[str, ...] = ()
    """`"key/id"` references."""
    promotion: PromotionRecord
    """How it was promoted."""
    digest: str
    """Its leaf digest, checked on restore."""

    @classmethod
    def of(cls, fact: Fact) -> FactRecord:
        """The record of a promoted fact."""
        return trusted(cls, {name: getattr(fact, name) for name in Fact.model_fields})


@final
class Checkpoint(FrozenModel, frozen=True):
    """Everything needed to resume a paused run in another process, as plain JSON.

    Serialise with `model_dump_json()`, read back with `Checkpoint.model_validate_json(...)`,
    and pass to `Engine.resume`, which verifies every fact before using it.
    """

    format: Literal[1] = 1
    """The checkpoint format version."""
    run_id: str
    """The paused run."""
    registrations: tuple[str, ...]
    """`"{id}:{name}:{pack}"` for each registered suggestor, in id order."""
    invariants: tuple[str, ...]
    """`"{name}:{class}:{pack}"` for each registered invariant."""
    facts: tuple[FactRecord, ...]
    """Every fact, in key order then insertion order."""
    merkle_root: str
    """The Merkle root of `facts`."""
    clock: int
    """The Lamport clock."""
    version: int
    """The context's version."""
    cycle: int
    """The cycle that paused."""
    dirty: tuple[ContextKey, ...]
    """Keys that gained facts in the paused cycle."""
    tokens: int
    """Tokens spent so far."""
    elapsed_seconds: float = Field(ge=0.0)
    """The run's own time so far (not the wait for a human)."""
    refused: tuple[str, ...] = ()
    """`"key/id"` of proposals a human rejected in this run."""
    pending: tuple[GateRequest, ...]
    """The gates awaiting decisions."""
    decisions: tuple[GateDecision, ...] = ()
    """Decisions applied earlier in this run."""
    rejections: tuple[Rejection, ...] = ()
    """Rejections so far."""
    cycles: tuple[CycleTrace, ...] = ()
    """The trace so far."""
    inputs: tuple[ProposedFact, ...] = ()
    """The run's inputs."""
    input_violations: tuple[Violation, ...] = ()
    """Structural violations of the inputs."""
    initial_root: str
    """The Merkle root of the starting context."""
    signature: str | None = None
    """HMAC-SHA256 of the rest, hex, when the engine has a signing key."""


def _signed_bytes(checkpoint: Checkpoint) -> bytes:
    return canonical_json(checkpoint.model_dump(mode="json", exclude={"signature"}))


def sign(checkpoint: Checkpoint, key: bytes | None) -> Checkpoint:
    """`checkpoint` with its signature set (unchanged without a key)."""
    if key is None:
        return checkpoint
    signature = hmac.new(key, _signed_bytes(checkpoint), sha256).hexdigest()
    return checkpoint.model_copy(update={"signature": signature})


def verify_signature(checkpoint: Checkpoint, key: bytes | None) -> None:
    """Refuse an unsigned or mis-signed checkpoint when the engine has a key."""
    if key is None:
        return
    if checkpoint.signature is None:
        raise InvalidCheckpointError(
            f"checkpoint of run {checkpoint.run_id} is unsigned, but this engine requires "
            "signed checkpoints"
        )
    expected = hmac.new(key, _signed_bytes(checkpoint), sha256).hexdigest()
    if not hmac.compare_digest(expected, checkpoint.signature):
        raise InvalidCheckpointError(
            f"checkpoint of run {checkpoint.run_id} has a bad signature: it was changed "
            "or signed with another key"
        )


def restore_snapshot(checkpoint: Checkpoint) -> ContextSnapshot:
    """Rebuild the paused context, verifying every digest, the order and the Merkle root."""
    facts: list[Fact] = []
    seen: set[tuple[ContextKey, str]] = set()
    last_key = -1
    for index, record in enumerate(checkpoint.facts):
        try:
            fact = restore(record.model_dump())
        except ValueError as error:
            raise InvalidCheckpointError(
                f"checkpoint of run {checkpoint.run_id}: facts[{index}]: {error}"
            ) from None
        order = KEY_ORDER[fact.key]
        if order < last_key or (fact.key, fact.id) in seen:
            raise InvalidCheckpointError(
                f"checkpoint of run {checkpoint.run_id}: facts[{index}] ({fact.ref}) is out of "
                "order or repeated"
            )
        last_key = order
        seen.add((fact.key, fact.id))
        facts.append(fact)
    snapshot = ContextSnapshot.empty()._extend(facts, checkpoint.cycle, checkpoint.clock)  # pyright: ignore[reportPrivateUsage]
    root = snapshot.merkle_root()
    if root != checkpoint.merkle_root:
        raise InvalidCheckpointError(
            f"checkpoint of run {checkpoint.run_id}: its facts hash to {root}, not to the "
            f"recorded Merkle root {checkpoint.merkle_root}"
        )
    return snapshot
