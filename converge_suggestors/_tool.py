"""`Tool`: a typed Python function a model may call, and the action keys and their payloads.

A tool's arguments are the function's parameters, described by pydantic: the JSON schema the
model is shown is generated from them, and every call the model makes is validated against
them before anything runs. A *read* tool runs inside the suggestor that offers it; an
*action* never does: its call becomes a proposal under `ACTIONS`, and `ActionRunner` runs it
once it is a fact.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, Literal, cast, final, get_type_hints

import anyio
import anyio.to_thread
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic_core import to_jsonable_python

from converge import Key

from ._chat import ToolSpec

__all__ = [
    "ACTIONS",
    "ACTION_RESULTS",
    "ActionOutcome",
    "ActionRequest",
    "Tool",
    "ToolKind",
    "arguments_digest",
    "canonical_arguments",
]

ToolKind = Literal["read", "action"]
"""`"read"`: looks something up, runs inside the suggestor; `"action"`: changes the world,
runs only once promoted, through `ActionRunner`."""

REASON: Final = "reason"
"""The member of an action call's arguments that holds the model's reason."""
IDEMPOTENCY_PARAMETER: Final = "idempotency_key"
"""The keyword argument an action's function takes: the same for every run of one action."""
_NAME: Final = r"^[A-Za-z0-9_-]{1,64}$"
_JSON: Final = TypeAdapter[JsonValue](JsonValue)


class _Arguments(BaseModel):
    """The base of every tool's arguments model: closed, so an unknown argument is refused."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")


@final
class ActionRequest(BaseModel, frozen=True):
    """The payload of an `ACTIONS` fact: one call of an action, as the reviewer approves it."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(pattern=_NAME)
    """The action's tool name."""
    arguments: dict[str, JsonValue]
    """The arguments, validated and as they will be passed (byte for byte, canonically)."""
    arguments_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the arguments' canonical JSON; the runner refuses arguments that differ."""
    reason: str
    """Why the model asked for it, in its words."""


@final
class ActionOutcome(BaseModel, frozen=True):
    """The payload of an `ACTION_RESULTS` fact: what became of one promoted action."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    action: str
    """The `"actions/{id}"` reference of the action."""
    status: Literal["done", "failed", "timed_out", "refused"]
    """`done`: the tool returned; `failed`: it raised; `timed_out`: it did not return in
    time, so whether it took effect is unknown; `refused`: it was never called."""
    result: JsonValue = None
    """What the tool returned (JSON), for `done`."""
    error: str | None = None
    """Why it failed, timed out or was refused."""
    idempotency_key: str
    """The key the tool was (or would have been) given."""
    arguments_sha256: str
    """The digest of the arguments it was (or would have been) called with."""


ACTIONS: Final = Key("actions", payload=ActionRequest)
"""Actions a model asked for: proposals until the engine (and a human) promotes them."""
ACTION_RESULTS: Final = Key("action-results", payload=ActionOutcome)
"""What each promoted action did, recorded by the `ActionRunner` that ran it."""


def canonical_arguments(arguments: Mapping[str, JsonValue]) -> str:
    """Arguments as canonical JSON: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def arguments_digest(arguments: Mapping[str, JsonValue]) -> str:
    """SHA-256 (hex) of the arguments' canonical JSON."""
    return hashlib.sha256(
        canonical_arguments(arguments).encode("utf-8", "surrogatepass")
    ).hexdigest()


@final
class Tool:
    """A typed Python function that a model may call, sync or async.

    Its parameters, annotated and keyword-passable, are its arguments: pydantic validates
    each call against them and generates the JSON schema the model is shown; the name is the
    function's (or `name`), the description its docstring (or `description`). An action's
    function takes one more keyword parameter, `idempotency_key: str`, which the model never
    sees: `ActionRunner` passes the same key each time it runs the same action, so a function
    that keys its side effect by it (a payment API's idempotency key, a unique row) takes
    effect once even when it is called again after a crash.

    Raises:
        ValueError: The name is not 1-64 letters, digits, `_` or `-`; a parameter is
            positional-only, variadic or not annotated; an action lacks `idempotency_key`,
            or a read tool has one.
    """

    def __init__(
        self,
        function: Callable[..., object],
        *,
        kind: ToolKind = "read",
        name: str | None = None,
        description: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        if name is None:
            found: object = getattr(function, "__name__", "")
            name = found if isinstance(found, str) else ""
        if re.fullmatch(_NAME, name) is None:
            raise ValueError(f"tool name {name!r}: use 1-64 letters, digits, '_' or '-'")
        if kind not in ("read", "action"):
            raise ValueError(f"tool {name!r}: kind must be 'read' or 'action', not {kind!r}")
        if not timeout > 0:
            raise ValueError(f"tool {name!r}: timeout must be positive")
        self._function = function
        self._name = name
        self._kind: ToolKind = kind
        self._timeout = timeout
        doc = description if description is not None else inspect.getdoc(function) or ""
        self._description = doc.strip().split("\n\n")[0].strip() or name
        self._arguments = _arguments_model(function, name, kind)
        schema = cast("dict[str, JsonValue]", self._arguments.model_json_schema())
        self._schema = with_reason(schema) if kind == "action" else schema

    def __repr__(self) -> str:
        return f"Tool({self._name!r}, kind={self._kind!r})"

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        return self._name

    @property
    def kind(self) -> ToolKind:
        """`"read"` or `"action"`."""
        return self._kind

    @property
    def description(self) -> str:
        """What the model is told it does."""
        return self._description

    @property
    def timeout(self) -> float:
        """Seconds a call may take before it counts as timed out."""
        return self._timeout

    @property
    def parameters(self) -> dict[str, JsonValue]:
        """The JSON schema of its arguments, generated by pydantic; an action's also asks for
        a `"reason"`, which is shown to the reviewer and not passed to the function."""
        return self._schema

    @property
    def spec(self) -> ToolSpec:
        """What the model is offered: name, description, parameters."""
        return ToolSpec(name=self._name, description=self._description, parameters=self._schema)

    def validate(self, arguments: object) -> dict[str, JsonValue]:
        """Validate `arguments` (a JSON object, or its text, where control characters inside
        strings are allowed, as models write them); return them as they will be passed, in
        JSON form.

        Raises:
            ValueError: They are not a JSON object, or do not validate (the message lists
                each problem with its location).
        """
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments, strict=False)
            except ValueError as error:
                raise ValueError(f"the arguments are not JSON ({error})") from None
        if not isinstance(arguments, dict):
            raise ValueError(f"the arguments must be a JSON object, not {type(arguments).__name__}")
        try:
            model = self._arguments.model_validate(arguments)
        except ValidationError as error:
            raise ValueError(_describe(error)) from None
        return cast("dict[str, JsonValue]", model.model_dump(mode="json"))

    async def call(
        self, arguments: Mapping[str, JsonValue], *, idempotency_key: str | None = None
    ) -> JsonValue:
        """Run the function with `arguments` (validated again), within `timeout`.

        Returns what it returned, as JSON.

        Raises:
            ValueError: The arguments do not validate, or the result is not JSON-able.
            TimeoutError: The call took longer than `timeout`.
            Exception: Whatever the function raised.
        """
        model = self._arguments.model_validate(dict(arguments))
        values: dict[str, Any] = {name: getattr(model, name) for name in type(model).model_fields}
        if self._kind == "action":
            values[IDEMPOTENCY_PARAMETER] = idempotency_key
        function = self._function
        with anyio.fail_after(self._timeout):
            if inspect.iscoroutinefunction(function):
                result = await cast("Callable[..., Awaitable[object]]", function)(**values)
            else:
                result = await anyio.to_thread.run_sync(
                    lambda: function(**values), abandon_on_cancel=True
                )
        try:
            return _JSON.validate_python(to_jsonable_python(result))
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"tool {self._name!r} returned {type(result).__name__}, which is not JSON ({error})"
            ) from None


def _arguments_model(function: Callable[..., object], name: str, kind: ToolKind) -> type[BaseModel]:
    """The pydantic model of a function's parameters (less `idempotency_key`)."""
    try:
        signature = inspect.signature(function)
        hints = get_type_hints(function, include_extras=True)
    except (TypeError, ValueError, NameError) as error:
        raise ValueError(f"tool {name!r}: cannot read its signature ({error})") from None
    fields: dict[str, Any] = {}
    has_key = False
    for parameter in signature.parameters.values():
        if parameter.name == IDEMPOTENCY_PARAMETER:
            has_key = True
            continue
        if parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            raise ValueError(
                f"tool {name!r}: parameter {parameter.name!r} must be passable by keyword "
                "and not variadic"
            )
        if kind == "action" and parameter.name == REASON:
            raise ValueError(
                f"tool {name!r}: an action's parameter cannot be named {REASON!r} (the model's "
                "reason for the call goes there)"
            )
        if parameter.name not in hints:
            raise ValueError(f"tool {name!r}: parameter {parameter.name!r} has no annotation")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (hints[parameter.name], default)
    if kind == "action" and not has_key:
        raise ValueError(
            f"tool {name!r}: an action's function must take `{IDEMPOTENCY_PARAMETER}: str`, "
            "so that running it again after a crash takes effect once"
        )
    if kind == "read" and has_key:
        raise ValueError(
            f"tool {name!r}: a read tool takes no `{IDEMPOTENCY_PARAMETER}` (declare it "
            "kind='action')"
        )
    return create_model(f"{name}_arguments", __base__=_Arguments, **fields)


def with_reason(schema: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """An action's schema as the model sees it: its arguments plus a required `reason`."""
    properties = schema.get("properties")
    required = schema.get("required")
    return {
        **schema,
        "properties": {
            **(properties if isinstance(properties, dict) else {}),
            REASON: {
                "type": "string",
                "description": "Why this action: the facts that call for it. A person reads "
                "it before approving.",
            },
        },
        "required": [*(required if isinstance(required, list) else []), REASON],
    }


def _describe(error: ValidationError) -> str:
    """A validation error in one line: each problem at its location."""
    parts = [
        f"{'.'.join(str(part) for part in item['loc']) or 'arguments'}: {item['msg']}"
        for item in error.errors(include_url=False)
    ]
    return "; ".join(parts)
