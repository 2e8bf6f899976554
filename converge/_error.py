"""`ConvergeError`: the root of every error converge raises (the tree is in `_exceptions`)."""

from __future__ import annotations

__all__ = ["ConvergeError"]


class ConvergeError(Exception):
    """The root of every error converge raises."""
