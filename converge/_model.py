"""The private base of every data class, and trusted construction for kernel-built records."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = ["FrozenModel", "trusted"]

ModelT = TypeVar("ModelT", bound=BaseModel)


class FrozenModel(BaseModel, frozen=True):
    """Frozen, strict, closed: unknown fields are errors, nothing changes after construction."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid", strict=True)


_new = object.__new__
_set = object.__setattr__


def trusted(cls: type[ModelT], fields: dict[str, object]) -> ModelT:
    """Build a model from values the kernel itself produced, skipping re-validation.

    `fields` must hold every field of `cls` with a value of the declared type. This is
    `model_construct` without its per-field default handling, several times faster, and used
    only on the hot path for records the kernel creates (facts, executions, cycle traces).
    """
    instance = _new(cls)
    _set(instance, "__dict__", fields)
    _set(instance, "__pydantic_fields_set__", set(fields))
    _set(instance, "__pydantic_extra__", None)
    _set(instance, "__pydantic_private__", None)
    return instance
