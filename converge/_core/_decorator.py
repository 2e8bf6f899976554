"""`@suggestor`: turn an async function into a conforming suggestor."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import final

from ._context import Context
from ._effect import AgentEffect
from ._exceptions import ConfigurationError
from ._key import KeyLike
from ._proposal import ProposedFact
from ._suggestor import normalise_keys

__all__ = ["FunctionSuggestor", "SuggestorFunction", "suggestor"]

SuggestorFunction = Callable[[Context], Awaitable[AgentEffect | Iterable[ProposedFact]]]
"""An async function from a context to an effect or to proposals."""


def _always(_ctx: Context, /) -> bool:
    return True


@final
class FunctionSuggestor:
    """A suggestor made from an async function by [`suggestor`][converge.suggestor]."""

    __slots__ = ("_accepts", "_dependencies", "_function", "_name", "_writes")

    def __init__(
        self,
        function: SuggestorFunction,
        *,
        name: str,
        dependencies: Sequence[KeyLike] = (),
        accepts: Callable[[Context], bool] | None = None,
        writes: Sequence[KeyLike] | None = None,
    ) -> None:
        if not callable(function):
            raise ConfigurationError(f"suggestor {name!r}: the decorated object is not callable")
        self._function = function
        self._name = name
        self._dependencies = normalise_keys(dependencies, owner=name, member="dependencies")
        self._accepts = _always if accepts is None else accepts
        self._writes = (
            None if writes is None else normalise_keys(writes, owner=name, member="writes")
        )

    def __repr__(self) -> str:
        return f"FunctionSuggestor({self._name!r})"

    @property
    def name(self) -> str:
        """The name given to the decorator."""
        return self._name

    @property
    def dependencies(self) -> Sequence[KeyLike]:
        """The keys given to the decorator."""
        return self._dependencies

    @property
    def writes(self) -> Sequence[KeyLike] | None:
        """The keys it may write, or `None` for any."""
        return self._writes

    def accepts(self, ctx: Context, /) -> bool:
        """The `accepts` given to the decorator; always true without one."""
        return self._accepts(ctx)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Call the function; wrap proposals it returns into an effect."""
        result = await self._function(ctx)
        if isinstance(result, AgentEffect):
            return result
        return AgentEffect.with_proposals(result)


def suggestor(
    *,
    name: str,
    dependencies: Sequence[KeyLike] = (),
    accepts: Callable[[Context], bool] | None = None,
    writes: Sequence[KeyLike] | None = None,
) -> Callable[[SuggestorFunction], FunctionSuggestor]:
    """Turn `async def f(ctx) -> AgentEffect | Iterable[ProposedFact]` into a suggestor.

    Without `accepts` it is always willing; the loop still converges because identical
    re-proposals change nothing.

    ```python
    @suggestor(name="greeter", dependencies=[ContextKey.SEEDS])
    async def greeter(ctx: Context) -> list[ProposedFact]:
        hello = ProposedFact(key=ContextKey.HYPOTHESES, id="hi", content="hi", provenance="me")
        return [hello]
    ```
    """

    def decorate(function: SuggestorFunction) -> FunctionSuggestor:
        return FunctionSuggestor(
            function, name=name, dependencies=dependencies, accepts=accepts, writes=writes
        )

    return decorate
