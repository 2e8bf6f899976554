"""`Lineage`: where a fork came from, and what it changed there.

A fork's record names its parent run, the cycle it was forked at and the parent's Merkle
root at the end of that cycle, with the parent's Lamport clock there. Every fact the fork
kept from its parent has a clock at most that clock, every fact it added a later one, so
the fork's context before its changes can be rebuilt from the fork's own record (plus the
facts it retracted, kept here) and checked against `parent_root`.
"""

from __future__ import annotations

from typing import Literal, final

from pydantic import Field

from ._checkpoint import FactRecord
from ._model import FrozenModel

__all__ = ["ForkKind", "Lineage"]

ForkKind = Literal["fork", "replay"]
"""How a run was branched off: `"fork"` rebuilt the parent's context from its stored facts;
`"replay"` re-merged the parent's recorded effects up to the cycle (the root checked)."""


@final
class Lineage(FrozenModel, frozen=True):
    """Where a forked run branched off its parent, recorded in its trace and signed with it."""

    parent_run_id: str
    """The run it was forked from."""
    at_cycle: int = Field(ge=0)
    """The parent's cycle it was forked at: the context at the end of that cycle (0: the
    inputs only)."""
    parent_root: str
    """The Merkle root of the parent's context at the end of `at_cycle`."""
    parent_clock: int = Field(ge=0)
    """The parent's Lamport clock there: every fact kept from the parent has a clock at most
    this, every fact the fork promoted a later one."""
    parent_tokens: int = Field(default=0, ge=0)
    """The tokens the parent had spent by then (the fork's token budget counts them)."""
    retracted: tuple[FactRecord, ...] = ()
    """The parent's facts removed at the fork (with `cascade`, those whose evidence reached
    a removed one too), in key then insertion order."""
    kind: ForkKind = "fork"
    """How the fork's past was rebuilt."""

    @property
    def retracted_refs(self) -> tuple[str, ...]:
        """`"key/id"` of the retracted facts."""
        return tuple(f"{fact.key}/{fact.id}" for fact in self.retracted)
