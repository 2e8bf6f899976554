"""`Engine`: registrations, settings, and the entry points of a run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, final

import anyio

from ._budget import Budget
from ._context import ContextSnapshot
from ._exceptions import ConfigurationError
from ._executor import ErrorMode
from ._merge import ConflictMode
from ._promotion import PromotionPolicy
from ._proposal import ProposedFact
from ._registry import Registry
from ._result import ConvergeResult
from ._run import RunConfig, RunLoop
from ._suggestor import Suggestor, SuggestorId

__all__ = ["Engine"]


@final
class Engine:
    """Runs registered suggestors to a fixed point, a budget, a conflict or a human decision.

    Args:
        budget: Limits on each run.
        policy: Limits of the engine gate.
        max_concurrency: Most suggestors executing at once in a cycle (`None`: all eligible).
        suggestor_timeout: Seconds one `execute` may take before it is cancelled and recorded
            as `"timed_out"` (`None`: no limit).
        on_conflict: `"stop"` ends the run with `CONFLICT` when a proposal contradicts a fact;
            `"reject"` records a rejection and goes on.
        on_suggestor_error: `"isolate"` records a failing `accepts`/`execute` and goes on;
            `"raise"` re-raises the exception from `run`.
    """

    def __init__(
        self,
        *,
        budget: Budget | None = None,
        policy: PromotionPolicy | None = None,
        max_concurrency: int | None = None,
        suggestor_timeout: float | None = None,
        on_conflict: ConflictMode = "stop",
        on_suggestor_error: ErrorMode = "isolate",
    ) -> None:
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
        self._config = RunConfig(
            budget=budget or Budget(),
            policy=policy or PromotionPolicy(),
            on_conflict=on_conflict,
            on_suggestor_error=on_suggestor_error,
            max_concurrency=max_concurrency,
            suggestor_timeout=suggestor_timeout,
        )
        self._registry = Registry()

    def __repr__(self) -> str:
        return f"Engine(suggestors={len(self._registry.names)}, budget={self._config.budget!r})"

    @property
    def budget(self) -> Budget:
        """The budget each run is held to."""
        return self._config.budget

    @property
    def suggestor_names(self) -> tuple[str, ...]:
        """Registered suggestor names, in registration (and merge) order."""
        return self._registry.names

    def register_suggestor(self, suggestor: Suggestor, /) -> SuggestorId:
        """Register a suggestor, always active; returns its id (0, 1, 2, ... in order).

        Raises:
            ConfigurationError: It does not satisfy `Suggestor` (the message names the missing
                member), or its name is already taken.
        """
        return self._registry.add(suggestor, None)

    def register_suggestor_in_pack(self, pack_id: str, suggestor: Suggestor, /) -> SuggestorId:
        """Register a suggestor that runs only while `pack_id` is active (all packs are by default).

        Raises:
            ConfigurationError: As for `register_suggestor`, or `pack_id` is blank.
        """
        return self._registry.add(suggestor, pack_id)

    def set_active_packs(self, pack_ids: Iterable[str] | None, /) -> None:
        """Run only the suggestors of these packs (plus those registered without a pack).

        `None` makes every pack active again.

        Raises:
            ConfigurationError: A pack id was never registered.
        """
        self._registry.set_active(pack_ids)

    async def run(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] = (),
    ) -> ConvergeResult:
        """Run to a stop reason, starting from `context` (empty by default) plus `inputs`.

        Inputs are merged at cycle 0 by the pseudo-suggestor `"input"`, through the gate.
        A stopped run returns its last consistent snapshot; caller cancellation propagates.

        Raises:
            ConfigurationError: `context` is not a `ContextSnapshot`, or an input is not a
                `ProposedFact`.
        """
        start = ContextSnapshot.empty() if context is None else context
        if not isinstance(start, ContextSnapshot):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"context must be a ContextSnapshot, got {type(start).__name__}"
            )
        given = tuple(inputs)
        for index, item in enumerate(given):
            if not isinstance(item, ProposedFact):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError(
                    f"inputs[{index}] must be a ProposedFact, got {type(item).__name__}"
                )
        loop = RunLoop(self._config, self._registry.view())
        return await loop.run(start._at_cycle(0), given)  # pyright: ignore[reportPrivateUsage]

    def run_sync(
        self,
        context: ContextSnapshot | None = None,
        *,
        inputs: Iterable[ProposedFact] = (),
        backend: Literal["asyncio", "trio"] = "asyncio",
    ) -> ConvergeResult:
        """`run` for scripts: starts an event loop on `backend` and runs to a stop reason."""
        given = tuple(inputs)

        async def main() -> ConvergeResult:
            return await self.run(context, inputs=given)

        return anyio.run(main, backend=backend)
