"""`Fact` and `PromotionRecord`: promoted, authoritative claims.

Only the kernel creates facts. Every public route that could build or change one raises
`TypeError`: the constructor, `model_validate*`, `model_construct`, `model_copy`, pickling,
attribute assignment, validation through a `TypeAdapter(Fact)`, and a `Fact` field inside
another model. The kernel builds them with `seal`, called from two places only: the gate
(`_gate.Gate.promote`, a proposal crossing it) and the verified restore
(`_checkpoint.restore_fact`, a record coming back from JSON).
"""

from __future__ import annotations

import json.encoder
from typing import Any, ClassVar, Literal, NoReturn, Self, TypeVar, final

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from ._canonical import canonical_json, copy_json, leaf_digest
from ._key import ContextKey
from ._model import FrozenModel, trusted
from ._proposal import ProposedFact

__all__ = ["Fact", "GateKind", "PromotionRecord", "fact_digest", "seal"]

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

    key: ContextKey
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
    target: ContextKey | None
    """For a staged fact under `PROPOSALS`: the key it asks to be promoted into."""
    evidence: tuple[str, ...]
    """`"key/id"` references of the facts it was derived from."""
    promotion: PromotionRecord
    """How and when it was promoted."""
    digest: str
    """Hex leaf hash of its canonical JSON (see the integrity proof)."""

    def __init__(self, /, **_data: object) -> None:
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
        return f"{self.key.value}/{self.id}"

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


def _canonical(
    proposal: ProposedFact | Fact, payload: JsonValue | None, promotion: PromotionRecord
) -> bytes:
    """Canonical JSON of a fact, written out field by field in sorted-key order.

    Byte for byte what `json.dumps(fields, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)` gives for the fact's fields, without building the dict.
    """
    quote = _quote
    target = proposal.target
    approved_by = promotion.approved_by
    return "".join(
        (
            '{"confidence":',
            float.__repr__(float(proposal.confidence)),
            ',"content":',
            quote(proposal.content),
            ',"evidence":[',
            ",".join(map(quote, proposal.evidence)),
            '],"id":',
            quote(proposal.id),
            ',"key":',
            quote(proposal.key.value),
            ',"payload":',
            "null" if payload is None else canonical_json(payload).decode("utf-8"),
            ',"promotion":{"approved_by":',
            "null" if approved_by is None else quote(approved_by),
            ',"clock":',
            int.__repr__(promotion.clock),
            ',"cycle":',
            int.__repr__(promotion.cycle),
            ',"gate":',
            quote(promotion.gate),
            ',"suggestor":',
            quote(promotion.suggestor),
            ',"suggestor_id":',
            int.__repr__(promotion.suggestor_id),
            '},"provenance":',
            quote(proposal.provenance),
            ',"target":',
            "null" if target is None else quote(target.value),
            "}",
        )
    ).encode("utf-8")


def fact_digest(fact: Fact) -> str:
    """Recompute a fact's leaf digest from its fields (what `verify` does)."""
    return leaf_digest(_canonical(fact, fact.payload, fact.promotion)).hex()


def seal(proposal: ProposedFact, promotion: PromotionRecord) -> Fact:
    """Build the fact of a proposal with its promotion record. Gate and restore use only."""
    payload = None if proposal.payload is None else copy_json(proposal.payload)
    canonical = _canonical(proposal, payload, promotion)
    return trusted(
        Fact,
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
            "digest": leaf_digest(canonical).hex(),
        },
    )
