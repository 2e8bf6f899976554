"""`Fact` and `PromotionRecord`: promoted, authoritative claims.

Only the kernel creates facts. Every public route that could build or change one raises
`TypeError`: the constructor, `model_validate*`, `model_construct`, `model_copy`, pickling,
attribute assignment, validation through a `TypeAdapter(Fact)`, a `Fact` field inside another
model, subclassing; and pydantic's base-class routes, which all go through `Fact.__new__` or
the fact's `__dict__`: `BaseModel.model_construct`, `BaseModel.__copy__`/`__deepcopy__`,
`BaseModel.model_copy(update=...)`, and the `__dict__`'s own mutators. The kernel builds facts
with `seal` (`object.__new__`, never `Fact.__new__`), called from two places only: the gate
(`_gate.Gate.promote`, a proposal crossing it) and the verified restore
(`_checkpoint.restore_fact`, a record coming back from JSON).

Code that reaches below the public API (`object.__setattr__`, `dict.__setitem__` on the
`__dict__`) can still change a fact object; the context keeps the leaf digest the seal computed,
so such a fact no longer verifies, restores nor resumes (`_context`, `_integrity`).
"""

from __future__ import annotations

import copy
import hashlib
import json.encoder
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Literal, NoReturn, Self, TypeVar, final

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from ._canonical import (
    FrozenDict,
    FrozenList,
    canonical_json,
    freeze_json,
    payload_json,
)
from ._key import KeyField
from ._model import FrozenModel, trusted
from ._proposal import ProposedFact

__all__ = ["Fact", "GateKind", "PromotionRecord", "fact_digest", "promotion_record", "seal"]

ModelT = TypeVar("ModelT", bound=BaseModel)
GateKind = Literal["engine", "human", "input"]
"""Which gate promoted a fact: the engine's, a human's, or the input gate."""

_SEALED_MESSAGE = (
    "Fact cannot be built or changed directly: only the engine promotes proposals into facts. "
    "Propose a ProposedFact instead; facts come back from JSON only through a checkpoint restore."
)


def _refuse(*_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError(_SEALED_MESSAGE)


@final
class PromotionRecord(FrozenModel, frozen=True):
    """How and when a fact crossed the promotion boundary."""

    cycle: int
    """The cycle that promoted it (0 for inputs)."""
    suggestor: str
    """The name of the suggestor that proposed it (`"input"` for inputs)."""
    suggestor_id: int
    """Its registration id (-1 for inputs)."""
    clock: int
    """Lamport time: one tick per promoted fact over the context's history."""
    gate: GateKind
    """Which gate let it through: the engine's, a human's, or the input gate."""
    approved_by: str | None = None
    """Who approved it, for facts a human let through."""


@final
class _Fields(dict[str, object]):
    """A fact's `__dict__`: its own mutators refuse, so pydantic's routes cannot rewrite it."""

    __slots__ = ()

    __init__ = _refuse
    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __copy__(self) -> dict[str, object]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, object] | None = None) -> dict[str, object]:
        return {name: copy.deepcopy(value, memo) for name, value in self.items()}

    def __reduce__(self) -> NoReturn:
        _refuse()


_new = object.__new__
_new_fields = dict.__new__
_fill_fields: Final = dict[str, object].update
_FROZEN_PAYLOAD: Final = frozenset({FrozenDict, FrozenList, str, int, bool, float})
_building_fact = True


@final
class Fact(BaseModel, frozen=True):
    """A promoted proposal: read-only, with its provenance and promotion record.

    !!! note
        Only the engine creates facts. The constructor, `model_validate*`, `model_construct`,
        `model_copy`, pickling, attribute assignment, validation through a `TypeAdapter(Fact)`
        and a `Fact` field inside another model all raise `TypeError`.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    key: KeyField
    """The context key it lives in."""
    id: str
    """Unique within its key."""
    content: str
    """The human-readable claim."""
    payload: JsonValue | None
    """Structured data, a private copy of the proposal's."""
    confidence: float
    """The proposer's confidence, from 0 to 1."""
    provenance: str
    """Who claimed it."""
    target: KeyField | None
    """For a staged fact under `PROPOSALS`: the key it asks to be promoted into."""
    evidence: tuple[str, ...]
    """`"key/id"` references of the facts it was derived from."""
    promotion: PromotionRecord
    """How and when it was promoted."""
    digest: str
    """Hex leaf hash of its canonical JSON (see the integrity proof)."""

    def __new__(cls, *_args: object, **_kwargs: object) -> Self:
        """Refused: `model_construct` and pydantic's copies all build facts through here."""
        _refuse()

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        _refuse()

    def __init_subclass__(cls, **_kwargs: object) -> NoReturn:
        _refuse()

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[BaseModel], handler: GetCoreSchemaHandler, /
    ) -> CoreSchema:
        if _building_fact:
            return handler(source)
        _refuse()

    @classmethod
    def model_validate(cls, *_args: object, **_kwargs: object) -> Self:
        """Refused: facts are only created by the engine."""
        _refuse()

    @classmethod
    def model_validate_json(cls, *_args: object, **_kwargs: object) -> Self:
        """Refused: facts come back from JSON only through a checkpoint restore."""
        _refuse()

    @classmethod
    def model_validate_strings(cls, *_args: object, **_kwargs: object) -> Self:
        """Refused: facts are only created by the engine."""
        _refuse()

    @classmethod
    def model_construct(cls, *_args: object, **_kwargs: object) -> Self:
        """Refused: facts are only created by the engine."""
        _refuse()

    def model_copy(self, *_args: object, **_kwargs: object) -> Self:
        """Refused: a fact never changes; propose a new one instead."""
        _refuse()

    def __setattr__(self, name: str, value: object) -> NoReturn:
        _refuse()

    def __delattr__(self, name: str) -> NoReturn:
        _refuse()

    def __setstate__(self, state: dict[Any, Any]) -> NoReturn:
        _refuse()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        _refuse()

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, object] | None = None) -> Self:
        return self

    def __hash__(self) -> int:
        return hash((self.key, self.id, self.digest))

    def __repr__(self) -> str:
        return (
            f"Fact({self.ref!r}, content={_short(self.content)!r}, provenance={self.provenance!r})"
        )

    def __str__(self) -> str:
        return self.__repr__()

    @property
    def ref(self) -> str:
        """The `"key/id"` reference other facts use as evidence."""
        return f"{self.key}/{self.id}"

    def payload_as(self, model: type[ModelT], /) -> ModelT:
        """Validate the payload into a pydantic model.

        Raises:
            pydantic.ValidationError: The payload does not fit `model`.
        """
        return model.model_validate(self.payload)


_building_fact = False


class _SealedValidator:
    """Stands in for `Fact.__pydantic_validator__`, so pydantic's own routes are closed too."""

    def __getattr__(self, name: str) -> NoReturn:
        _refuse()


type.__setattr__(Fact, "__pydantic_validator__", _SealedValidator())


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_quote = json.encoder.encode_basestring  # the C encoder json.dumps(ensure_ascii=False) uses
_sha256 = hashlib.sha256


_RECORD: Final = (
    '\x00{"confidence":%r,"content":%s,"evidence":[%s],"id":%s,"key":%s,"payload":%s,'
    '"promotion":{"approved_by":%s,"clock":%d,"cycle":%d,"gate":%s,"suggestor":%s,'
    '"suggestor_id":%d},"provenance":%s,"target":%s}'
)
"""A fact's canonical JSON (sorted keys, no spaces, UTF-8 as is) after the leaf prefix 0x00."""


def _leaf(fields: Mapping[str, Any], payload: str | None, promotion: Mapping[str, Any]) -> str:
    """The hex leaf digest of a fact: SHA-256 of 0x00 and its canonical JSON.

    `fields` are the fact's own fields (a proposal's, or a fact's), `promotion` its
    record's, each of its declared type exactly (the confidence a `float`, the numbers
    `int`s). The canonical JSON is written out in one formatting step, byte for byte what
    `json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` gives
    for the fact's fields, without building the dict. `payload` is the payload's canonical
    JSON text (`None` for no payload).
    """
    quote = _quote
    target = fields["target"]
    approved_by = promotion["approved_by"]
    record = _RECORD % (
        fields["confidence"],
        quote(fields["content"]),
        ",".join(map(quote, fields["evidence"])),
        quote(fields["id"]),
        quote(fields["key"]),
        "null" if payload is None else payload,
        "null" if approved_by is None else quote(approved_by),
        promotion["clock"],
        promotion["cycle"],
        quote(promotion["gate"]),
        quote(promotion["suggestor"]),
        promotion["suggestor_id"],
        quote(fields["provenance"]),
        "null" if target is None else quote(target),
    )
    return _sha256(record.encode("utf-8")).hexdigest()


def fact_digest(fact: Fact) -> str:
    """Recompute a fact's leaf digest from its fields, nothing cached (what `verify` does).

    Raises:
        TypeError: A field is not of its declared type (the fact was changed below the API).
        ValueError: A text field cannot be encoded (the same).
    """
    promotion = fact.promotion
    numbers = (promotion.clock, promotion.cycle, promotion.suggestor_id)
    if type(fact.confidence) is not float or any(type(number) is not int for number in numbers):
        raise TypeError(f"fact {fact.ref} holds a field of another type than declared")
    payload = fact.payload
    text = None if payload is None else canonical_json(payload).decode("utf-8")
    fields = {name: getattr(fact, name) for name in _LEAF_FIELDS}
    record = {name: getattr(promotion, name) for name in _LEAF_RECORD_FIELDS}
    return _leaf(fields, text, record)


_LEAF_FIELDS: Final = ("confidence", "content", "evidence", "id", "key", "target", "provenance")
_LEAF_RECORD_FIELDS: Final = ("approved_by", "clock", "cycle", "gate", "suggestor", "suggestor_id")


def seal(proposal: ProposedFact, promotion: PromotionRecord) -> Fact:
    """Build the fact of a proposal with its promotion record. Gate and restore use only.

    The fact shares the proposal's frozen payload; `fact.digest` is the leaf the context keeps.

    Raises:
        ValueError: A field cannot be hashed (a proposal that skipped validation).
    """
    payload = proposal.payload
    if payload is not None and type(payload) not in _FROZEN_PAYLOAD:
        payload = freeze_json(payload)
    text = None if payload is None else payload_json(payload)
    digest = _leaf(proposal.__dict__, text, promotion.__dict__)
    fields = _new_fields(_Fields)
    _fill_fields(
        fields,
        {
            "key": proposal.key,
            "id": proposal.id,
            "content": proposal.content,
            "payload": payload,
            "confidence": proposal.confidence,
            "provenance": proposal.provenance,
            "target": proposal.target,
            "evidence": proposal.evidence,
            "promotion": promotion,
            "digest": digest,
        },
    )
    return trusted(Fact, fields)


@final
class _RecordFields:
    """Builds a `PromotionRecord`'s `__dict__`: an instance dict of a plain class shares its
    key table with every other one (a split table), about 130 bytes less per fact than a dict
    of its own. Only `promotion_record` uses it, always setting the fields in one order."""

    cycle: int
    suggestor: str
    suggestor_id: int
    clock: int
    gate: GateKind
    approved_by: str | None


def promotion_record(
    cycle: int,
    suggestor: str,
    suggestor_id: int,
    clock: int,
    gate: GateKind,
    approved_by: str | None,
) -> PromotionRecord:
    """A `PromotionRecord` of values the gate itself produced, built without re-validation."""
    holder = _new(_RecordFields)
    holder.cycle = cycle
    holder.suggestor = suggestor
    holder.suggestor_id = suggestor_id
    holder.clock = clock
    holder.gate = gate
    holder.approved_by = approved_by
    return trusted(PromotionRecord, holder.__dict__)
