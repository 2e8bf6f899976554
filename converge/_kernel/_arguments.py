"""Checks of what callers give `Engine`: its settings, a run's start, and inputs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._core._context import ContextSnapshot
from .._core._events import Observer, wanted
from .._core._exceptions import ConfigurationError
from .._core._proposal import ProposedFact
from .._core._text import identity_problem

__all__ = ["check_label", "check_settings", "checked_inputs", "checked_start"]


def check_label(what: str, value: str | None) -> None:
    """Raise `ConfigurationError` when `value` (a run id, a formation's name or location)
    cannot be stored as a name (`_text.identity_problem`)."""
    if value is None or not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        return
    problem = identity_problem(value)
    if problem is not None:
        raise ConfigurationError(f"{what} {value!r} {problem}")


def check_settings(
    observers: Sequence[Observer],
    max_concurrency: int | None,
    suggestor_timeout: float | None,
    on_conflict: str,
    on_suggestor_error: str,
) -> None:
    """Raise `ConfigurationError` for the first setting of `Engine(...)` that is wrong."""
    for index, observer in enumerate(observers):
        if not callable(getattr(observer, "on_event", None)):
            raise ConfigurationError(
                f"observers[{index}] ({type(observer).__name__}) has no on_event method"
            )
        try:
            wanted(observer)
        except ValueError as error:
            raise ConfigurationError(
                f"observers[{index}] ({type(observer).__name__}): {error}"
            ) from None
    if max_concurrency is not None and max_concurrency < 1:
        raise ConfigurationError(f"max_concurrency must be at least 1, got {max_concurrency}")
    if suggestor_timeout is not None and not suggestor_timeout > 0:
        raise ConfigurationError(f"suggestor_timeout must be positive, got {suggestor_timeout}")
    if on_conflict not in ("stop", "reject"):
        raise ConfigurationError(f"on_conflict must be 'stop' or 'reject', got {on_conflict!r}")
    if on_suggestor_error not in ("isolate", "raise"):
        raise ConfigurationError(
            f"on_suggestor_error must be 'isolate' or 'raise', got {on_suggestor_error!r}"
        )


def checked_start(context: ContextSnapshot | None, run_id: str | None) -> ContextSnapshot:
    """The context a run starts from (empty for `None`), once it and `run_id` are checked."""
    start = ContextSnapshot.empty() if context is None else context
    if not isinstance(start, ContextSnapshot):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(f"context must be a ContextSnapshot, got {type(start).__name__}")
    if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(f"run_id must be a non-blank str, got {run_id!r}")
    check_label("run_id", run_id)
    return start


def checked_inputs(inputs: Iterable[ProposedFact]) -> tuple[ProposedFact, ...]:
    """`inputs` as a tuple, each checked to be a `ProposedFact`."""
    given = tuple(inputs)
    for index, item in enumerate(given):
        if not isinstance(item, ProposedFact):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"inputs[{index}] must be a ProposedFact, got {type(item).__name__}"
            )
    return given
