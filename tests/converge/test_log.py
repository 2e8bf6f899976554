"""Logging: structlog events under fixed names; warnings on stderr until the application
configures logging, then only what it configured."""

import logging
import subprocess
import sys

import pytest
import structlog
from structlog.testing import capture_logs

from converge import AgentEffect, Context, Engine, RunStarted
from converge._kernel._log import (
    EventLog,
    _stdlib_bound,  # pyright: ignore[reportPrivateUsage]
    _stdlib_level,  # pyright: ignore[reportPrivateUsage]
    _stdlib_threshold,  # pyright: ignore[reportPrivateUsage]
    _threshold,  # pyright: ignore[reportPrivateUsage]
)
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


SCRIPT = """
import logging, sys

from pydantic import BaseModel

from converge import AgentEffect, ContextKey, Engine, Key, ProposedFact

class Price(BaseModel, frozen=True):
    amount: int

PRICES = Key("test.prices", payload=Price)

class Broken:
    name = "broken"
    dependencies = ()
    def accepts(self, ctx):
        return ctx.cycle == 0
    async def execute(self, ctx):
        raise RuntimeError("boom\\nsecond line")

class Misfit:
    name = "misfit"
    dependencies = ()
    def accepts(self, ctx):
        return ctx.cycle == 0
    async def execute(self, ctx):
        return AgentEffect.with_proposal(ProposedFact(
            key=PRICES, id="p", content="a price", provenance="m", payload={"amount": "lots"}
        ))

SETUP
engine = Engine()
engine.register_suggestor(Broken())
engine.register_suggestor(Misfit())
result = engine.run_sync()
print(result.stop_reason, result.ok)
"""


def run_script(setup: str) -> subprocess.CompletedProcess[str]:
    """A program that configures logging with `setup`, then runs a failing formation."""
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("SETUP", setup)],
        capture_output=True,
        text=True,
        check=True,
    )


def test_an_unconfigured_run_writes_one_line_per_failure_on_stderr() -> None:
    done = run_script("")
    assert done.stdout == "converged False\n"
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    failed, invalid = sorted(lines, key=lambda line: "proposal_invalid" in line)
    assert failed.startswith("converge: warning: suggestor_failed run_id=")
    assert failed.endswith(
        "cycle=1 suggestor=broken suggestor_id=0 phase=execute outcome=failed "
        "error=RuntimeError: boom\\nsecond line"
    )
    assert invalid.startswith("converge: warning: proposal_invalid run_id=")
    assert "cycle=1 suggestor=misfit ref=test.prices/p reason=payload does not fit Price" in invalid


@pytest.mark.parametrize(
    "setup",
    [
        "logging.basicConfig(level=logging.ERROR)",
        "logging.getLogger('converge').addHandler(logging.NullHandler())",
        "logging.getLogger('converge').setLevel(logging.ERROR)",
    ],
)
def test_a_run_whose_application_configured_logging_writes_only_what_it_configured(
    setup: str,
) -> None:
    done = run_script(setup)
    assert done.stdout == "converged False\n"
    assert done.stderr == ""


def test_a_run_logs_through_the_applications_handler_once() -> None:
    done = run_script("logging.basicConfig(format='%(levelname)s %(name)s %(message)s')")
    assert sorted(done.stderr.splitlines()) == [
        "WARNING converge proposal_invalid",
        "WARNING converge suggestor_failed",
    ]


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


@pytest.mark.parametrize("level", [0, 5, logging.DEBUG, 15, logging.INFO, 25, logging.WARNING, 60])
@pytest.mark.usefixtures("unconfigured")
def test_the_threshold_of_an_unbuilt_logger_is_the_built_ones(level: int) -> None:
    # A run's log builds its structlog logger on the first line it writes; until then its
    # threshold comes from the level alone, and must be what the logger would have said.
    stdlib = logging.getLogger("converge")
    before = stdlib.level
    stdlib.setLevel(level)
    try:
        written = _stdlib_level()
        assert _stdlib_threshold(written) == _threshold(_stdlib_bound(written, {"run_id": "r"}))
    finally:
        stdlib.setLevel(before)


@pytest.mark.usefixtures("unconfigured")
def test_a_level_of_the_applications_own_logs_what_it_lets_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine()
    engine.register_suggestor(Broken())
    with caplog.at_level(25, logger="converge"):  # between INFO and WARNING
        result = engine.run_sync()
    assert result.cycles == 1
    messages = [record.getMessage() for record in caplog.records if record.name == "converge"]
    assert messages == ["suggestor_failed"]  # a warning; run_started and run_finished are info


@pytest.mark.usefixtures("unconfigured")
def test_a_run_with_logging_disabled_runs_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine()
    engine.register_suggestor(Broken())
    with caplog.at_level(logging.DEBUG, logger="converge"):
        logging.disable(logging.CRITICAL)  # inside: at_level lifts a disable in force
        try:
            result = engine.run_sync()
        finally:
            logging.disable(logging.NOTSET)
    assert result.cycles == 1
    assert [record for record in caplog.records if record.name == "converge"] == []


@pytest.mark.usefixtures("unconfigured")
def test_the_log_keeps_the_level_it_was_made_with(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="converge"):
        log = EventLog(run_id="r")
    with caplog.at_level(logging.DEBUG, logger="converge"):
        log.warning("kept", where="here")
        log.write(RunStarted(run_id="r", cycle=0, suggestors=1, inputs=0, facts=0))
    messages = [record.getMessage() for record in caplog.records if record.name == "converge"]
    assert messages == ["kept"]  # run_started is INFO, below the level the log was made with


def test_structlog_is_imported_on_the_first_line_logged_not_with_converge() -> None:
    """A command that reads the store never logs: it need not pay for structlog's import."""
    code = (
        "import sys, converge, converge.cli\n"
        "before = 'structlog' in sys.modules\n"
        "converge.get_logger(run_id='r').warning('x')\n"
        "print(before, 'structlog' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["False", "True"]
    assert "warning: x run_id=r" in done.stderr  # unconfigured: the last-resort line
