"""`Formation`: a typed bundle of everything a run needs, runnable from code or the CLI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict, Unpack, final

from ._budget import Budget
from ._context import ContextSnapshot
from ._durable import Durability
from ._engine import Engine
from ._events import Observer
from ._executor import ErrorMode
from ._gate import PromotionPolicy
from ._hitl import HitlPolicy
from ._invariant import Invariant
from ._merge import ConflictMode
from ._proposal import ProposedFact
from ._result import ConvergeResult
from ._store import RunStore
from ._suggestor import Suggestor

__all__ = ["EngineOptions", "Formation"]


class EngineOptions(TypedDict, total=False):
    """Keyword arguments of `Engine`, for `Formation.engine` overrides."""

    budget: Budget
    policy: PromotionPolicy
    max_concurrency: int | None
    suggestor_timeout: float | None
    on_conflict: ConflictMode
    on_suggestor_error: ErrorMode
    hitl: HitlPolicy | None
    clock: Callable[[], datetime] | None
    signing_key: bytes | str | None
    store: RunStore | None
    durability: Durability
    lease: float
    name: str | None
    formation: str | None
    observers: Sequence[Observer]
    record_effects: bool


@final
@dataclass(frozen=True, slots=True)
class Formation:
    """Suggestors, invariants, budget, HITL policy and inputs: one runnable formation.

    A formation file is a Python file or module with a module-level `formation`; the
    `converge` command runs it. `engine()` builds a fresh engine with everything registered.
    """

    name: str
    """A short name, shown by the command line."""
    suggestors: tuple[Suggestor, ...]
    """Registered in this order (which is also the merge order)."""
    description: str = ""
    """What it does, in a sentence or two."""
    invariants: tuple[Invariant, ...] = ()
    """Registered after the suggestors."""
    budget: Budget = field(default_factory=Budget)
    """The run's budget."""
    hitl: HitlPolicy | None = None
    """Which proposals wait for a human."""
    inputs: tuple[ProposedFact, ...] = ()
    """Merged at cycle 0."""
    record_effects: bool = True
    """Keep effects in the trace so the run can be replayed."""

    def engine(self, **overrides: Unpack[EngineOptions]) -> Engine:
        """A new engine with this formation's settings (overridable) and registrations."""
        options: EngineOptions = {
            "name": self.name,
            "budget": self.budget,
            "hitl": self.hitl,
            "record_effects": self.record_effects,
        }
        options.update(overrides)
        engine = Engine(**options)
        for suggestor in self.suggestors:
            engine.register_suggestor(suggestor)
        for invariant in self.invariants:
            engine.register_invariant(invariant)
        return engine

    async def run(
        self, context: ContextSnapshot | None = None, **overrides: Unpack[EngineOptions]
    ) -> ConvergeResult:
        """Run the formation once on a fresh engine, with its inputs."""
        return await self.engine(**overrides).run(context, inputs=self.inputs)
