"""`ProposedFact`: what suggestors emit."""

from __future__ import annotations

import math
from typing import final

from pydantic import Field, JsonValue, ValidationInfo, field_validator

from ._key import ContextKey
from ._model import FrozenModel

__all__ = ["ProposedFact", "check_json", "check_text"]


def check_text(text: str, path: str) -> None:
    """Raise `ValueError` if `text` cannot be UTF-8 (a lone surrogate), which hashing needs."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{path} holds a lone surrogate at position {error.start}; text must be valid UTF-8"
        ) from None


def check_json(value: JsonValue, path: str = "payload") -> None:
    """Raise `ValueError` naming the first NaN, infinity or lone surrogate in a JSON value."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path} holds a non-finite number ({value!r}); JSON has none")
    elif isinstance(value, str):
        check_text(value, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, f"{path} key {key!r}")
            check_json(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, f"{path}[{index}]")


@final
class ProposedFact(FrozenModel, frozen=True):
    """A claim a suggestor would like to become a fact; the engine decides whether it does.

    Anyone may build one. Two proposals are *identical* when key, id, content and the
    canonical JSON of the payload are equal.
    """

    key: ContextKey = Field(strict=False)
    """The context key it should land in."""
    id: str
    """Unique within its key; keys are separate namespaces."""
    content: str
    """The human-readable claim."""
    provenance: str
    """Who claims it: a suggestor name, `"gpt-4o:run-17"`, `"input:crm"`."""
    payload: JsonValue | None = None
    """Structured data; finite numbers only."""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0, allow_inf_nan=False)
    """How sure the proposer is, from 0 to 1."""
    target: ContextKey | None = Field(default=None, strict=False)
    """For a staged proposal (`key == PROPOSALS`): the key it asks to be promoted into."""
    evidence: tuple[str, ...] = Field(default=(), strict=False)
    """`"key/id"` references of the facts it was derived from."""

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: JsonValue | None) -> JsonValue | None:
        if value is not None:
            check_json(value)
        return value

    @field_validator("id", "content", "provenance")
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
        return f"{self.key.value}/{self.id}"
