"""`RuleSuggestor`: declarative when/then over the facts of some keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

from converge import AgentEffect, AnyKey, Context, Fact, ProposedFact

__all__ = ["RuleSuggestor"]


@final
class RuleSuggestor:
    """For every fact of its dependency keys where `when(fact)` holds, proposes `then(fact)`.

    It decides from the context alone: a fact is handled once the proposal `then(fact)` names
    exists (same key and id). The fact's `"key/id"` is added to the proposal's evidence when
    `then` leaves it out. Both callables must be pure.

    ```python
    RuleSuggestor(
        "flag-large-orders",
        dependencies=[ContextKey.SIGNALS],
        when=lambda f: isinstance(f.payload, dict) and f.payload.get("amount", 0) > 10_000,
        then=lambda f: ProposedFact(key=ContextKey.EVALUATIONS, id=f"large:{f.id}",
                                    content=f"{f.id} is a large order", provenance="rules"),
    )
    ```
    """

    __slots__ = ("_dependencies", "_name", "_then", "_when", "_writes")

    def __init__(
        self,
        name: str,
        *,
        dependencies: Sequence[AnyKey],
        when: Callable[[Fact], bool],
        then: Callable[[Fact], ProposedFact],
        writes: Sequence[AnyKey] | None = None,
    ) -> None:
        self._name = name
        self._dependencies = tuple(dependencies)
        self._when = when
        self._then = then
        self._writes = None if writes is None else tuple(writes)

    def __repr__(self) -> str:
        return f"RuleSuggestor({self._name!r})"

    @property
    def name(self) -> str:
        """The rule's name."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The keys whose facts the rule looks at."""
        return self._dependencies

    @property
    def writes(self) -> Sequence[AnyKey] | None:
        """The keys it may write, or `None` for any."""
        return self._writes

    def accepts(self, ctx: Context, /) -> bool:
        """True while some matching fact's derived proposal is absent."""
        return any(True for _ in self._derived(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose what every pending match derives."""
        return AgentEffect.with_proposals(self._derived(ctx))

    def _derived(self, ctx: Context) -> list[ProposedFact]:
        proposals: list[ProposedFact] = []
        for key in self._dependencies:
            for fact in ctx.get(key):
                if not self._when(fact):
                    continue
                proposal = self._then(fact)
                if ctx.find(proposal.key, proposal.id) is not None:
                    continue
                if fact.ref not in proposal.evidence:
                    proposal = proposal.model_copy(
                        update={"evidence": (*proposal.evidence, fact.ref)}
                    )
                proposals.append(proposal)
        return proposals
