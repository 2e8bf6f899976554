"""`Fact` and `PromotionRecord`: promoted, authoritative claims.

Only the kernel creates facts. Every public route that could build or change one raises
`TypeError`: the constructor, `model_validate*`, `model_construct`, `model_copy`, pickling,
attribute assignment, validation through a `TypeAdapter(Fact)`, a `Fact` field inside another
model, subclassing; and pydantic's base-class routes, which all go through `Fact.__new__` or
the fact's `__dict__`: `BaseModel.model_construct`, `BaseModel.__copy__`/`__deepcopy__`,
`BaseModel.model_copy(update=...)`, and the `__dict__`'s own mutators. The kernel builds facts
in `_seal` (`object.__new__`, never `Fact.__new__`), from two places only: the gate
(`_gate.Gate.promote`, a proposal crossing it) and the verified restore
(`_checkpoint.restore_fact`, a record coming back from JSON).

Code that reaches below the public API (`object.__setattr__`, `dict.__setitem__` on the
`__dict__` or on the frozen payload) can still change a fact object. The context keeps the leaf
digest the seal computed from the fact's canonical bytes (`_context`); the engine checks every
fact against it whenever it writes facts out, and when a run that is saved or signed ends
(`_integrity.changed`, `_checkpoint.fact_records`), so such a run ends `INVARIANT_VIOLATED`
naming the fact, its records are never signed, and it no longer verifies, restores nor
resumes. Code that rewrites the context's kept leaves as well is past what one process can
catch by itself: the integrity docs, "In-process code".
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from typing import Any, ClassVar, Final, Literal, NoReturn, Self, TypeVar, cast, final

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, JsonValue, field_serializer
from pydantic_core import CoreSchema

from ._key import KeyField
from ._model import Fields, FrozenModel, share_state, trusted_builder

__all__ = [
    "Fact",
    "FactFields",
    "GateKind",
    "PromotionRecord",
    "PromotionValues",
    "hex_digest",
    "values_of",
]

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


PromotionValues = tuple[int, str, int, int, GateKind, str | None]
"""A promotion record's fields in the model's order, as a fact keeps them: one tuple of six
atoms in place of a `PromotionRecord` and its `__dict__`. It is one object where the record
is two, about 130 bytes smaller, and the collector stops tracking it at its first young
collection (a tuple of atoms holds no cycle), so every later collection walks one object
less per fact."""

_RECORD_FIELDS: Final = ("cycle", "suggestor", "suggestor_id", "clock", "gate", "approved_by")
if _RECORD_FIELDS != tuple(PromotionRecord.model_fields):  # pragma: no cover - a model edit
    raise RuntimeError("PromotionValues no longer follows PromotionRecord's fields")
_build_record: Final = trusted_builder(PromotionRecord)


class _RecordFields(Fields):
    """A `PromotionRecord`'s fields as `record_of` sets them (`_model.Fields`)."""

    cycle: object
    suggestor: object
    suggestor_id: object
    clock: object
    gate: object
    approved_by: object


_new_fields: Final = object.__new__
_BROKEN: Final[PromotionValues] = (-1, "", -1, -1, "engine", None)
"""The values around a broken record's cycle (`record_of`)."""


def hex_digest(digest: bytes) -> str:
    """A kept leaf digest as the fact's `digest` reads it: 64 hex digits. A fact keeps 32
    bytes (65 bytes of memory against 113 for the text, and the Merkle root hashes them as
    they are); anything else, which only a change below the API puts there, is given back
    unchanged, so a changed fact still reads and dumps, and fails `verify`."""
    return digest.hex() if type(digest) is bytes else cast("str", digest)


def values_of(record: PromotionRecord) -> PromotionValues:
    """The values a fact keeps of `record` (the inverse of `record_of`)."""
    fields = record.__dict__
    return cast("PromotionValues", tuple(fields[name] for name in _RECORD_FIELDS))


def record_of(values: PromotionValues) -> PromotionRecord:
    """The `PromotionRecord` of a fact's kept promotion values (what `fact.promotion` reads).

    Values that are not six, which only a change below the API puts there, come back as the
    record's cycle, unvalidated: the fact still reads, dumps and pauses, and it fails `verify`
    and every restore (its record no longer validates, nor matches its digest).
    """
    try:
        cycle, suggestor, suggestor_id, clock, gate, approved_by = values
    except (TypeError, ValueError):
        cycle, suggestor, suggestor_id, clock, gate, approved_by = _BROKEN
        cycle = values
    fields = _new_fields(_RecordFields)
    fields.cycle = cycle
    fields.suggestor = suggestor
    fields.suggestor_id = suggestor_id
    fields.clock = clock
    fields.gate = gate
    fields.approved_by = approved_by
    return _build_record(fields.values())


@final
class FactFields(dict[str, object]):
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
    """How and when it was promoted: a record built on each read from the values the fact
    keeps (equal every time, not the same object)."""
    digest: str
    """Hex leaf hash of its canonical JSON (see the integrity proof); the fact keeps its 32
    bytes and writes them out in hex when read."""

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

    @field_serializer("promotion")
    def _dump_promotion(self, values: PromotionValues) -> PromotionRecord:
        return record_of(values)

    @field_serializer("digest")
    def _dump_digest(self, digest: bytes) -> str:
        return hex_digest(digest)

    def __iter__(self) -> Generator[tuple[str, object], None, None]:
        """`(name, value)` of every field, as the attributes read (`dict(fact)`)."""
        for name, value in self.__dict__.items():
            if name == "promotion":
                value = record_of(value)
            elif name == "digest":
                value = hex_digest(value)
            yield name, value

    def __repr_args__(self) -> Generator[tuple[str | None, object], None, None]:
        yield from self

    def __hash__(self) -> int:
        return hash((self.key, self.id, self.__dict__["digest"]))

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
share_state(Fact)  # a fact is its `__dict__` alone: the seal writes no other slot


def _promotion(fact: Fact) -> PromotionRecord:
    return record_of(fact.__dict__["promotion"])


def _digest(fact: Fact) -> str:
    return hex_digest(fact.__dict__["digest"])


# The fact keeps its record as `PromotionValues` and its digest as 32 bytes, under the fields'
# names; the attributes (data descriptors, found before the instance's `__dict__`) give the
# record and the hex text when read.
type.__setattr__(Fact, "promotion", property(_promotion, doc="How and when it was promoted."))
type.__setattr__(Fact, "digest", property(_digest, doc="Hex leaf hash of its canonical JSON."))


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
