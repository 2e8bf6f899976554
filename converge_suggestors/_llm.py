"""`LlmSuggestor`: asks a chat model for proposals and stages them for validation."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import ClassVar, Final, final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from converge import AgentEffect, Context, ContextKey, Fact, ProposedFact

from ._chat import ChatMessage, ChatProvider, ChatRequest

__all__ = ["LlmOutputError", "LlmSuggestor"]

_FENCE: Final = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)

_FORMAT: Final = (
    "Answer with JSON only, in this shape:\n"
    '{"proposals": [{"id": "short-id-without-spaces", "content": "one claim", '
    '"confidence": 0.0-1.0, "payload": {optional structured data}}]}\n'
    'Return {"proposals": []} when there is nothing to propose.'
)


class LlmOutputError(ValueError):
    """A model's reply was not the JSON the suggestor asked for.

    `tokens` holds what the call cost, so the engine still counts it against the budget.
    """

    tokens: int
    """Prompt plus completion tokens of the failed call."""

    def __init__(self, message: str, *, tokens: int = 0) -> None:
        super().__init__(message)
        self.tokens = tokens


class _ReplyProposal(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(extra="ignore")
    id: str
    content: str
    confidence: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    payload: JsonValue | None = None


class _Reply(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(extra="ignore")
    proposals: list[_ReplyProposal]


def _extract_json(text: str) -> object:
    """The JSON object in a reply that may wrap it in code fences or prose."""
    candidates = [match.strip() for match in _FENCE.findall(text)]
    candidates.append(text.strip())
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    raise ValueError("no JSON object found")


@final
class LlmSuggestor:
    """Shows a chat model its instructions and the facts of its dependency keys; stages replies.

    Every proposal in the reply is staged under `PROPOSALS` with `target`, provenance
    `"{name}:{model}"` and evidence = the `"key/id"` of every fact the model was shown, so
    a separate `ValidationAgent` decides what becomes a fact. It accepts while some
    dependency fact has not yet been shown to it (read from the evidence of its own staged
    facts), so it runs once per new input and the loop converges. Its `dependencies` are the
    given keys plus `PROPOSALS`, since `accepts` reads its own staged facts there; when more
    than `max_context_facts` facts are waiting, it shows the oldest unseen ones first and runs
    again in the next cycle for the rest. A reply with no proposals leaves no evidence, so the
    same facts are shown again the next time one of its keys changes.

    Args:
        name: Unique suggestor name.
        provider: The chat model.
        dependencies: Keys whose facts the model is shown.
        target: The key its proposals ask to be promoted into.
        instructions: The task, as a system prompt.
        model: The model to ask; `None` for the provider's default.
        temperature: Sampling temperature.
        max_context_facts: Most facts shown per call; facts not yet shown go first.
    """

    def __init__(
        self,
        name: str,
        provider: ChatProvider,
        *,
        dependencies: Sequence[ContextKey],
        target: ContextKey,
        instructions: str,
        model: str | None = None,
        temperature: float = 0.0,
        max_context_facts: int = 50,
    ) -> None:
        if target is ContextKey.PROPOSALS:
            raise ValueError(f"LlmSuggestor {name!r}: target cannot be PROPOSALS")
        if max_context_facts < 1:
            raise ValueError(f"LlmSuggestor {name!r}: max_context_facts must be at least 1")
        self._name = name
        self._provider = provider
        self._shown_keys = tuple(dict.fromkeys(dependencies))
        self._dependencies = tuple(dict.fromkeys((*self._shown_keys, ContextKey.PROPOSALS)))
        self._target = target
        self._instructions = instructions
        self._model = model
        self._temperature = temperature
        self._max_context_facts = max_context_facts

    def __repr__(self) -> str:
        return f"LlmSuggestor({self._name!r}, target={self._target.value!r})"

    @property
    def name(self) -> str:
        """The name given at construction."""
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """The keys whose facts the model is shown, plus `PROPOSALS` (read by `accepts`)."""
        return self._dependencies

    @property
    def writes(self) -> Sequence[ContextKey]:
        """Only `PROPOSALS`: a model's output is always staged."""
        return (ContextKey.PROPOSALS,)

    def accepts(self, ctx: Context, /) -> bool:
        """True while some dependency fact is not yet in the evidence of its staged facts."""
        return bool(self._unseen(ctx, self._seen(ctx)))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Ask the model once and stage every proposal in its reply.

        Raises:
            LlmOutputError: The reply is not the expected JSON.
            ProviderError: The provider failed.
        """
        seen = self._seen(ctx)
        unseen = self._unseen(ctx, seen)
        limit = self._max_context_facts
        shown = unseen[:limit]
        if len(shown) < limit:
            shown += [fact for fact in self._facts(ctx) if fact.ref in seen][: limit - len(shown)]
        request = ChatRequest(
            model=self._model or "",
            messages=(
                ChatMessage(role="system", content=f"{self._instructions}\n\n{_FORMAT}"),
                ChatMessage(role="user", content=_describe(shown)),
            ),
            temperature=self._temperature,
        )
        response = await self._provider.complete(request)
        tokens = response.prompt_tokens + response.completion_tokens
        reply = self._parse(response.content, tokens)
        provenance = f"{self._name}:{response.model or self._model or 'default'}"
        evidence = tuple(fact.ref for fact in shown)
        proposals: list[ProposedFact] = []
        for index, item in enumerate(reply.proposals):
            try:
                proposals.append(
                    ProposedFact(
                        key=ContextKey.PROPOSALS,
                        id=item.id,
                        content=item.content,
                        payload=item.payload,
                        confidence=item.confidence,
                        provenance=provenance,
                        target=self._target,
                        evidence=evidence,
                    )
                )
            except ValidationError as error:
                raise LlmOutputError(
                    f"{self._name}: proposals[{index}] of the model's reply is not a valid "
                    f"proposal ({_describe_error(error)})",
                    tokens=tokens,
                ) from None
        return AgentEffect.with_proposals(proposals, tokens=tokens)

    def _facts(self, ctx: Context) -> list[Fact]:
        return [fact for key in self._shown_keys for fact in ctx.get(key)]

    def _seen(self, ctx: Context) -> set[str]:
        name = self._name
        return {
            ref
            for staged in ctx.get(ContextKey.PROPOSALS)
            if staged.promotion.suggestor == name
            for ref in staged.evidence
        }

    def _unseen(self, ctx: Context, seen: set[str]) -> list[Fact]:
        return [fact for fact in self._facts(ctx) if fact.ref not in seen]

    def _parse(self, text: str, tokens: int) -> _Reply:
        try:
            return _Reply.model_validate(_extract_json(text))
        except ValidationError as error:
            reason = _describe_error(error)
        except ValueError as error:
            reason = str(error)
        excerpt = text if len(text) <= 200 else text[:199] + "…"
        raise LlmOutputError(
            f"{self._name}: the model's reply is not the expected JSON "
            f'{{"proposals": [...]}} ({reason}); reply: {excerpt!r}',
            tokens=tokens,
        )


def _describe_error(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in detail['loc']) or 'reply'}: {detail['msg']}"
        for detail in error.errors()[:3]
    )


def _describe(facts: Sequence[Fact]) -> str:
    if not facts:
        return "There are no facts yet."
    lines = ["Facts (key/id, provenance: content):"]
    lines.extend(f"- {fact.ref} ({fact.provenance}): {fact.content}" for fact in facts)
    return "\n".join(lines)
