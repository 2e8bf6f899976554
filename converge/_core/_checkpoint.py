"""`Checkpoint` and `FactRecord`: a paused run as plain JSON, and the only way facts come back.

`restore_snapshot` is the one verifying restore: it recomputes every fact's digest, checks the
order and the Merkle root, and refuses any mismatch. `fact_records` is the way out: the
records of a snapshot's facts, each with the leaf digest the engine kept at its promotion,
checked on the way (a fact changed below the API since is said, and its record then never
matches its digest). Signing and the run state on both sides of a pause live in `_pause`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import groupby
from operator import attrgetter
from typing import Literal, TypeAlias, cast, final

from pydantic import Field, JsonValue, ValidationError

from ._canonical import freeze_json
from ._context import ContextSnapshot
from ._fact import Fact, PromotionRecord, PromotionValues, record_of
from ._hitl import GateDecision, GateRequest
from ._integrity import changed_since
from ._invariant import Violation
from ._key import STORED, AnyKey, KeyField, key_rank
from ._model import Fields, FrozenModel, trusted, trusted_builder
from ._proposal import ProposedFact
from ._seal import Texts, promoted_json, record_json, seal, unchanged
from ._text import storable
from ._trace import Continuation, CycleTrace, Rejection
from ._witness import Witness, Witnesses

__all__ = [
    "AnyFact",
    "Checkpoint",
    "FactRecord",
    "ForkKind",
    "Lineage",
    "clock_of",
    "fact_records",
    "fact_texts",
    "key_spans",
    "restore_fact",
    "restore_snapshot",
]


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
        """The record of a promoted fact, as its fields read now (with the `digest` it
        carries). A record of a context's facts comes from `fact_records`, with the leaves
        the context kept."""
        return trusted(cls, {name: getattr(fact, name) for name in Fact.model_fields})


AnyFact: TypeAlias = Fact | FactRecord
"""A fact, or the record of one: they read alike (the report shows either)."""

_KEY = attrgetter("key")


def clock_of(fact: AnyFact) -> int:
    """A fact's promotion clock; a `Fact`'s read from the values it keeps, without building
    its promotion record (`Fact.promotion` builds one on each read)."""
    if type(fact) is Fact:
        clock = fact.__dict__["promotion"][3]
        if type(clock) is int:
            return clock
    return fact.promotion.clock


def key_spans(facts: Sequence[AnyFact]) -> list[tuple[AnyKey, int, int]]:
    """Each run of consecutive facts under one key: the key, the index of its first fact and
    the index past its last, in the facts' order. Facts in key order (a record's, unless it
    was altered) have one run per key. It reads each fact's key, nothing else of it.
    """
    spans: list[tuple[AnyKey, int, int]] = []
    start = 0
    for key, run in groupby(map(_KEY, facts)):
        end = start + len(list(run))
        spans.append((key, start, end))
        start = end
    return spans


def fact_records(
    snapshot: ContextSnapshot, since: Mapping[AnyKey, int] | None = None
) -> tuple[tuple[FactRecord, ...], str | None]:
    """The records of `snapshot`'s facts (only those past `since[key]` under each key, when
    given), each with the leaf digest the context kept at its promotion, and what changed
    below the API since, if anything (`_integrity.changed`'s words; `None`: nothing).

    Each fact is checked against its kept leaf. A changed fact is recorded as it reads now,
    made valid and storable, with the leaf kept for it, so the record says the change: its
    fields never match its digest.
    """
    records: list[FactRecord] = []
    problem: str | None = None
    for key, store, fact, leaf in snapshot._kept(since):  # pyright: ignore[reportPrivateUsage]
        own = fact.__dict__
        if unchanged(fact, leaf):
            records.append(_record(own, leaf))
            continue
        ident = store.ident(fact)
        records.append(_changed_record(key, ident, own, leaf))
        if problem is None:
            problem = changed_since(key, ident)
    return tuple(records), problem


def fact_texts(
    snapshot: ContextSnapshot,
    since: Mapping[AnyKey, int] | None = None,
    promoted: Texts | None = None,
    witnesses: Witnesses | None = None,
) -> list[str] | None:
    """The JSON of the records of `snapshot`'s facts (`record_json`), as `fact_records`
    gives them, each checked against its kept leaf; `None` when one was changed below the
    API (`fact_records` then records what it reads now).

    A fact whose seal's text `promoted` keeps (by key and id), with the very leaf the
    context kept for it, is written from that text (`promoted_json`): what was promoted,
    never read from the fact again, in a third of the time. Its witness, if it has one, goes
    into `witnesses` at the fact's place under its key (`None` for a fact written otherwise).
    """
    texts: list[str] = []
    filed: list[Witness | None] = []
    last: AnyKey | None = None
    for key, _, fact, leaf in snapshot._kept(since):  # pyright: ignore[reportPrivateUsage]
        text = witness = None
        if promoted:
            ident = fact.__dict__.get("id")
            kept = promoted.get((key, ident)) if type(ident) is str else None
            if kept is not None and (text := promoted_json(kept, leaf)) is not None:
                witness = kept[2]
        if text is None:
            text = record_json(fact, leaf)
            if text is None:
                return None
        texts.append(text)
        if witnesses is not None:
            if key is not last:
                _file(witnesses, last, since, filed)
                filed, last = [], key
            filed.append(witness)
    if witnesses is not None:
        _file(witnesses, last, since, filed)
    return texts


def _file(
    witnesses: Witnesses,
    key: AnyKey | None,
    since: Mapping[AnyKey, int] | None,
    filed: list[Witness | None],
) -> None:
    """File the witnesses of `key`'s facts past `since[key]`, which `fact_texts` wrote."""
    if key is not None and filed:
        witnesses.put(key, 0 if since is None else since.get(key, 0), filed)


class _RecordFields(Fields):
    """A `FactRecord`'s fields as `_record` sets them (`_model.Fields`)."""

    key: object
    id: object
    content: object
    payload: object
    confidence: object
    provenance: object
    target: object
    evidence: object
    promotion: object
    digest: object


_new_fields = object.__new__
_build_record = trusted_builder(FactRecord)


def _record(own: Mapping[str, object], leaf: bytes) -> FactRecord:
    fields = _new_fields(_RecordFields)
    fields.key = own["key"]
    fields.id = own["id"]
    fields.content = own["content"]
    fields.payload = own["payload"]
    fields.confidence = own["confidence"]
    fields.provenance = own["provenance"]
    fields.target = own["target"]
    fields.evidence = own["evidence"]
    fields.promotion = record_of(cast("PromotionValues", own["promotion"]))
    fields.digest = leaf.hex()
    return _build_record(fields.values())


def _text(value: object) -> str:
    return storable(value) if isinstance(value, str) else storable(repr(value))


def _changed_record(key: AnyKey, ident: str, own: Mapping[str, object], leaf: bytes) -> FactRecord:
    """The record of a fact changed below the API: its fields as they read now, each made
    valid (text made storable, a value that is not made text or dropped), under the key
    and id it was promoted with, with the leaf kept for it."""
    payload: object = own.get("payload")
    try:
        payload = freeze_json(payload, escape=True)
    except ValueError:
        payload = _text(payload)
    confidence = own.get("confidence")
    evidence = own.get("evidence")
    fields: dict[str, object] = {
        "key": key,
        "id": ident,
        "content": _text(own.get("content")),
        "payload": payload,
        "confidence": (
            confidence if type(confidence) is float and math.isfinite(confidence) else 0.0
        ),
        "provenance": _text(own.get("provenance")),
        "target": None,
        "evidence": (
            tuple(_text(ref) for ref in cast("Sequence[object]", evidence))
            if isinstance(evidence, tuple | list)
            else ()
        ),
        "promotion": {
            "cycle": -1,
            "suggestor": "",
            "suggestor_id": -1,
            "clock": -1,
            "gate": "engine",
        },
        "digest": leaf.hex(),
    }
    try:
        fields["promotion"] = PromotionRecord.model_validate(
            record_of(cast("PromotionValues", own.get("promotion"))).__dict__
        )
    except (ValidationError, TypeError, ValueError):
        pass  # the placeholder: its record no longer reads
    target = own.get("target")
    if isinstance(target, str):
        fields["target"] = target
    try:
        return FactRecord.model_validate(fields, strict=False)
    except ValidationError:
        fields["target"] = None
        return FactRecord.model_validate(fields, strict=False)


ForkKind = Literal["fork", "replay"]
"""How a run was branched off: `"fork"` rebuilt the parent's context from its stored facts;
`"replay"` re-merged the parent's recorded effects up to the cycle (the root checked)."""


@final
class Lineage(FrozenModel, frozen=True):
    """Where a forked run branched off its parent, recorded in its trace and signed with it."""

    parent_run_id: str
    """The run it was forked from."""
    at_cycle: int = Field(ge=0)
    """The parent's cycle it was forked at: the context at the end of that cycle (0: the
    inputs only)."""
    parent_root: str
    """The Merkle root of the parent's context at the end of `at_cycle`."""
    parent_clock: int = Field(ge=0)
    """The parent's Lamport clock there: every fact kept from the parent has a clock at most
    this, every fact the fork promoted a later one."""
    parent_tokens: int = Field(default=0, ge=0)
    """The tokens the parent had spent by then (the fork's token budget counts them)."""
    retracted: tuple[FactRecord, ...] = ()
    """The parent's facts removed at the fork (with `cascade`, those whose evidence reached
    a removed one too), in key then insertion order."""
    kind: ForkKind = "fork"
    """How the fork's past was rebuilt."""

    @property
    def retracted_refs(self) -> tuple[str, ...]:
        """`"key/id"` of the retracted facts."""
        return tuple(f"{fact.key}/{fact.id}" for fact in self.retracted)


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
    lineage: Lineage | None = Field(default=None, exclude_if=lambda v: v is None)
    """Where a forked run branched off its parent (left out of JSON for any other run)."""
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
