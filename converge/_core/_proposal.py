"""`ProposedFact`: what suggestors emit."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, final

from pydantic import BaseModel, Field, JsonValue, ValidationInfo, field_validator

from ._canonical import check_text, freeze_json
from ._key import KeyField, KeyLike
from ._model import FrozenModel

__all__ = ["ProposedFact", "check_json", "check_text"]


def check_json(value: JsonValue, path: str = "payload") -> None:
    """Raise `ValueError` naming the first part of `value` that is not JSON (see `freeze_json`)."""
    freeze_json(value, path)


@final
class ProposedFact(FrozenModel, frozen=True):
    """A claim a suggestor would like to become a fact; the engine decides whether it does.

    Anyone may build one. Two proposals are *identical* when key, id, content and the
    canonical JSON of the payload are equal. Validation freezes the payload (its objects and
    arrays refuse every change) and writes the id in Unicode NFC.
    """

    key: KeyField
    """The context key it should land in (a `ContextKey`, a `Key`, or either's name)."""
    id: str
    """Unique within its key; keys are separate namespaces."""
    content: str
    """The human-readable claim."""
    provenance: str
    """Who claims it: a suggestor name, `"gpt-4o:run-17"`, `"input:crm"`."""
    payload: JsonValue | None = None
    """Structured data; finite numbers only. Frozen: objects and arrays refuse every change.
    A pydantic model instance is accepted and kept as its JSON (`model_dump(mode="json")`);
    under a typed `Key` the gate checks the payload validates as the key's model."""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0, allow_inf_nan=False)
    """How sure the proposer is, from 0 to 1."""
    target: KeyField | None = None
    """For a staged proposal (`key == PROPOSALS`): the key it asks to be promoted into."""
    evidence: tuple[str, ...] = Field(default=(), strict=False)
    """`"key/id"` references of the facts it was derived from."""

    if TYPE_CHECKING:  # what the constructor accepts: key names, and a model as the payload

        def __init__(
            self,
            *,
            key: KeyLike,
            id: str,
            content: str,
            provenance: str,
            payload: JsonValue | BaseModel | None = None,
            confidence: float = 1.0,
            target: KeyLike | None = None,
            evidence: Sequence[str] = (),
        ) -> None: ...

    @field_validator("payload", mode="plain", json_schema_input_type=JsonValue | None)
    @classmethod
    def _payload_is_frozen_json(cls, value: object) -> JsonValue | None:
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        return None if value is None else freeze_json(value)

    @field_validator("id")
    @classmethod
    def _id_is_nfc(cls, value: str) -> str:
        if value.isascii():
            return value
        check_text(value, "id")
        return unicodedata.normalize("NFC", value)

    @field_validator("content", "provenance")
    @classmethod
    def _text_is_utf8(cls, value: str, info: ValidationInfo) -> str:
        check_text(value, str(info.field_name))
        return value

    @field_validator("evidence")
    @classmethod
    def _evidence_is_utf8(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, ref in enumerate(value):
            check_text(ref, f"evidence[{index}]")
        return value

    @property
    def ref(self) -> str:
        """The `"key/id"` reference this proposal would have as a fact."""
        return f"{self.key}/{self.id}"
