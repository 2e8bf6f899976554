"""`ReactOnceSuggestor`: answers the first facts of one key with one fact in another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from converge import AgentEffect, AnyKey, Context, ContextKey, KeyLike, ProposedFact, key_named

__all__ = ["ReactOnceSuggestor"]


@final
class ReactOnceSuggestor:
    """Once `source` holds facts, proposes one fact under `target`, citing them as evidence.

    It depends on `source` and accepts when `source` has facts and its own fact is absent.
    Its name is `"react:{target}/{fact_id}"`, unique per fact.
    """

    __slots__ = ("_content", "_fact_id", "_name", "_source", "_target")

    def __init__(
        self,
        fact_id: str,
        content: str,
        *,
        source: KeyLike = ContextKey.SEEDS,
        target: KeyLike = ContextKey.HYPOTHESES,
    ) -> None:
        source = key_named(source)
        target = key_named(target)
        self._fact_id = fact_id
        self._content = content
        self._source = source
        self._target = target
        self._name = f"react:{target.value}/{fact_id}"

    @property
    def name(self) -> str:
        """`"react:{target}/{fact_id}"`."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The `source` key."""
        return (self._source,)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """Only the `target` key."""
        return (self._target,)

    def accepts(self, ctx: Context, /) -> bool:
        """True when `source` has facts and its own fact is absent."""
        return ctx.has(self._source) and ctx.find(self._target, self._fact_id) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the reaction, citing every fact of `source` as evidence."""
        evidence = tuple(fact.ref for fact in ctx.get(self._source))
        return AgentEffect.with_proposal(
            ProposedFact(
                key=self._target,
                id=self._fact_id,
                content=self._content,
                provenance=self._name,
                evidence=evidence,
            )
        )
