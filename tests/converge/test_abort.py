"""A suggestor's `BaseException` stops the run as the engine's own stop, from Python.

`KeyboardInterrupt` (or any other `BaseException` but a cancellation) raised by `accepts` or
`execute`, alone in its cycle or beside others, on either backend: the run is saved as
interrupted (never left `running`), `resume_run` continues it, and `run` raises what the
suggestor raised, not an exception group, with a note saying where; `SystemExit` becomes a
`SuggestorExitError` caused by it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import anyio
import pytest

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    Engine,
    ProposedFact,
    RunStatus,
    SqliteRunStore,
    SuggestorExitError,
)
from converge._kernel._abort import stopped_by

Where = Literal["execute", "accepts"]


class Custom(BaseException):
    """A `BaseException` of the application's own (as test frameworks raise)."""


def seed() -> ProposedFact:
    return ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="test")


class Step:
    """Cycle 1: proposes `hypotheses/first`, so the run has a merged cycle to save."""

    name = "step"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.HYPOTHESES, "first") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        proposal = ProposedFact(
            key=ContextKey.HYPOTHESES, id="first", content="first", provenance="step"
        )
        return AgentEffect.with_proposal(proposal)


class Raiser:
    """In cycle 2 (woken by `hypotheses`), raises `make()` from `where`, while `armed`."""

    name = "raiser"
    dependencies = (ContextKey.HYPOTHESES,)

    def __init__(self, make: Callable[[], BaseException], where: Where = "execute") -> None:
        self.make = make
        self.where = where
        self.armed = True

    def accepts(self, ctx: Context, /) -> bool:
        if self.armed and self.where == "accepts":
            raise self.make()
        return ctx.find(ContextKey.EVALUATIONS, "done") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.lowlevel.checkpoint()
        if self.armed:
            raise self.make()
        proposal = ProposedFact(
            key=ContextKey.EVALUATIONS, id="done", content="done", provenance="raiser"
        )
        return AgentEffect.with_proposal(proposal)


class Sleeper:
    """Beside the raiser in cycle 2: sleeps until it is cancelled (the run must not wait),
    while `raiser` is armed."""

    name = "sleeper"
    dependencies = (ContextKey.HYPOTHESES,)

    def __init__(self, raiser: Raiser) -> None:
        self.raiser = raiser
        self.cancelled = False

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.EVALUATIONS, "slept") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        try:
            await anyio.sleep(30 if self.raiser.armed else 0)
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        return AgentEffect.empty()


def engine_of(
    store: SqliteRunStore | None, *suggestors: object, timeout: float | None = None
) -> Engine:
    engine = Engine(store=store, suggestor_timeout=timeout, inputs=[seed()])
    for suggestor in (Step(), *suggestors):
        engine.register_suggestor(suggestor)  # pyright: ignore[reportArgumentType]
    return engine


@pytest.fixture
def store(tmp_path: Path) -> SqliteRunStore:
    return SqliteRunStore(tmp_path / "runs.db")


def only_run(store: SqliteRunStore) -> str:
    (summary,) = anyio.run(store.list_runs)
    return summary.run_id


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("where", ["execute", "accepts"])
@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-another"])
def test_run_raises_a_keyboard_interrupt_unwrapped_and_saves_the_run_interrupted(
    store: SqliteRunStore, backend: Literal["asyncio", "trio"], where: Where, beside: bool
) -> None:
    raiser = Raiser(KeyboardInterrupt, where)
    sleeper = Sleeper(raiser)
    engine = engine_of(store, raiser, *((sleeper,) if beside else ()))
    with pytest.raises(KeyboardInterrupt) as caught:
        engine.run_sync(backend=backend)
    error = caught.value
    assert type(error) is KeyboardInterrupt
    assert error.__context__ is None
    run_id = only_run(store)
    stopped = stopped_by(error)
    assert stopped is not None
    assert (stopped.suggestor, stopped.phase, stopped.cycle, stopped.run_id, stopped.saved) == (
        "raiser",
        where,
        2,
        run_id,
        True,
    )
    (note,) = error.__notes__
    assert note == (
        f"converge: suggestor 'raiser' raised it in {where}(), cycle 2 of run {run_id}, which "
        "stopped there; it was saved as interrupted, to be continued from its last merged cycle"
    )
    record = anyio.run(store.load, run_id)
    assert record.status is RunStatus.INTERRUPTED
    assert [f"{fact.key}/{fact.id}" for fact in record.facts] == ["seeds/s", "hypotheses/first"]
    if beside and where == "execute":
        assert sleeper.cancelled
    raiser.armed = False
    resumed = engine_of(store, raiser, *((sleeper,) if beside else ())).resume_run_sync(run_id)
    assert resumed.run_id == run_id
    assert resumed.context.find(ContextKey.EVALUATIONS, "done") is not None


@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-another"])
def test_run_raises_a_suggestor_exit_error_caused_by_system_exit(
    store: SqliteRunStore, beside: bool
) -> None:
    raiser = Raiser(lambda: SystemExit(0))
    engine = engine_of(store, raiser, *((Sleeper(raiser),) if beside else ()))
    with pytest.raises(SuggestorExitError) as caught:
        engine.run_sync()
    error = caught.value
    run_id = only_run(store)
    assert isinstance(error.__cause__, SystemExit)
    assert error.__context__ is None
    assert (error.suggestor, error.cycle, error.run_id, error.saved, error.code) == (
        "raiser",
        2,
        run_id,
        True,
        0,
    )
    assert str(error).startswith("SystemExit(0): suggestor 'raiser' raised it in execute(), ")
    assert anyio.run(store.load, run_id).status is RunStatus.INTERRUPTED


def test_run_raises_an_application_base_exception_as_it_is_under_a_timeout(
    store: SqliteRunStore,
) -> None:
    """A timeout sends the lone call through the executor's scoped path."""
    engine = engine_of(store, Raiser(lambda: Custom("stop the test")), timeout=5.0)
    with pytest.raises(Custom, match="stop the test"):
        engine.run_sync()
    assert anyio.run(store.load, only_run(store)).status is RunStatus.INTERRUPTED


def test_run_without_a_store_raises_it_and_says_nothing_was_saved() -> None:
    with pytest.raises(KeyboardInterrupt) as caught:
        engine_of(None, Raiser(KeyboardInterrupt)).run_sync()
    (note,) = caught.value.__notes__
    assert note.endswith(
        "which stopped there; nothing was saved (a run is saved as it goes only with a store and "
        'durability="cycle")'
    )


def test_run_saved_only_at_its_end_leaves_no_row_when_a_suggestor_stops_it(
    store: SqliteRunStore,
) -> None:
    engine = Engine(store=store, durability="exit", inputs=[seed()])
    for suggestor in (Step(), Raiser(KeyboardInterrupt)):
        engine.register_suggestor(suggestor)
    with pytest.raises(KeyboardInterrupt) as caught:
        engine.run_sync()
    stopped = stopped_by(caught.value)
    assert stopped is not None
    assert stopped.saved is None
    assert anyio.run(store.list_runs) == ()  # never saved, so never left `running`


async def test_stream_raises_a_keyboard_interrupt_to_the_consumer_unwrapped(
    store: SqliteRunStore,
) -> None:
    raiser = Raiser(KeyboardInterrupt)
    engine = engine_of(store, raiser, Sleeper(raiser))
    seen: list[object] = []

    async def consume() -> None:
        async for item in engine.stream():
            seen.append(item)

    with pytest.raises(KeyboardInterrupt):
        await consume()
    assert seen
    (summary,) = await store.list_runs()
    assert summary.status is RunStatus.INTERRUPTED


def test_run_isolates_an_ordinary_exception_as_before(store: SqliteRunStore) -> None:
    result = engine_of(store, Raiser(lambda: RuntimeError("boom"))).run_sync()
    (failure,) = result.failures
    assert failure.error == "RuntimeError: boom"
