"""`ValidationAgent`: the separate suggestor that promotes staged proposals to their targets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final, final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from converge import AgentEffect, AnyKey, Context, ContextKey, Fact, ProposedFact, known_keys

__all__ = ["ValidationAgent", "ValidationConfig", "ValidationResult"]


@final
class ValidationConfig(BaseModel, frozen=True):
    """What a staged proposal must satisfy to be promoted. Checks run in field order."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    min_confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    """Lowest confidence accepted."""
    max_content_length: int = Field(default=10_000, ge=0)
    """Longest content accepted, in characters."""
    forbidden_terms: tuple[str, ...] = ()
    """Terms the content must not contain, matched case-insensitively."""
    require_provenance: bool = True
    """Whether a blank provenance is a rejection."""

    @field_validator("forbidden_terms")
    @classmethod
    def _terms_are_not_blank(cls, terms: tuple[str, ...]) -> tuple[str, ...]:
        for index, term in enumerate(terms):
            if not term.strip():
                raise ValueError(f"forbidden_terms[{index}] is blank; it would match everything")
        return terms


@final
class ValidationResult(BaseModel, frozen=True):
    """The verdict on one proposal."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    accepted: bool
    """Whether it passed every check."""
    reason: str | None = None
    """Why it was rejected (the first failing check), or `None`."""


def rejection_id(staged_id: str) -> str:
    """The id of the `DIAGNOSTIC` fact recording that `staged_id` was rejected."""
    return f"validation:rejected:{staged_id}"


@final
class ValidationAgent:
    """Promotes staged facts under `PROPOSALS` that pass `ValidationConfig` to their target key.

    Accepted proposals are re-proposed under their `target` with the same id, content,
    payload, confidence and provenance, and evidence extended by `"proposals/{id}"`. Rejected
    ones become `DIAGNOSTIC` facts `validation:rejected:{id}`. It decides from the context
    alone: a staged fact is unresolved while neither outcome exists.
    """

    __slots__ = ("_config", "_terms")

    def __init__(self, config: ValidationConfig | None = None) -> None:
        self._config = config or ValidationConfig()
        self._terms = tuple((term, term.casefold()) for term in self._config.forbidden_terms)

    def __repr__(self) -> str:
        return f"ValidationAgent({self._config!r})"

    @property
    def name(self) -> str:
        """Always `"ValidationAgent"`."""
        return "ValidationAgent"

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """`PROPOSALS`."""
        return (ContextKey.PROPOSALS,)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """Every key but `PROPOSALS`: the built-in ones and those declared (`Key(...)`) before
        the agent is registered (the engine reads `writes` then)."""
        return tuple([key for key in known_keys() if key is not ContextKey.PROPOSALS])

    @property
    def config(self) -> ValidationConfig:
        """The checks it applies."""
        return self._config

    def accepts(self, ctx: Context, /) -> bool:
        """True while some staged fact has neither been promoted nor rejected."""
        return any(True for _ in _unresolved(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Validate every unresolved staged fact: promote it or record why not."""
        proposals: list[ProposedFact] = []
        for staged in _unresolved(ctx):
            verdict = self.validate_proposal(staged)
            source = f"proposals/{staged.id}"
            if verdict.accepted:
                target = staged.target
                assert target is not None  # the gate guarantees a target under PROPOSALS
                proposals.append(
                    ProposedFact(
                        key=target,
                        id=staged.id,
                        content=staged.content,
                        payload=staged.payload,
                        confidence=staged.confidence,
                        provenance=staged.provenance,
                        evidence=(*staged.evidence, source),
                    )
                )
            else:
                proposals.append(
                    ProposedFact(
                        key=ContextKey.DIAGNOSTIC,
                        id=rejection_id(staged.id),
                        content=f"Proposal '{staged.id}' rejected: {verdict.reason}",
                        provenance=self.name,
                        evidence=(source,),
                    )
                )
        return AgentEffect.with_proposals(proposals)

    def validate_proposal(self, proposal: ProposedFact | Fact, /) -> ValidationResult:
        """Check one proposal (or staged fact); the first failing check gives the reason."""
        config = self._config
        if proposal.confidence < config.min_confidence:
            return _rejected(
                f"confidence {proposal.confidence} below threshold {config.min_confidence}"
            )
        length = len(proposal.content)
        if length > config.max_content_length:
            return _rejected(f"content length {length} exceeds max {config.max_content_length}")
        if not proposal.content.strip():
            return _rejected("content is empty")
        if config.require_provenance and not proposal.provenance.strip():
            return _rejected("provenance is required but empty")
        folded = proposal.content.casefold()
        for term, folded_term in self._terms:
            if folded_term in folded:
                return _rejected(f"content contains forbidden term '{term}'")
        return _ACCEPTED


_ACCEPTED: Final = ValidationResult(accepted=True)


def _rejected(reason: str) -> ValidationResult:
    return ValidationResult(accepted=False, reason=reason)


def _unresolved(ctx: Context) -> list[Fact]:
    pending: list[Fact] = []
    for staged in ctx.get(ContextKey.PROPOSALS):
        target = staged.target
        if target is None:
            continue
        if ctx.find(target, staged.id) is not None:
            continue
        if ctx.find(ContextKey.DIAGNOSTIC, rejection_id(staged.id)) is not None:
            continue
        pending.append(staged)
    return pending
