"""The library's logger: structlog events under fixed names, never configured by converge.

When the application has configured structlog, events go through its configuration. When it
has not, they go to the standard-library logger `"converge"` (which has a `NullHandler`), so
nothing is printed unless the application enables that logger.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

import structlog
from structlog.typing import FilteringBoundLogger

if TYPE_CHECKING:
    from ._events import EngineEvent

__all__ = ["EVENT_LEVELS", "LOGGER_NAME", "EventLog", "get_logger", "run_logger"]

LOGGER_NAME: Final = "converge"
_stdlib_logger: Final = logging.getLogger(LOGGER_NAME)
_stdlib_logger.addHandler(logging.NullHandler())


def run_logger(**bindings: object) -> FilteringBoundLogger:
    """A logger bound to `bindings`, following the application's configuration."""
    if structlog.is_configured():
        logger: FilteringBoundLogger = structlog.get_logger(LOGGER_NAME)
        return logger.bind(**bindings)
    level = _stdlib_logger.getEffectiveLevel()
    if not _stdlib_logger.isEnabledFor(level):  # logging.disable() is in force
        level = logging.CRITICAL + 10
    wrapped: FilteringBoundLogger = structlog.wrap_logger(
        _stdlib_logger,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[structlog.stdlib.render_to_log_kwargs],
    )
    return wrapped.bind(**bindings)


def get_logger(**bindings: object) -> FilteringBoundLogger:
    """The `"converge"` logger, bound to `bindings`, for suggestors that log like the engine.

    It follows the application's structlog configuration when there is one, and otherwise
    writes to the standard-library logger `"converge"`, which prints nothing by default.
    """
    return run_logger(**bindings)


EVENT_LEVELS: Final[dict[str, int]] = {
    "run_started": logging.INFO,
    "cycle_started": logging.DEBUG,
    "suggestor_failed": logging.WARNING,
    "suggestor_blocked": logging.WARNING,
    "gate_requested": logging.INFO,
    "gate_decided": logging.INFO,
    "invariant_violated": logging.WARNING,
    "cycle_finished": logging.DEBUG,
    "run_finished": logging.INFO,
}
"""The level each engine event is logged at, by its `type`. Per-fact and per-execution
events (`fact_promoted`, `proposal_rejected`, `suggestor_finished`) go to observers only."""


def _threshold(log: FilteringBoundLogger) -> int:
    """The lowest level `log` writes (0 when the logger cannot say, so nothing is lost)."""
    is_enabled_for = getattr(log, "is_enabled_for", None)
    if is_enabled_for is None:
        return 0
    for level in (logging.DEBUG, logging.INFO, logging.WARNING):
        if is_enabled_for(level):
            return level
    return logging.CRITICAL + 10


@final
class EventLog:
    """Logging as one consumer of a run's events: each event under its type, at its level.

    The event's fields become the log line's fields (the run id is bound once).
    """

    __slots__ = ("_log", "threshold")

    def __init__(self, log: FilteringBoundLogger) -> None:
        self._log = log
        self.threshold = _threshold(log)
        """The lowest level written; events below it need not be built for the log."""

    def write(self, event: EngineEvent) -> None:
        """Log `event` at its level, if the logger writes that level."""
        level = EVENT_LEVELS.get(event.type)
        if level is not None and level >= self.threshold:
            fields = event.model_dump(mode="json", exclude={"type", "run_id"})
            self._log.log(level, event.type, **fields)

    def warning(self, event: str, **fields: object) -> None:
        """A warning about the narration itself (an observer that failed)."""
        self._log.warning(event, **fields)
