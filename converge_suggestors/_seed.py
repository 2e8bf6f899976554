"""`SeedSuggestor`: puts one fact into the context at the start of a run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from converge import AgentEffect, AnyKey, Context, ContextKey, KeyLike, ProposedFact, key_named

__all__ = ["SeedSuggestor"]


@final
class SeedSuggestor:
    """Proposes one fact, once: it accepts while its fact is absent, with no dependencies.

    Its name is `"seed:{key}/{fact_id}"`, unique per fact, so several seeds can share an engine.
    """

    __slots__ = ("_content", "_fact_id", "_key", "_name")

    def __init__(self, fact_id: str, content: str, *, key: KeyLike = ContextKey.SEEDS) -> None:
        key = key_named(key)
        self._fact_id = fact_id
        self._content = content
        self._key = key
        self._name = f"seed:{key.value}/{fact_id}"

    @property
    def name(self) -> str:
        """`"seed:{key}/{fact_id}"`."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """None: a seed is a candidate in every cycle."""
        return ()

    @property
    def writes(self) -> Sequence[AnyKey]:
        """Only its own key."""
        return (self._key,)

    def accepts(self, ctx: Context, /) -> bool:
        """True while its fact is absent."""
        return ctx.find(self._key, self._fact_id) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the seed fact."""
        return AgentEffect.with_proposal(
            ProposedFact(
                key=self._key, id=self._fact_id, content=self._content, provenance=self._name
            )
        )
