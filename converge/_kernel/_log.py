"""The library's logger: structlog events under fixed names, never configured by converge.

When the application has configured structlog, events go through its configuration. When it
has not, they go to the standard-library logger `"converge"`. Its warnings (a failed call,
an invalid proposal, a violated invariant) are never silent: while no handler of the
application's would get them (none on `"converge"` or, as it propagates, on its parents), a
last-resort handler writes each on standard error as one line, as Python shows a warning
nobody handles. Any handler the application configures (`logging.basicConfig()`, or a
`NullHandler` on `"converge"`) replaces it; a level above `WARNING` silences it too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

from .._core._escape import visible

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from .._core._events import EngineEvent

__all__ = [
    "EVENT_LEVELS",
    "LOGGER_NAME",
    "EventLog",
    "LogLine",
    "get_logger",
    "run_logger",
    "warn",
]

LOGGER_NAME: Final = "converge"
_stdlib_logger: Final = logging.getLogger(LOGGER_NAME)

_RECORD_FIELDS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


@final
class LogLine(logging.Formatter):
    """`PREFIXwarning: EVENT key=value ...` for the engine's log lines, made visible."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self._prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        """One line: the level, the event, then the fields the engine logged with it."""
        fields = " ".join(
            f"{key}={visible(str(value))}"
            for key, value in vars(record).items()
            if key not in _RECORD_FIELDS and key not in ("message", "asctime")
        )
        line = f"{record.levelname.lower()}: {visible(record.getMessage())} {fields}".rstrip()
        return self._prefix + line


@final
class _LastResort(logging.Handler):
    """Writes a warning of `"converge"` on standard error while no other handler would get
    it: none on the record's logger or, while it propagates, on a parent (the rule by which
    Python's own `logging.lastResort` steps in, which this handler's presence would stop)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(LogLine(f"{LOGGER_NAME}: "))

    def handle(self, record: logging.LogRecord) -> bool:
        """Emit `record` unless a handler of the application's gets it."""
        if _handled_elsewhere(record, self):
            return False
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line on the current standard error (it may be replaced)."""
        stream = sys.stderr
        if stream is None:  # pythonw, a daemon: nowhere to write
            return
        try:
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def _handled_elsewhere(record: logging.LogRecord, own: logging.Handler) -> bool:
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(handler is not own for handler in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


_stdlib_logger.addHandler(_LastResort())


def _configured() -> bool:
    """Whether the application configured structlog (which it must have imported to).

    structlog is imported on the first line logged, not with converge: its import (with
    the `rich` it may pull in) costs a command that reads the store about 50 ms.
    """
    structlog = sys.modules.get("structlog")
    return structlog is not None and bool(structlog.is_configured())


def run_logger(**bindings: object) -> FilteringBoundLogger:
    """A logger bound to `bindings`, following the application's configuration."""
    if _configured():
        import structlog

        logger: FilteringBoundLogger = structlog.get_logger(LOGGER_NAME)
        return logger.bind(**bindings)
    return _stdlib_bound(_stdlib_level(), bindings)


def warn(logger: str, event: str, **fields: object) -> None:
    """Log the warning `event` with `fields` on structlog's logger `logger`."""
    import structlog

    structlog.get_logger(logger).warning(event, **fields)


def _stdlib_level() -> int:
    """The level the standard-library logger `"converge"` writes from, now, as one of the
    standard levels structlog's filtering loggers accept: a level of the application's own
    (25, say) becomes the standard one below it, and the standard-library logger still drops
    what lies between; `logging.disable()` in force becomes `CRITICAL`."""
    level = _stdlib_logger.getEffectiveLevel()
    if not _stdlib_logger.isEnabledFor(level):  # logging.disable() is in force
        return logging.CRITICAL
    return max(standard for standard in _STANDARD_LEVELS if standard <= level)


_STANDARD_LEVELS: Final = (
    logging.NOTSET,
    logging.DEBUG,
    logging.INFO,
    logging.WARNING,
    logging.ERROR,
    logging.CRITICAL,
)


def _stdlib_bound(level: int, bindings: dict[str, object]) -> FilteringBoundLogger:
    """A structlog logger over the standard-library `"converge"` logger, from `level` on."""
    import structlog

    wrapped: FilteringBoundLogger = structlog.wrap_logger(
        _stdlib_logger,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[structlog.stdlib.render_to_log_kwargs],
    )
    return wrapped.bind(**bindings)


def get_logger(**bindings: object) -> FilteringBoundLogger:
    """The `"converge"` logger, bound to `bindings`, for suggestors that log like the engine.

    It follows the application's structlog configuration when there is one, and otherwise
    writes to the standard-library logger `"converge"`, which prints its warnings on standard
    error, one line each, until the application configures a handler for them.
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


def _lowest(writes: Callable[[int], bool]) -> int:
    """The lowest of the engine's event levels a logger `writes`, or above them all."""
    for level in (logging.DEBUG, logging.INFO, logging.WARNING):
        if writes(level):
            return level
    return logging.CRITICAL + 10


def _threshold(log: FilteringBoundLogger) -> int:
    """The lowest level `log` writes (0 when the logger cannot say, so nothing is lost)."""
    is_enabled_for = getattr(log, "is_enabled_for", None)
    return 0 if is_enabled_for is None else _lowest(is_enabled_for)


def _stdlib_threshold(level: int) -> int:
    """`_threshold` of the logger `_stdlib_bound(level, ...)` builds, without building it."""
    return _lowest(level.__le__)


@final
class EventLog:
    """Logging as one consumer of a run's events: each event under its type, at its level.

    The event's fields become the log line's fields (`bindings`, the run id, bound once).
    Without a structlog configuration, the logger is built on the first line written, for
    the level the standard-library logger had when the log was made: a run that logs
    nothing (the default: `"converge"` writes from `WARNING`) never builds one, which spares
    it the memory structlog's code and objects take (about 130 pages, each paid for after a
    full collection).
    """

    __slots__ = ("_bindings", "_level", "_log", "threshold")

    def __init__(self, **bindings: object) -> None:
        self._bindings = bindings
        self._log: FilteringBoundLogger | None = None
        self._level = 0
        self.threshold: int
        """The lowest level written; events below it need not be built for the log."""
        if _configured():
            self._log = run_logger(**bindings)
            self.threshold = _threshold(self._log)
        else:
            self._level = _stdlib_level()
            self.threshold = _stdlib_threshold(self._level)

    def _logger(self) -> FilteringBoundLogger:
        log = self._log
        if log is None:
            log = self._log = _stdlib_bound(self._level, self._bindings)
        return log

    def write(self, event: EngineEvent) -> None:
        """Log `event` at its level, if the logger writes that level."""
        level = EVENT_LEVELS.get(event.type)
        if level is not None and level >= self.threshold:
            fields = event.model_dump(mode="json", exclude={"type", "run_id"})
            self._logger().log(level, event.type, **fields)

    def warning(self, event: str, **fields: object) -> None:
        """A warning about the narration itself (an observer that failed)."""
        self._logger().warning(event, **fields)
