"""Public names report their public path, as httpx's and trio's do.

`repr(converge.Engine)` is `<class 'converge.Engine'>`, not the private module the class
happens to live in: moving a file changes neither what users see in tracebacks nor what
pickles of the library's objects name. pickle finds each class under its public path, and
pydantic keeps the namespace a model's annotations were written in, so deferred annotations
still resolve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import FunctionType

__all__ = ["publish"]


def publish(package: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Give each class and function of `names` in `namespace` the module `package`, when it
    is defined in a private module of the library (one with a `_` part: `converge._x`)."""
    root = package.partition(".")[0]
    for name in names:
        value = namespace[name]
        if not isinstance(value, type | FunctionType):
            continue
        parts = value.__module__.split(".")
        if parts[0] == root and any(part.startswith("_") for part in parts[1:]):
            value.__module__ = package
