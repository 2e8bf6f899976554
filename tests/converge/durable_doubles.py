"""Doubles for the durable-execution tests: a chain of cycles with a hook, and store wrappers.

`Chain` adds one hypothesis per cycle (`step-0` in cycle 1, `step-1` in cycle 2, ...) and
calls its hook, if any, with the cycle number before proposing, so a test can look at the
store, cancel the run or wait while a cycle is in flight. Assertions never go inside a hook
(a failing suggestor is isolated by the engine): hooks record, tests assert afterwards.

The file is also a formation file (`formation`, the same chain) for `converge resume
--formation`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from converge import (
    AgentEffect,
    Checkpoint,
    Context,
    ContextKey,
    EngineEvent,
    Formation,
    ProposedFact,
    RunProgress,
    RunRecord,
    RunStore,
    RunSummary,
)

__all__ = [
    "Arrivals",
    "Chain",
    "Delegating",
    "EventLog",
    "FailingProgress",
    "Hook",
    "Risky",
    "Slow",
    "formation",
]

H = ContextKey.HYPOTHESES

Hook = Callable[[int], Awaitable[None]]
"""Called by `Chain.execute` with the cycle it runs in."""


class Chain:
    """Adds `hypotheses/step-N` in cycle N + 1 until there are `steps`; `tokens` per call."""

    def __init__(
        self, *, steps: int, tokens: int = 3, hook: Hook | None = None, name: str = "chain"
    ) -> None:
        self.name = name
        self.dependencies = (ContextKey.SEEDS, H)
        self.steps = steps
        self.tokens = tokens
        self.hook = hook
        self.calls = 0

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(H) < self.steps

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(H)
        self.calls += 1
        if self.hook is not None:
            await self.hook(n + 1)
        proposal = ProposedFact(
            key=H,
            id=f"step-{n}",
            content=f"step {n} of the chain",
            payload={"n": n, "square": n * n},
            provenance=self.name,
            evidence=("seeds/start",),
        )
        return AgentEffect.with_proposals([proposal], tokens=self.tokens)


class Risky:
    """Whenever a hypothesis is added, proposes `strategies/risky` at confidence 0.3 (a human
    gate below 0.5 holds it) until it exists."""

    name = "risky"
    dependencies = (H,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.STRATEGIES, "risky") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        proposal = ProposedFact(
            key=ContextKey.STRATEGIES,
            id="risky",
            content="bet everything on one vendor",
            provenance=self.name,
            confidence=0.3,
        )
        return AgentEffect.with_proposals([proposal], tokens=1)


class EventLog:
    """An observer keeping every event it is given."""

    def __init__(self) -> None:
        self.events: list[EngineEvent] = []

    def on_event(self, event: EngineEvent, /) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        """The events' types, in order."""
        return [event.type for event in self.events]


class Delegating:
    """A `RunStore` passing every call to `inner`; subclasses change one or two."""

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        return await self.inner.save(record, expected_version=expected_version)

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        return await self.inner.save_progress(progress, expected_version=expected_version)

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        await self.inner.renew_lease(run_id, version=version, lease_seconds=lease_seconds)

    async def load(self, run_id: str, /) -> RunRecord:
        return await self.inner.load(run_id)

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        return await self.inner.list_runs(limit=limit)

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        return await self.inner.load_checkpoint(run_id)


class FailingProgress(Delegating):
    """Its `fail_at`-th `save_progress` (counting from 1) raises `OSError("disk full")`."""

    def __init__(self, inner: RunStore, *, fail_at: int) -> None:
        super().__init__(inner)
        self.fail_at = fail_at
        self.calls = 0
        self.heads: list[tuple[str, int]] = []
        """`(run_id, cycle)` of every progress it was given."""
        self.records: list[RunRecord] = []
        """Every finished or paused record it was given."""

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        self.calls += 1
        self.heads.append((progress.head.run_id, progress.head.cycle))
        if self.calls == self.fail_at:
            raise OSError("disk full")
        return await super().save_progress(progress, expected_version=expected_version)

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        self.records.append(record)
        return await super().save(record, expected_version=expected_version)


class Arrivals(Delegating):
    """Notes each save (`save` or `save_progress`) in `arrived` before passing it on; `ready`
    is set once `parties` of them (of every store sharing `arrived`) have arrived.

    With the run's row held locked by someone else, both contenders of a race have read the
    run and are about to claim it when `ready` is set: the race is then decided by the store.
    """

    def __init__(
        self, inner: RunStore, *, name: str, parties: int, arrived: list[str], ready: anyio.Event
    ) -> None:
        super().__init__(inner)
        self.name = name
        self.parties = parties
        self.arrived = arrived
        self.ready = ready

    def _arrive(self) -> None:
        self.arrived.append(self.name)
        if len(self.arrived) >= self.parties:
            self.ready.set()

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        self._arrive()
        return await super().save_progress(progress, expected_version=expected_version)

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        self._arrive()
        return await super().save(record, expected_version=expected_version)


formation = Formation(
    name="durable-chain",
    description="one hypothesis per cycle, for `converge resume` of an interrupted run",
    suggestors=(Chain(steps=6),),
    inputs=(
        ProposedFact(key=ContextKey.SEEDS, id="start", content="start the chain", provenance="t"),
    ),
)
"""The formation `test_durable` runs as `Chain(steps=STEPS)` with `INPUTS` (same fingerprint)."""


class Slow(Delegating):
    """Each `save_progress` takes `seconds` longer; with `final`, only the final `save` does."""

    def __init__(self, inner: RunStore, *, seconds: float, final: bool = False) -> None:
        super().__init__(inner)
        self.seconds = seconds
        self.final = final

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        if not self.final:
            await anyio.sleep(self.seconds)
        return await super().save_progress(progress, expected_version=expected_version)

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        if self.final:
            await anyio.sleep(self.seconds)
        return await super().save(record, expected_version=expected_version)
