"""Context keys: the nine built-in `ContextKey`s, and `Key`s of your own, typed by a model.

A `Key` is a `str` (its name), like a `ContextKey` member, so every map the kernel keeps by
key holds either kind. Built-in keys come first in the Merkle order, in declaration order;
keys of your own follow, sorted by name (code point order). A process knows a key once its
`Key(...)` has run: stored facts, checkpoints and proposals name keys by their names, and a
name that is neither built in nor declared is refused.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from enum import StrEnum
from typing import Annotated, Final, Generic, Protocol, TypeVar, cast, final

from pydantic import (
    BaseModel,
    JsonValue,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
)

from ._error import ConfigurationError

__all__ = [
    "KEYS",
    "KEY_ORDER",
    "STORED",
    "AnyKey",
    "ContextKey",
    "Key",
    "KeyField",
    "KeyLike",
    "declared",
    "in_key_order",
    "key_named",
    "key_rank",
    "known_keys",
    "undeclared_names",
]

P_co = TypeVar("P_co", bound=BaseModel, covariant=True)


@final
class ContextKey(StrEnum):
    """Where a fact lives. The declaration order is the order used for hashing and display."""

    SEEDS = "seeds"
    """Starting facts: the problem statement, inputs from outside."""
    HYPOTHESES = "hypotheses"
    """Claims derived from other facts."""
    STRATEGIES = "strategies"
    """Plans and courses of action."""
    CONSTRAINTS = "constraints"
    """Rules and limits the result must respect."""
    SIGNALS = "signals"
    """Observations from the world."""
    COMPETITORS = "competitors"
    """Alternatives under comparison."""
    EVALUATIONS = "evaluations"
    """Scores and judgements of other facts."""
    PROPOSALS = "proposals"
    """Staged proposals awaiting validation; each names a `target` key."""
    DIAGNOSTIC = "diagnostic"
    """Notes about the run itself: rejections, failures, decisions."""

    def __truediv__(self, ident: str) -> str:
        """`ContextKey.SEEDS / "goal"` is the fact reference `"seeds/goal"`."""
        return f"{self.value}/{ident}"


KEY_ORDER: Final[dict[str, int]] = {key: index for index, key in enumerate(ContextKey)}
"""The position of each built-in key in declaration order."""

KEYS: Final[tuple[ContextKey, ...]] = tuple(ContextKey)
"""Every built-in key in declaration order (iterating a tuple is much cheaper than the enum)."""


class _FactView(Protocol):
    """What `Key.of` reads of a fact (a `Fact` has it)."""

    @property
    def key(self) -> str:
        """The key the fact lives under."""
        ...

    @property
    def ref(self) -> str:
        """Its `"key/id"` reference."""
        ...

    @property
    def payload(self) -> JsonValue | None:
        """Its payload, JSON."""
        ...


class _ContextView(Protocol):
    """What `Key.read` reads of a context (every `Context` has it)."""

    def get(self, key: ContextKey | Key[BaseModel], /) -> Sequence[_FactView]:
        """The facts under `key`."""
        ...


_NAME: Final = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_DECLARED: dict[str, Key[BaseModel]] = {}


@final
class Key(str, Generic[P_co]):
    """A context key of your own, whose facts carry a payload of one pydantic model.

    `BIDS = Key("bids", payload=Bid)` declares it, once per process: two keys with one name
    and different models are a `ConfigurationError` (the same model class, or one with the
    same name and JSON schema from a module run twice, declares the same key again).

    Use it wherever a `ContextKey` goes. The engine gate rejects a proposal under it whose
    payload does not validate as `Bid`; `BIDS.of(fact)` and `BIDS.read(ctx)` give the
    payloads back as `Bid` instances, statically typed; `BIDS / "acme"` is the reference
    `"bids/acme"`.

    `name` is lower-case letters, digits, `_`, `-` and `.`, starting with a letter, at most
    64 characters, and not the name of a built-in key; `payload` is a frozen pydantic model
    (`model_config = ConfigDict(frozen=True)`).

    Raises:
        ConfigurationError: The name is malformed, built in, or declared with another model;
            or the model is not a frozen pydantic model.
    """

    payload: type[P_co]
    """The model every payload under this key validates as."""

    def __new__(cls, name: str, *, payload: type[P_co]) -> Key[P_co]:
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"key name {name!r}: use 1-64 lower-case letters, digits, '_', '-' or '.', "
                "starting with a letter"
            )
        if name in ContextKey._value2member_map_:
            raise ConfigurationError(f"key name {name!r} is the name of a built-in ContextKey")
        if not (isinstance(payload, type) and issubclass(payload, BaseModel)):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"key {name!r}: payload must be a pydantic model class")
        if not payload.model_config.get("frozen"):
            raise ConfigurationError(
                f"key {name!r}: payload model {payload.__qualname__} must be frozen "
                "(model_config = ConfigDict(frozen=True)), so that payloads read back are immutable"
            )
        known = _DECLARED.get(name)
        if known is not None and known.payload is payload:
            return cast("Key[P_co]", known)  # declared again (a module run twice): the same key
        if known is not None and not _same_model(known.payload, payload):
            raise ConfigurationError(
                f"two keys named {name!r}: one for {_model_name(known.payload)}, one for "
                f"{_model_name(payload)}"
            )
        key = str.__new__(cls, name)
        key.payload = payload
        _DECLARED[name] = key
        return key

    @property
    def value(self) -> str:
        """The key's name, as `ContextKey.value` is."""
        return str.__str__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Key({str.__repr__(self)}, payload={self.payload.__qualname__})"

    def __truediv__(self, ident: str) -> str:
        """`BIDS / "acme"` is the fact reference `"bids/acme"`."""
        return f"{str.__str__(self)}/{ident}"

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return key_named, (str.__str__(self),)

    def of(self, fact: _FactView) -> P_co:
        """`fact`'s payload as this key's model.

        Raises:
            ValueError: `fact` lives under another key.
        """
        if fact.key != self:
            raise ValueError(f"fact {fact.ref} is not under key {self.value!r}")
        return self.payload.model_validate(fact.payload)

    def read(self, ctx: _ContextView) -> tuple[P_co, ...]:
        """The payloads of every fact under this key in `ctx`, in insertion order."""
        return tuple([self.of(fact) for fact in ctx.get(self)])


def _model_name(model: type[BaseModel]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def _same_model(known: type[BaseModel], given: type[BaseModel]) -> bool:
    """Whether `given` is `known` declared again: the same class name and JSON schema (a
    module run twice, under two names, declares its keys twice)."""
    if known.__qualname__ != given.__qualname__:
        return False
    return known.model_json_schema() == given.model_json_schema()


AnyKey = ContextKey | Key[BaseModel]
"""A built-in key or one of your own."""

KeyLike = AnyKey | str
"""A key, or the name of one (resolved with `key_named`)."""


def key_named(name: str) -> AnyKey:
    """The built-in or declared key called `name`.

    Raises:
        ValueError: No such key is built in or declared in this process.
    """
    if isinstance(name, ContextKey):
        return name
    if isinstance(name, Key):
        return cast("Key[BaseModel]", name)
    built_in = ContextKey._value2member_map_.get(name)
    if built_in is not None:
        return cast("ContextKey", built_in)  # the member itself: ContextKey(...) costs 5 µs
    found = _DECLARED.get(name)
    if found is None:
        raise ValueError(
            f"unknown context key {name!r}: not a built-in key, and no Key({name!r}, "
            "payload=...) is declared in this process (import the module that declares it)"
        )
    return found


def known_keys() -> tuple[AnyKey, ...]:
    """Every built-in key and every key declared in this process so far, in key order."""
    return (*KEYS, *sorted(_DECLARED.values(), key=str.__str__))


class _Undeclared(BaseModel, frozen=True, extra="allow"):
    """The model of a key a stored run names but this process has not declared."""


_UNDECLARED: dict[str, Key[BaseModel]] = {}

STORED: Final = {"converge.stored": True}
"""Validation context for reading stored runs: a key name no one declared is kept as an
undeclared key (the record can be shown and verified); the engine refuses to run on one."""


def _undeclared(name: str) -> Key[BaseModel]:
    """The placeholder of a key named in stored data that this process has not declared."""
    known = _UNDECLARED.get(name)
    if known is None:
        if _NAME.fullmatch(name) is None:
            raise ValueError(f"{name!r} is not a key name")
        made = cast("Key[BaseModel]", str.__new__(Key, name))
        made.payload = _Undeclared
        _UNDECLARED[name] = known = made
    return known


def declared(key: AnyKey) -> bool:
    """Whether `key` is built in or declared here (not a name read from a stored run only)."""
    return isinstance(key, ContextKey) or key.payload is not _Undeclared


def undeclared_names(keys: Iterable[AnyKey | None]) -> list[str]:
    """The names among `keys` that this process has not declared, sorted, without repeats."""
    return sorted({str.__str__(k) for k in keys if k is not None and not declared(k)})


def _validate(value: object, info: ValidationInfo) -> AnyKey:
    if isinstance(value, str):
        try:
            return key_named(value)
        except ValueError:
            context: object = info.context
            if isinstance(context, dict) and cast("dict[str, object]", context).get(
                "converge.stored"
            ):
                return _undeclared(value)
            raise
    raise ValueError(
        f"a context key is a ContextKey, a Key or a key name, not {type(value).__name__}"
    )


KeyField = Annotated[
    AnyKey,
    PlainValidator(_validate, json_schema_input_type=str),
    PlainSerializer(str.__str__, return_type=str),
    WithJsonSchema({"type": "string"}),
]
"""A model field holding a key: validated from a key or its name, serialized as the name."""


def key_rank(key: AnyKey) -> tuple[int, str]:
    """Where `key` sorts: built-in keys in declaration order, then the others by name."""
    index = KEY_ORDER.get(key)
    return (len(KEYS), str.__str__(key)) if index is None else (index, "")


def in_key_order(keys: Collection[AnyKey]) -> tuple[AnyKey, ...]:
    """`keys` sorted in key order (`key_rank`), without duplicates."""
    if len(keys) == 1:
        return tuple(keys)
    if all(type(key) is ContextKey for key in keys):
        return tuple([key for key in KEYS if key in keys])
    return tuple(sorted(set(keys), key=key_rank))


def resolve_keys(keys: Sequence[KeyLike]) -> tuple[AnyKey, ...]:
    """Each of `keys` as a key (names resolved with `key_named`)."""
    return tuple([key_named(key) for key in keys])
