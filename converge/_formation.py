"""`Formation`: a typed bundle of everything a run needs, runnable from code or the CLI."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from math import inf
from pathlib import Path
from typing import Final, TypedDict, TypeVar, Unpack, final

from ._core._budget import Budget
from ._core._context import ContextSnapshot
from ._core._error import ConfigurationError, UsageError
from ._core._events import Observer
from ._core._hitl import HitlPolicy
from ._core._invariant import Invariant
from ._core._proposal import ProposedFact
from ._core._result import ConvergeResult
from ._core._store import RunStore
from ._core._suggestor import Suggestor
from ._engine import Engine
from ._kernel._executor import ErrorMode
from ._kernel._gate import PromotionPolicy
from ._kernel._merge import ConflictMode
from ._kernel._retry import RetryPolicy
from ._kernel._sync import Backend, call_sync
from .stores._durable import Durability

__all__ = [
    "DEFAULT_SUGGESTOR_TIMEOUT",
    "EngineOptions",
    "Formation",
    "command_timeout",
    "load_formation",
    "locate",
]

DEFAULT_SUGGESTOR_TIMEOUT: Final = 300.0
"""Seconds one `execute` may take under the command line (`converge run`, `resume`, `batch`)
and in batches, when the formation sets no `suggestor_timeout`."""


class EngineOptions(TypedDict, total=False):
    """Keyword arguments of `Engine`, for `Formation.engine` overrides."""

    budget: Budget
    policy: PromotionPolicy
    max_concurrency: int | None
    suggestor_timeout: float | None
    on_conflict: ConflictMode
    on_suggestor_error: ErrorMode
    hitl: HitlPolicy | None
    clock: Callable[[], datetime] | None
    signing_key: bytes | str | None
    store: RunStore | None
    durability: Durability
    lease: float
    name: str | None
    formation: str | None
    observers: Sequence[Observer]
    record_effects: bool
    retry: RetryPolicy | None
    inputs: Iterable[ProposedFact]


@final
@dataclass(frozen=True, slots=True)
class Formation:
    """Suggestors, invariants, budget, HITL policy and inputs: one runnable formation.

    A formation file is a Python file or module with a module-level `formation`; the
    `converge` command runs it. Two suggestors with one name are refused when it is built
    (`ConfigurationError`, naming both). `engine()` builds a fresh engine with everything registered
    and the formation's inputs; `run()` and `run_sync()` run such an engine once.
    """

    name: str
    """A short name, shown by the command line."""
    suggestors: tuple[Suggestor, ...]
    """Registered in this order (which is also the merge order)."""
    description: str = ""
    """What it does, in a sentence or two."""
    invariants: tuple[Invariant, ...] = ()
    """Registered after the suggestors."""
    budget: Budget = field(default_factory=Budget)
    """The run's budget."""
    hitl: HitlPolicy | None = None
    """Which proposals wait for a human."""
    inputs: tuple[ProposedFact, ...] = ()
    """Merged at cycle 0 of each run of an engine built by `engine()`, unless the run is given
    `inputs=` (which replace them)."""
    record_effects: bool = True
    """Keep effects in the trace so the run can be replayed."""
    suggestor_timeout: float | None = None
    """Seconds one `execute` may take before the engine cancels it and records it as
    `"timed_out"` (`Engine`'s `suggestor_timeout`). `None`: no limit in runs from code, and
    300 s (`DEFAULT_SUGGESTOR_TIMEOUT`) under the command line and in batches; `math.inf`: no
    limit anywhere."""

    def __post_init__(self) -> None:
        """Refuse two suggestors with one name now, naming both, rather than at the run."""
        first: dict[str, int] = {}
        for index, suggestor in enumerate(self.suggestors):
            name: object = getattr(suggestor, "name", None)
            if not isinstance(name, str):
                continue  # registration says what is wrong with it
            seen = first.setdefault(str.__str__(name), index)
            if seen != index:
                earlier = type(self.suggestors[seen]).__name__
                raise ConfigurationError(
                    f"formation {self.name!r}: suggestors[{seen}] ({earlier}) and "
                    f"suggestors[{index}] ({type(suggestor).__name__}) are both named "
                    f"{name!r}; give each a name of its own"
                )

    def engine(self, **overrides: Unpack[EngineOptions]) -> Engine:
        """A new engine with this formation's settings and inputs (overridable) and registrations.

        Its `run`, `run_sync` and `stream` start with the formation's `inputs` when they are
        given no `inputs=`; given, those replace them (as does the override `inputs=`).
        """
        options: EngineOptions = {
            "name": self.name,
            "budget": self.budget,
            "hitl": self.hitl,
            "record_effects": self.record_effects,
            "inputs": self.inputs,
        }
        if self.suggestor_timeout is not None:
            options["suggestor_timeout"] = _limit(self.suggestor_timeout)
        options.update(overrides)
        engine = Engine(**options)
        for suggestor in self.suggestors:
            engine.register_suggestor(suggestor)
        for invariant in self.invariants:
            engine.register_invariant(invariant)
        return engine

    async def run(
        self, context: ContextSnapshot | None = None, **overrides: Unpack[EngineOptions]
    ) -> ConvergeResult:
        """Run the formation once on a fresh engine (`engine(**overrides)`), with its inputs.

        The override `inputs=` replaces the formation's inputs for this run.
        """
        return await self.engine(**overrides).run(context)

    def run_sync(
        self,
        context: ContextSnapshot | None = None,
        *,
        backend: Backend = "asyncio",
        **overrides: Unpack[EngineOptions],
    ) -> ConvergeResult:
        """`run` for scripts: starts an event loop on `backend` and runs the formation once.

        Raises:
            ConfigurationError: An event loop is already running here (in a formation file
                that `converge run` loads, say): `await run` instead, or let the command run
                the module-level `formation`.
        """
        return call_sync(backend, self.run, context, **overrides)


def command_timeout(formation: Formation) -> float | None:
    """The `suggestor_timeout` of `formation`'s engine under the command line and in batches:
    its own, or `DEFAULT_SUGGESTOR_TIMEOUT` when it sets none (`None` for `math.inf`)."""
    timeout = formation.suggestor_timeout
    return DEFAULT_SUGGESTOR_TIMEOUT if timeout is None else _limit(timeout)


def _limit(timeout: float) -> float | None:
    return None if timeout == inf else timeout


T = TypeVar("T")


def locate(locator: str) -> str:
    """The locator to store: an absolute path for a file, the module name otherwise."""
    path = Path(locator)
    return str(path.resolve()) if locator.endswith(".py") or path.exists() else locator


def load_formation(locator: str) -> Formation:
    """The `formation` of a Python file (a path) or of an importable module (a dotted name)."""
    path = Path(locator)
    if locator.endswith(".py") or path.exists():
        if not path.is_file():
            raise UsageError(f"no formation file at {locator}", "give a .py file or a module name")
        path = path.resolve()
        folder = str(path.parent)
        if folder not in sys.path:  # as `python file.py` would, so its sibling imports work
            sys.path.insert(0, folder)
        name = f"converge_formation_{abs(hash(path))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot load {locator} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader = spec.loader
        _loading(locator, lambda: loader.exec_module(module))
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:  # as `python -m` would
            sys.path.insert(0, os.getcwd())
        try:
            module = _loading(locator, lambda: importlib.import_module(locator))
        except ModuleNotFoundError as error:
            raise UsageError(
                f"cannot import {locator!r}: {error}",
                "give a path to a .py file, or a module on the Python path",
            ) from None
    formation: object = getattr(module, "formation", None)
    if not isinstance(formation, Formation):
        raise UsageError(
            f"{locator} has no module-level `formation` (a converge.Formation)",
            "define `formation = Formation(name=..., suggestors=(...))` in it",
        )
    return formation


def _loading(locator: str, load: Callable[[], T]) -> T:
    """`load()`, with a formation that calls `sys.exit` while it loads reported as an error."""
    try:
        return load()
    except SystemExit as leaving:
        code = leaving.code
        status = 0 if code is None else code if isinstance(code, int) else 1
        said = "" if code is None or isinstance(code, int) else f": {code}"
        raise UsageError(
            f"formation {locator} exited with status {status} while loading{said}"
        ) from None
