"""`Checkpoint` and `FactRecord`: a paused run as plain JSON, and the only way facts come back.

`restore_snapshot` is the one verifying restore: it recomputes every fact's digest, checks the
order and the Merkle root, and refuses any mismatch. Signing and the run state on both sides
of a pause live in `_pause`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, final

from pydantic import Field, JsonValue

from ._context import ContextSnapshot
from ._fact import Fact, PromotionRecord
from ._hitl import GateDecision, GateRequest
from ._invariant import Violation
from ._key import STORED, AnyKey, KeyField, key_rank
from ._model import FrozenModel, trusted
from ._proposal import ProposedFact
from ._seal import seal
from ._trace import Continuation, CycleTrace, Rejection

__all__ = ["Checkpoint", "FactRecord", "restore_fact", "restore_snapshot"]


@final
class FactRecord(FrozenModel, frozen=True):
    """A fact as stored in JSON. Only a verified restore turns it back into a `Fact`."""

    key: KeyField
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
    target: KeyField | None = None
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
    dirty: tuple[KeyField, ...]
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
    continuations: tuple[Continuation, ...] = Field(default=(), exclude_if=lambda v: not v)
    """Where the run was interrupted and continued so far (left out of JSON when none)."""
    signature: str | None = None
    """HMAC-SHA256 of the rest, hex, when the engine has a signing key."""


def restore_fact(record: FactRecord) -> Fact:
    """Rebuild one fact from its record, refusing it when the digest does not match its fields.

    Raises:
        ValueError: The record does not describe a valid fact, or its digest does not match.
    """
    fields = record.model_dump()
    digest = fields.pop("digest")
    promotion = PromotionRecord.model_validate(fields.pop("promotion"), strict=False)
    proposal = ProposedFact.model_validate(fields, strict=False, context=STORED)
    fact = seal(proposal, promotion)
    if fact.digest != digest:
        raise ValueError(f"fact {fact.ref}: digest {digest!r} does not match its fields")
    return fact


def restore_snapshot(
    records: Sequence[FactRecord], *, cycle: int, clock: int, merkle_root: str
) -> ContextSnapshot:
    """The one verifying restore: facts back from JSON, checked one by one and as a whole.

    Every fact's digest is recomputed from its fields; the facts must come in key order with
    no `(key, id)` twice; the rebuilt context must hash to `merkle_root`. Checkpoints and
    stored runs both come back through here.

    Raises:
        ValueError: The first check that failed, naming the fact's index and reference.
    """
    facts: list[Fact] = []
    leaves: list[bytes] = []  # the digests just recomputed, read before anyone else holds a fact
    seen: set[tuple[AnyKey, str]] = set()
    last_key = (-1, "")
    for index, record in enumerate(records):
        try:
            fact = restore_fact(record)
        except ValueError as error:
            raise ValueError(f"facts[{index}]: {error}") from None
        order = key_rank(fact.key)
        if order < last_key or (fact.key, fact.id) in seen:
            raise ValueError(f"facts[{index}] ({fact.ref}) is out of order or repeated")
        last_key = order
        seen.add((fact.key, fact.id))
        facts.append(fact)
        leaves.append(fact.__dict__["digest"])
    snapshot = ContextSnapshot.empty()._extend(facts, leaves, cycle, clock)  # pyright: ignore[reportPrivateUsage]
    root = snapshot.merkle_root()
    if root != merkle_root:
        raise ValueError(f"its facts hash to {root}, not to the recorded Merkle root {merkle_root}")
    return snapshot
