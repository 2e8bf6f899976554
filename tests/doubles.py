"""Shared test doubles: proposal builders, and small suggestors and invariants.

Import them as `from tests.doubles import ...`, the way `tests.strategies` is imported.

The builders differ in how they validate:

- `proposal(**fields)` validates raw fields over defaults, so a field may hold any value,
  a wrong one included (for the validation and gate tests);
- `fact(key, ident, content, ...)` and `seed(ident, content, ...)` take typed options.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import anyio
import anyio.lowlevel

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    InvariantClass,
    InvariantResult,
    ProposedFact,
)

__all__ = [
    "FirstCycleOnly",
    "FirstCycleOnlyMode",
    "NoForbiddenContent",
    "NoForbiddenHypothesis",
    "ProposesOnce",
    "captured_cancellation",
    "fact",
    "proposal",
    "seed",
]

H = ContextKey.HYPOTHESES


# --- builders ---------------------------------------------------------------------------------


def proposal(**fields: object) -> ProposedFact:
    """`ProposedFact.model_validate` of `fields` over `seeds/ok`, content "c", provenance "p".

    Any field may be overridden with any value, so a bad value reaches validation as is.
    """
    base: dict[str, object] = {
        "key": ContextKey.SEEDS,
        "id": "ok",
        "content": "c",
        "provenance": "p",
    }
    return ProposedFact.model_validate(base | fields)


def fact(
    key: ContextKey,
    ident: str,
    content: str = "c",
    *,
    provenance: str = "t",
    payload: object = None,
    confidence: float = 1.0,
    target: ContextKey | None = None,
    evidence: Sequence[str] = (),
) -> ProposedFact:
    """A proposal under `key`; only the options given differ from the model's defaults.

    `payload` is any object: it is validated as JSON by `ProposedFact`.
    """
    fields: dict[str, object] = {
        "key": key,
        "id": ident,
        "content": content,
        "provenance": provenance,
    }
    if payload is not None:
        fields["payload"] = payload
    if confidence != 1.0:
        fields["confidence"] = confidence
    if target is not None:
        fields["target"] = target
    if evidence:
        fields["evidence"] = tuple(evidence)
    return ProposedFact.model_validate(fields)


def seed(
    ident: str,
    content: str = "c",
    *,
    provenance: str = "t",
    payload: object = None,
) -> ProposedFact:
    """A proposal under `seeds`: `fact(ContextKey.SEEDS, ident, content, ...)`."""
    return fact(ContextKey.SEEDS, ident, content, provenance=provenance, payload=payload)


# --- suggestors -------------------------------------------------------------------------------


class ProposesOnce:
    """Proposes its facts while one of them is absent; with `at`, only in cycle `at`."""

    def __init__(self, name: str, proposals: Sequence[ProposedFact], at: int | None = None):
        self.name = name
        self.dependencies: tuple[ContextKey, ...] = ()
        self.proposals = tuple(proposals)
        self.at = at

    def accepts(self, ctx: Context, /) -> bool:
        if self.at is not None and ctx.cycle != self.at - 1:
            return False
        return any(ctx.find(p.key, p.id) is None for p in self.proposals)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(self.proposals)


FirstCycleOnlyMode = Literal["ok", "fail", "hang"]


class FirstCycleOnly:
    """Runs only in the first cycle: fails, hangs (30 s), or proposes the given facts.

    Its effect reports 7 tokens; it declares `writes = (HYPOTHESES,)`.
    """

    def __init__(
        self, name: str, mode: FirstCycleOnlyMode, proposals: Sequence[ProposedFact] = ()
    ) -> None:
        self.name = name
        self.mode = mode
        self.proposals = tuple(proposals)
        self.dependencies: tuple[ContextKey, ...] = ()
        self.writes = (H,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        if self.mode == "fail":
            raise RuntimeError("model endpoint returned 503")
        if self.mode == "hang":
            await anyio.sleep(30)
        return AgentEffect.with_proposals(self.proposals, tokens=7)


# --- invariants -------------------------------------------------------------------------------


class NoForbiddenContent:
    """Structural `no-forbidden`: no hypothesis's content says 'forbidden'."""

    name = "no-forbidden"
    invariant_class = InvariantClass.STRUCTURAL

    def check(self, ctx: Context, /) -> InvariantResult:
        for f in ctx.get(H):
            if "forbidden" in f.content:
                return InvariantResult.violated(f"{f.ref} says forbidden")
        return InvariantResult.ok()


class NoForbiddenHypothesis:
    """Structural: `hypotheses/forbidden` must never exist (its proposer is rolled back)."""

    name = "no-forbidden-hypothesis"
    invariant_class = InvariantClass.STRUCTURAL

    def check(self, ctx: Context, /) -> InvariantResult:
        if ctx.find(H, "forbidden") is not None:
            return InvariantResult.violated("hypotheses/forbidden must never exist")
        return InvariantResult.ok()


async def captured_cancellation() -> BaseException:
    """A cancellation exception of the running backend that no longer cancels anything."""
    caught: list[BaseException] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class() as error:
            caught.append(error)
            raise
    return caught[0]
