"""`call_sync`: what a `*_sync` method raises is the run's own exception, chained to nothing."""

from __future__ import annotations

import pytest
from hitl_formation import build_engine

from converge import (
    AgentEffect,
    ConfigurationError,
    Context,
    ContextKey,
    Engine,
    GateDecision,
    InvalidResumeError,
    ProposedFact,
)
from converge._kernel._sync import Backend

BACKENDS: list[Backend] = ["asyncio", "trio"]


class Raising:
    """A suggestor whose `execute` raises `LookupError`."""

    name = "raising"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        raise LookupError("no such row")


def unchained(error: BaseException) -> bool:
    return error.__context__ is None and error.__cause__ is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_sync_raises_a_suggestor_error_unchained_when_errors_are_raised(
    backend: Backend,
) -> None:
    engine = Engine(on_suggestor_error="raise")
    engine.register_suggestor(Raising())
    with pytest.raises(LookupError) as caught:
        engine.run_sync(backend=backend)
    assert unchained(caught.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_sync_records_a_failure_traceback_without_an_event_loop_error(
    backend: Backend,
) -> None:
    engine = Engine()
    engine.register_suggestor(Raising())
    (failure,) = engine.run_sync(backend=backend).failures
    assert failure.traceback is not None
    assert "LookupError: no such row" in failure.traceback
    assert "EventLoop" not in failure.traceback
    assert "During handling" not in failure.traceback


def test_call_sync_raises_a_configuration_error_unchained_when_the_input_is_bad() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Engine().run_sync(inputs=["not a proposal"])  # pyright: ignore[reportArgumentType]
    assert unchained(caught.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_sync_raises_a_resume_error_unchained_when_a_decision_is_unknown(
    backend: Backend,
) -> None:
    engine = build_engine()
    paused = engine.run_sync()
    assert paused.checkpoint is not None
    with pytest.raises(InvalidResumeError) as caught:
        engine.resume_sync(
            paused.checkpoint, [GateDecision.approve("gate:9:nope/x", by="jane")], backend=backend
        )
    assert unchained(caught.value)


def test_call_sync_returns_the_result_when_nothing_fails() -> None:
    seed = ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="me")
    assert Engine().run_sync(inputs=[seed]).converged
