"""Checked by pyright only: what satisfies `Suggestor`, and what does not."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_type

from pydantic import BaseModel, ConfigDict

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    Engine,
    Fact,
    FunctionSuggestor,
    ProposedFact,
    StopReason,
    Suggestor,
    SuggestorId,
    suggestor,
)
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor


class PlainSuggestor:
    """A plain class with plain attributes."""

    def __init__(self) -> None:
        self.name = "plain"
        self.dependencies: Sequence[ContextKey] = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.has(ContextKey.SEEDS)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


class ModelSuggestor(BaseModel, frozen=True):
    """A frozen pydantic model."""

    model_config = ConfigDict(frozen=True)
    name: str = "model"
    dependencies: tuple[ContextKey, ...] = ()

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


@dataclass(frozen=True)
class DataclassSuggestor:
    """A frozen dataclass."""

    name: str = "dataclass"
    dependencies: tuple[ContextKey, ...] = ()

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


class SyncExecute:
    name = "sync"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return True

    def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


class MissingAccepts:
    name = "missing"
    dependencies = ()

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


@suggestor(name="decorated", dependencies=[ContextKey.SEEDS])
async def decorated(ctx: Context) -> list[ProposedFact]:
    return []


def conformance() -> None:
    plain: Suggestor = PlainSuggestor()
    model: Suggestor = ModelSuggestor()
    frozen: Suggestor = DataclassSuggestor()
    seed: Suggestor = SeedSuggestor("s", "x")
    react: Suggestor = ReactOnceSuggestor("h", "x")
    function: Suggestor = decorated
    assert_type(decorated, FunctionSuggestor)
    sync: Suggestor = SyncExecute()  # pyright: ignore[reportAssignmentType]
    missing: Suggestor = MissingAccepts()  # pyright: ignore[reportAssignmentType]
    engine = Engine()
    for each in (plain, model, frozen, seed, react, function, sync, missing):
        assert_type(engine.register_suggestor(each), SuggestorId)


async def results() -> None:
    result = await Engine().run()
    assert_type(result, ConvergeResult)
    assert_type(result.stop_reason, StopReason)
    assert_type(result.context, ContextSnapshot)
    assert_type(result.context.find(ContextKey.SEEDS, "x"), Fact | None)
    assert_type(result.context.get(ContextKey.SEEDS), Sequence[Fact])
    assert_type(result.raise_for_status(), ConvergeResult)
    fact = result.context.facts()[0]
    fact.content = "forged"  # pyright: ignore[reportAttributeAccessIssue]
