"""`ConvergeError`, the root of every error converge raises, and `ConfigurationError`, which
the lowest modules raise too (the whole tree is in `_exceptions`)."""

from __future__ import annotations

__all__ = ["ConfigurationError", "ConvergeError"]


class ConvergeError(Exception):
    """The root of every error converge raises."""


class ConfigurationError(ConvergeError, ValueError):
    """The engine or a registration is set up wrongly; raised before anything runs."""
