"""The private base of every data class, and trusted construction for kernel-built records."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final, NoReturn, TypeVar, final

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Fields",
    "FrozenModel",
    "set_dict",
    "share_names",
    "share_state",
    "trusted",
    "trusted_builder",
]

ModelT = TypeVar("ModelT", bound=BaseModel)


class FrozenModel(BaseModel, frozen=True):
    """Frozen, strict, closed: unknown fields are errors, nothing changes after construction.

    Each class builds its validator and serialiser on first use, not when it is defined
    (`defer_build`): a command that reads a store uses a few of the library's models, and
    building all of them took a tenth of `import converge` (25 ms of 0.25 s).
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True, extra="forbid", strict=True, defer_build=True
    )


def _read_only(*_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError("a record's set of field names is shared and read-only; copy it to change it")


@final
class _NameSet(set[str]):
    """The field names pydantic reads as "set" on a model, shared by every record of a class.

    One read-only set for all: a set per record would cost a few hundred bytes and a build
    each. A copy (what `model_copy` takes) is a plain, private `set`.
    """

    __slots__ = ()

    __init__ = _read_only
    add = _read_only
    discard = _read_only
    remove = _read_only
    pop = _read_only
    clear = _read_only
    update = _read_only
    difference_update = _read_only
    intersection_update = _read_only
    symmetric_difference_update = _read_only
    __ior__ = _read_only
    __iand__ = _read_only
    __isub__ = _read_only
    __ixor__ = _read_only

    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, memo: dict[int, object] | None = None) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[type[set[str]], tuple[list[str]]]:
        return (set, (list(self),))


def _names(names: Iterable[str]) -> _NameSet:
    shared = set.__new__(_NameSet)
    set[str].update(shared, names)
    return shared


_new = object.__new__


class Fields:
    """The fields of a record the kernel builds for every fact, set as the attributes of an
    instance of a subclass, then handed to `trusted` as the record's `__dict__` (`values`).

    CPython shares one table of keys between the `__dict__`s of a class's instances whose
    attributes are set in the same order (key-sharing dictionaries, PEP 412): each holds
    only its values. Ten fields take about 170 bytes where a `{...}` display takes 280, and
    they are set about as fast. A run saved as rows keeps a `FactRecord` and its
    `PromotionRecord` of every fact until its end: 21 MB less at 100,000 facts. The
    `__dict__` is a plain `dict` to every reader, so a record reads, compares, copies,
    pickles and dumps as any other. A subclass sets every attribute, always in one order:
    otherwise CPython builds ordinary dicts, bigger but as correct.
    """

    def values(self) -> dict[str, object]:
        """The attributes set, in the order set: the record's `__dict__`."""
        return self.__dict__


# The slots of every pydantic model, written through their descriptors (no lookup by name).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def trusted(cls: type[ModelT], fields: dict[str, object]) -> ModelT:
    """Build a model from values the kernel itself produced, skipping re-validation.

    `fields` must hold every field of `cls` with a value of the declared type. This is
    `model_construct` without its per-field default handling, several times faster, and used
    only on the hot path for records the kernel creates (facts, executions, cycle traces).
    Every record of a class shares one read-only set of field names as its "fields set".
    `object.__new__` builds the instance, so a class that refuses `__new__` (`Fact`) works.
    """
    build = _builders.get(cls)
    if build is None:
        build = trusted_builder(cls)
    return build(fields)


def trusted_builder(cls: type[ModelT]) -> Callable[[dict[str, object]], ModelT]:
    """`trusted` for one class, its field names looked up once (for the hottest records).

    One builder per class, shared with `trusted`, so a class has one set of field names.
    """
    build = _builders.get(cls)
    if build is not None:
        return build
    names = _names(cls.model_fields)
    count = len(names)

    def build_new(fields: dict[str, object]) -> ModelT:
        instance = _new(cls)
        _set_dict(instance, fields)
        _set_fields_set(instance, names if len(fields) == count else set(fields))
        _set_extra(instance, None)
        _set_private(instance, None)
        return instance

    _builders[cls] = build_new
    return build_new


_builders: dict[type[BaseModel], Callable[[dict[str, object]], Any]] = {}


def share_names(record: BaseModel) -> None:
    """Give `record` the shared read-only set of the field names it has set, in place of its own.

    For records a run keeps that the kernel did not build (the proposals a recorded trace
    holds): pydantic gives each its own set of the names set, and a set of five names takes
    728 bytes, more than half of what a kept proposal costs. The names stay the same, so
    `model_fields_set`, `model_dump(exclude_unset=True)` and copies read as before; only
    changing the set in place is refused.
    """
    names = record.__pydantic_fields_set__
    if type(names) is _NameSet:
        return
    key = frozenset(names)
    shared = _shared.get(key)
    if shared is None:
        shared = _shared.setdefault(key, _names(key))
    _set_fields_set(record, shared)


_shared: dict[frozenset[str], _NameSet] = {}
"""One shared set per combination of names (at most one per subset of a class's fields)."""


def _constant(value: object) -> property:
    return property(lambda _record: value, doc="The same for every record of the class.")


set_dict: Final = _set_dict
"""Write a model's `__dict__` slot (through its descriptor, no lookup by name). With
`object.__new__`, all a record of a class `share_state` prepared needs."""


def share_state(cls: type[BaseModel]) -> None:
    """Make `cls` answer for pydantic's per-record state, so a record of it is built with its
    `__dict__` alone (`object.__new__`, then `set_dict`).

    pydantic keeps three slots on every record besides its `__dict__`: the names of the fields
    set, the extra fields and the private attributes. For a class whose every record has
    every field set, no extra field and no private attribute, `cls` answers for all three,
    through read-only properties that shadow the slots: three slot writes fewer per record,
    and none can be written later either (`object.__setattr__` finds the property). Only for
    a class whose validation, construction and copies are all refused (`Fact`): pydantic's
    own routes would write the slots through the properties, and fail.
    """
    shared = {
        "__pydantic_fields_set__": _names(cls.model_fields),
        "__pydantic_extra__": None,
        "__pydantic_private__": None,
    }
    for name, value in shared.items():
        type.__setattr__(cls, name, _constant(value))
