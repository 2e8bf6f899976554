"""What a console serves and how: its settings, checked when the console is built.

A console reads one store and admits the reviewers it is given; the rest (the formation to
resume with, the origin behind a TLS proxy, how often a live page reads the store) has
defaults that suit a console on the reviewer's own machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import final

from .._core._store import RunStore
from ._auth import Reviewers
from ._origin import Origin
from ._sessions import Sessions

__all__ = ["ConsoleSettings"]


@final
@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """What a console serves and how: the store, who may review, and where formations live."""

    store: RunStore
    reviewers: Reviewers
    formation: str | None = None
    """The formation to resume runs with; by default the one each stored run names."""
    store_argument: str = ""
    """`--store ...` for the commands the pages print (`""`: the default store)."""
    poll_seconds: float = 0.5
    """How often a live run page's event stream reads the store."""
    limit: int = 200
    """How many of the newest runs the runs list reads."""
    sessions: Sessions = field(default_factory=Sessions)
    """The signed-in browsers and one-time links (`Sessions.link` makes one to print)."""
    origin: str | None = None
    """The console's public origin behind a TLS proxy (`https://review.example.com`); by
    default the address and port it is bound to."""
    trust_unsigned: bool = False
    """Import the formation a record names although no signing key authenticates it."""

    def __post_init__(self) -> None:
        if self.origin is not None:
            Origin.parse(self.origin)  # refuse a bad origin when the console is built
