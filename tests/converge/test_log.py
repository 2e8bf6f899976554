"""Logging: structlog events under fixed names; nothing printed unless the application asks."""

import logging

import pytest
import structlog
from structlog.testing import capture_logs

from converge import AgentEffect, Context, Engine
from converge_suggestors import SeedSuggestor


class Broken:
    name = "broken"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        raise RuntimeError("boom")


@pytest.fixture
def unconfigured() -> None:
    """An application that never configured structlog (capture_logs elsewhere flips the flag)."""
    structlog.reset_defaults()
    assert not structlog.is_configured()


def test_run_logs_started_and_finished_events_with_the_run_id() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s", "x"))
    with capture_logs() as logs:
        result = engine.run_sync()
    events = [entry["event"] for entry in logs]
    assert events[0] == "run_started"
    assert events[-1] == "run_finished"
    assert "cycle_started" in events
    assert "cycle_finished" in events
    finished = logs[-1]
    assert finished["log_level"] == "info"
    assert finished["run_id"] == result.run_id
    assert finished["stop_reason"] == "converged"
    assert finished["merkle_root"] == result.integrity.merkle_root


def test_suggestor_failure_is_logged_as_a_warning() -> None:
    engine = Engine()
    engine.register_suggestor(Broken())
    with capture_logs() as logs:
        engine.run_sync()
    [failure] = [entry for entry in logs if entry["event"] == "suggestor_failed"]
    assert failure["log_level"] == "warning"
    assert failure["suggestor"] == "broken"
    assert failure["error"] == "RuntimeError: boom"


@pytest.mark.usefixtures("unconfigured")
def test_unconfigured_run_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine()
    engine.register_suggestor(Broken())
    engine.run_sync()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""


@pytest.mark.usefixtures("unconfigured")
def test_unconfigured_run_logs_to_the_stdlib_converge_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine()
    engine.register_suggestor(Broken())
    with caplog.at_level(logging.DEBUG, logger="converge"):
        engine.run_sync()
    messages = [record.getMessage() for record in caplog.records if record.name == "converge"]
    assert "run_started" in messages
    assert "suggestor_failed" in messages
    assert "run_finished" in messages
