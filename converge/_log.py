"""The library's logger: structlog events under fixed names, never configured by converge.

When the application has configured structlog, events go through its configuration. When it
has not, they go to the standard-library logger `"converge"` (which has a `NullHandler`), so
nothing is printed unless the application enables that logger.
"""

from __future__ import annotations

import logging
from typing import Final

import structlog
from structlog.typing import FilteringBoundLogger

__all__ = ["LOGGER_NAME", "get_logger", "run_logger"]

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
