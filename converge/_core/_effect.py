"""`AgentEffect`: the whole output of one `execute`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Self, cast, final

from pydantic import Field, JsonValue, field_validator

from ._canonical import freeze_json, payload_json
from ._key import AnyKey, in_key_order
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._text import storable, utf8_size

__all__ = ["MAX_METADATA_BYTES", "MAX_TOKENS", "AgentEffect", "Refusal", "metadata_problem"]

MAX_TOKENS: Final = 2**63 - 1
"""The most tokens one effect (or one failed call) may report."""
MAX_METADATA_BYTES: Final = 1024 * 1024
"""The largest metadata one call may leave in the trace, in bytes of its canonical JSON."""


def metadata_problem(metadata: JsonValue) -> str | None:
    """Why frozen `metadata` is too large for the trace, or `None`."""
    text = payload_json(metadata)
    if len(text) * 4 > MAX_METADATA_BYTES:
        size = utf8_size(text)
        if size > MAX_METADATA_BYTES:
            return (
                f"metadata is {size} bytes of canonical JSON, over the limit of "
                f"{MAX_METADATA_BYTES}"
            )
    return None


@final
class Refusal(FrozenModel, frozen=True):
    """Something a suggestor was given to propose (a model's reply item, say) that it refuses
    itself, and why. The engine records it as a `Rejection` of the suggestor's cycle."""

    proposal: ProposedFact
    """The item as a proposal, as far as it could be read (a stand-in naming it otherwise)."""
    reason: str = Field(min_length=1)
    """Why the suggestor refused it. Text that cannot be stored (a lone surrogate, NUL) is
    escaped and said so, and a reason is cut past 65,536 characters (see the integrity
    docs)."""

    @field_validator("reason", mode="before")
    @classmethod
    def _reason_is_storable(cls, value: object) -> object:
        return storable(value) if isinstance(value, str) else value


@final
class AgentEffect(FrozenModel, frozen=True):
    """The proposals of one execution, plus the model tokens it spent.

    It holds `ProposedFact`s only: a `Fact` (or anything else) is a `ValidationError`.
    `model_construct` and `model_copy(update=...)` validate too. (The gate checks each
    proposal again whatever way it came: see `PromotionPolicy`.)
    """

    proposals: tuple[ProposedFact, ...] = Field(default=(), strict=False)
    """The proposals, in the order they should be merged."""
    tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Model tokens spent producing them, counted against `Budget.max_tokens` (at most
    2**63 - 1)."""
    tokens_unknown: bool = Field(default=False, exclude_if=lambda v: not v)
    """True when `tokens` counts only part of what was spent (a model that did not report
    its usage): the engine marks the call's `Execution` `tokens_unknown`. Left out of JSON
    when false."""
    refused: tuple[Refusal, ...] = Field(default=(), strict=False, exclude_if=lambda v: not v)
    """Items the suggestor refused itself, each recorded as a rejection with its reason
    (left out of JSON when none)."""
    metadata: JsonValue = Field(default=None, exclude_if=lambda v: not v)
    """What the suggestor wants in the trace about this call (a JSON object: the model, its
    options, per-call usage...). The engine copies it to the call's `Execution.metadata`;
    it is not part of any fact. Text and keys that cannot be stored (a lone surrogate, NUL)
    are escaped and said so; at most 1 MiB of canonical JSON. Left out of JSON when empty."""

    @field_validator("metadata", mode="plain", json_schema_input_type=JsonValue)
    @classmethod
    def _metadata_is_frozen_json_object(cls, value: object) -> JsonValue:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ValueError(f"metadata must be a JSON object, got {type(value).__name__}")
        frozen = freeze_json(cast("Mapping[str, object]", value), "metadata", escape=True)
        problem = metadata_problem(frozen)
        if problem is not None:
            raise ValueError(problem)
        return frozen

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: object) -> Self:
        """Validates `values`, like the constructor: an effect is never left unchecked."""
        return cls.model_validate(values)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` applied and validated (an effect is immutable: no copy is needed
        without one)."""
        if not update:
            return self
        return self.model_validate({**self.__dict__, **update})

    @classmethod
    def empty(cls) -> AgentEffect:
        """An effect with nothing in it."""
        return _EMPTY

    @classmethod
    def with_proposal(cls, proposal: ProposedFact, /, *, tokens: int = 0) -> AgentEffect:
        """An effect holding one proposal."""
        return cls(proposals=(proposal,), tokens=tokens)

    @classmethod
    def with_proposals(
        cls, proposals: Iterable[ProposedFact], /, *, tokens: int = 0
    ) -> AgentEffect:
        """An effect holding `proposals`, in order."""
        return cls(proposals=tuple(proposals), tokens=tokens)

    @property
    def is_empty(self) -> bool:
        """Whether it holds no proposals."""
        return not self.proposals

    @property
    def affected_keys(self) -> tuple[AnyKey, ...]:
        """The keys its proposals name, in key order, without duplicates."""
        return in_key_order({p.key for p in self.proposals})


_EMPTY = AgentEffect()
