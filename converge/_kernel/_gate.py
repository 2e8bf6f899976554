"""The promotion gate: the checks every proposal passes, and the one place it becomes a fact.

`PromotionPolicy` holds the gate's limits and checks. A `Gate` applies them for one merge
(one cycle, one gate kind: the engine's, the input gate or a human's) and promotes what
passes, stamping each fact with its `PromotionRecord`. It decides each proposal as
`_admit` admits it: as validation left it, or validated again.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, Final, NamedTuple, Protocol, final

from pydantic import BaseModel, Field, JsonValue, ValidationError

from .._core._canonical import payload_json
from .._core._fact import Fact, GateKind
from .._core._hitl import HitlPolicy
from .._core._key import AnyKey, ContextKey, Key
from .._core._model import FrozenModel
from .._core._proposal import ProposedFact
from .._core._seal import Stamp
from .._core._text import utf8_size
from ._admit import admit, check_hashable, intact, stand_in, unhashable, validated_copy

__all__ = [
    "RESERVED_PREFIX",
    "RESTATED",
    "Clash",
    "Gate",
    "Hold",
    "PromotionPolicy",
    "Reject",
    "Restated",
    "Stamps",
    "Verdict",
    "field_reason",
    "identical",
    "model_reason",
]

_INVISIBLE: Final = (
    "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff"  # zero-width characters, word joiner, BOM
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # bidirectional controls
)

_BAD_ID_CHARACTER: Final = re.compile(f"[\\s\\x00-\\x1f\\x7f-\\x9f{_INVISIBLE}]")
RESERVED_PREFIX: Final = "hitl-rejected:"
"""Ids under `DIAGNOSTIC` with this prefix are the notes human rejections leave."""
# The members the gate compares with every proposal, bound once: on Python 3.11 reading
# `ContextKey.PROPOSALS` goes through the enum metaclass's `__getattr__` hook (about 0.1 µs
# each time), where a module constant is one specialised global load.
_PROPOSALS: Final = ContextKey.PROPOSALS
_DIAGNOSTIC: Final = ContextKey.DIAGNOSTIC


@final
class PromotionPolicy(FrozenModel, frozen=True):
    """Limits of the engine gate. The gate itself is always on.

    The gate rejects, in this order: a proposal that does not validate; blank content; blank
    provenance or provenance over `max_provenance_length`; an id that is empty, too long,
    holds whitespace, control, invisible or bidirectional control characters, or is reserved
    for the engine's notes; content over `max_content_bytes`; a payload over
    `max_payload_bytes`; a key the suggestor may not write; a `PROPOSALS` proposal without a
    `target` or targeting `PROPOSALS`, and a `target` on any other key; a `(key, id)` a human
    rejected in this run.
    """

    max_content_bytes: int = Field(default=1024 * 1024, ge=1)
    """Largest content, in UTF-8 bytes (default 1 MiB)."""
    max_id_length: int = Field(default=256, ge=1)
    """Longest id, in characters."""
    max_provenance_length: int = Field(default=256, ge=1)
    """Longest provenance, in characters."""
    max_payload_bytes: int = Field(default=1024 * 1024, ge=1)
    """Largest payload, in bytes of its canonical JSON (default 1 MiB)."""

    def check(
        self,
        proposal: ProposedFact,
        writes: Collection[AnyKey] | None,
        refused: Collection[tuple[AnyKey, str]] = (),
        *,
        gate: GateKind = "engine",
    ) -> str | None:
        """The reason the `gate` refuses `proposal`, or `None` when it passes."""
        admitted = admit(proposal)
        if isinstance(admitted, str):
            return admitted
        return Gate(self, kind=gate, refused=frozenset(refused)).check(admitted, writes)


def model_reason(key: Key[BaseModel], payload: JsonValue | None) -> str | None:
    """Why `payload` does not validate as `key`'s model (pydantic's words), or `None`.

    Strict JSON validation: the payload must already be the model's JSON (`"42"` is not an
    `int`; an ISO 8601 string is a `datetime`), so the stored payload reads back unchanged.
    """
    try:
        key.payload.model_validate_json(payload_json(payload), strict=True)
    except ValidationError as error:
        said = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or 'payload'}: {detail['msg']}"
            for detail in error.errors(include_url=False)
        )
        return f"payload does not fit {key.payload.__qualname__}, the model of key {key}: {said}"
    return None


def field_reason(policy: PromotionPolicy, proposal: ProposedFact, gate: GateKind) -> str | None:
    """The checks of one proposal's own fields, in order: content, provenance, id, sizes."""
    content = proposal.content
    provenance = proposal.provenance
    if not content.strip():
        return "content is blank"
    if not provenance.strip():
        return "provenance is blank"
    if len(provenance) > policy.max_provenance_length:
        return (
            f"provenance is {len(provenance)} characters long, "
            f"over the limit of {policy.max_provenance_length}"
        )
    reason = _id_reason(policy, proposal.key, proposal.id, gate)
    if reason is not None:
        return reason
    if len(content) * 4 > policy.max_content_bytes:
        size = utf8_size(content)
        if size > policy.max_content_bytes:
            return f"content is {size} bytes, over the limit of {policy.max_content_bytes}"
    payload = proposal.payload
    if payload is not None:
        text = payload_json(payload)
        if len(text) * 4 > policy.max_payload_bytes:
            size = utf8_size(text)
            if size > policy.max_payload_bytes:
                return (
                    f"payload is {size} bytes of canonical JSON, "
                    f"over the limit of {policy.max_payload_bytes}"
                )
    return None


def _id_reason(policy: PromotionPolicy, key: AnyKey, ident: str, gate: GateKind) -> str | None:
    if not ident:
        return "id is empty"
    if len(ident) > policy.max_id_length:
        return f"id is {len(ident)} characters long, over the limit of {policy.max_id_length}"
    bad = _BAD_ID_CHARACTER.search(ident)
    if bad is not None:
        character = bad.group()
        if character in _INVISIBLE:
            return (
                f"id {ident!r} contains an invisible or bidirectional control character "
                f"(U+{ord(character):04X})"
            )
        return f"id {ident!r} contains whitespace or control characters"
    if key is _DIAGNOSTIC and gate != "human" and ident.startswith(RESERVED_PREFIX):
        return (
            f"{key}/{ident} is reserved: only the human gate writes {key}/{RESERVED_PREFIX}* notes"
        )
    return None


def identical(fact: Fact, proposal: ProposedFact) -> bool:
    """Whether `proposal` restates `fact`: same key, id, content and canonical payload."""
    if fact.content != proposal.content:
        return False
    mine, theirs = fact.payload, proposal.payload
    if mine is None or theirs is None:
        return mine is None and theirs is None
    return mine is theirs or payload_json(mine) == payload_json(theirs)


class Reject(NamedTuple):
    """The gate refuses a proposal: what the rejection records of it (the admitted proposal,
    or its `stand_in` when it does not validate or cannot be hashed) and why."""

    proposal: ProposedFact
    reason: str


class Hold(NamedTuple):
    """The HITL policy holds an admitted proposal for a human, by `rule`."""

    proposal: ProposedFact
    rule: str


class Clash(NamedTuple):
    """An admitted proposal claims a slot that holds a different fact: a conflict, which
    the merge's conflict mode makes a stop or a rejection."""

    proposal: ProposedFact
    existing: Fact


@final
class Restated:
    """The proposal restates the fact its slot holds: nothing to do (`RESTATED`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RESTATED"


RESTATED: Final = Restated()
"""The one `Restated` verdict."""

Verdict = ProposedFact | Reject | Hold | Clash | Restated
"""The gate's one decision on a proposal (`Gate.decide`), which the merge applies as it is:
promote the admitted `ProposedFact` (the proposal itself, or its validated copy: admitting
allocates nothing, which W1 and W4 do for nearly every proposal), `Reject` it, `Hold` it for
a human, a `Clash` with the fact in its slot, or nothing (`RESTATED`)."""


class _Finds(Protocol):
    """Where the facts merged before this cycle are found (a `ContextSnapshot`)."""

    def find(self, key: AnyKey, id: str, /) -> Fact | None:
        """The fact in slot `(key, id)`, or `None`."""
        ...


Stamps = dict[tuple[GateKind, str, int], Stamp]
"""Promotion stamps without an approver, by gate, suggestor name and id: kept while an
engine's registrations stay the same (`RegistryView.stamps`), so a suggestor's facts share
their promotion record's text from run to run."""


@final
class Gate:
    """The gate of one merge: checks proposals against the policy and promotes them."""

    __slots__ = ("_kind", "_limits", "_policy", "_stamps", "refused")

    def __init__(
        self,
        policy: PromotionPolicy,
        *,
        kind: GateKind,
        refused: frozenset[tuple[AnyKey, str]] = frozenset(),
        stamps: Stamps | None = None,
    ) -> None:
        self._policy = policy
        # the limits every proposal is checked against, read once: a model's attributes
        # are slower to load than a tuple's items
        self._limits = (
            policy.max_provenance_length,
            policy.max_id_length,
            policy.max_content_bytes,
        )
        self._kind: GateKind = kind
        self.refused = refused
        """The slots a human rejected in this run: proposals for them are refused. Read,
        never changed: an engine keeps its gate while its run's set stays the same."""
        self._stamps: Stamps = {} if stamps is None else stamps

    def check(self, proposal: ProposedFact, writes: Collection[AnyKey] | None) -> str | None:
        """Why the gate refuses an admitted `proposal` from a suggestor allowed `writes`: the
        first check it fails, in the documented order, or `None`."""
        return self._check(proposal, proposal.__dict__, writes)

    def _check(
        self, proposal: ProposedFact, own: Mapping[str, Any], writes: Collection[AnyKey] | None
    ) -> str | None:
        """`check`, with the proposal's fields (`own`, its `__dict__`) read by the caller: a
        model's `__dict__` costs as much to load as any of its attributes (hot-path rules)."""
        max_provenance, max_id, max_content = self._limits
        key: AnyKey = own["key"]
        ident: str = own["id"]
        content: str = own["content"]
        provenance: str = own["provenance"]
        payload: JsonValue | None = own["payload"]
        if (  # one pass over what nearly every proposal passes; the details only when one fails
            not content.strip()
            or not provenance.strip()
            or len(provenance) > max_provenance
            or not ident
            or len(ident) > max_id
            or not (  # an ASCII id is printable and has no space, or has no bad character
                ident.isprintable() and " " not in ident
                if ident.isascii()
                else _BAD_ID_CHARACTER.search(ident) is None
            )
            or (key is _DIAGNOSTIC and ident.startswith(RESERVED_PREFIX))
            or len(content) * 4 > max_content
            or payload is not None
        ):
            reason = field_reason(self._policy, proposal, self._kind)
            if reason is not None:
                return reason
        if writes is not None and key not in writes:
            return f"not authorised to write {key}"
        target: AnyKey | None = own["target"]
        if key is _PROPOSALS:
            if target is None:
                return "a proposal under proposals needs a target"
            if target is _PROPOSALS:
                return "a staged proposal cannot target proposals"
        elif target is not None:
            return f"target is only allowed under proposals, not under {key}"
        typed = key if type(key) is Key else target if type(target) is Key else None
        if typed is not None:
            reason = model_reason(typed, payload)
            if reason is not None:
                return reason
        refused = self.refused
        if refused and (key, ident) in refused:
            return f"{key}/{ident} was rejected by a human in this run"
        return None

    def decide(
        self,
        proposal: object,
        writes: Collection[AnyKey] | None,
        merged: Mapping[tuple[AnyKey, str], Fact],
        base: _Finds,
        held: Collection[tuple[AnyKey, str]],
        hitl: HitlPolicy | None,
    ) -> Verdict:
        """The one decision on `proposal` from a suggestor allowed `writes`, in order: its
        admission (`admit`), the checks (`check`), the fact its slot already holds (in
        `merged` this cycle, else in `base`: restated or a clash), a slot `held` for a
        human, the `hitl` policy.

        Never raises: whatever goes wrong while deciding (a hostile predicate, a copy that
        cannot be hashed) is the proposal's rejection, with the error as its reason.
        """
        try:
            # the fields read once, for every check below
            if type(proposal) is ProposedFact and intact(own := proposal.__dict__):
                admitted = proposal
            else:
                validated = validated_copy(proposal)
                if isinstance(validated, str):
                    return Reject(stand_in(proposal), validated)
                admitted, own = validated, validated.__dict__
            reason = self._check(admitted, own, writes)
            if reason is not None:
                return Reject(admitted, reason)
            key: AnyKey = own["key"]
            ident: str = own["id"]
            # a slot's tuple only when something was merged this cycle (a lookup in the
            # merge's own code measured 0.4 µs a cycle less on W1 than a call per proposal)
            fact = merged.get((key, ident)) if merged else None
            if fact is None:
                fact = base.find(key, ident)
            if fact is not None:
                try:
                    return RESTATED if identical(fact, admitted) else Clash(admitted, fact)
                except ValueError as error:  # an unvalidated copy holding unhashable text
                    return Reject(stand_in(admitted), unhashable(error, admitted))
            if held and (key, ident) in held:
                return Reject(admitted, f"{admitted.ref} is already held for a human decision")
            if hitl is not None and (rule := hitl.held_by(admitted)) is not None:
                try:
                    check_hashable(admitted)
                except ValueError as error:  # model_copy/model_construct skip validation
                    return Reject(stand_in(admitted), unhashable(error, admitted))
                return Hold(admitted, rule)
            return admitted
        except Exception as error:
            reason = f"could not be decided ({type(error).__name__}: {error})"
            return Reject(stand_in(proposal), reason)

    @property
    def policy(self) -> PromotionPolicy:
        """The limits this gate checks proposals against."""
        return self._policy

    def stamp(self, suggestor: str, suggestor_id: int, approved_by: str | None = None) -> Stamp:
        """What promotes the proposals of `suggestor` that pass (`Stamp.promote`). One without
        an approver is kept in `stamps`; one with (a human's approval) is made each time, so
        the kept ones stay as many as the registrations."""
        if approved_by is not None:
            return Stamp(suggestor, suggestor_id, self._kind, approved_by)
        stamps = self._stamps
        key = (self._kind, suggestor, suggestor_id)
        stamp = stamps.get(key)
        if stamp is None:
            stamp = stamps[key] = Stamp(suggestor, suggestor_id, self._kind, None)
        return stamp
