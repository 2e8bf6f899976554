"""`Tool`: the schema from a typed function, validated calls, timeouts, results as JSON."""

from __future__ import annotations

import time
from typing import Annotated

import anyio
import pytest
from pydantic import BaseModel, Field

from converge_suggestors import Tool, ToolSpec


def lookup(city: str, limit: Annotated[int, Field(ge=1, le=10)] = 3) -> dict[str, object]:
    """Look up the weather in a city.

    This second paragraph is not part of the description.
    """
    return {"city": city, "limit": limit}


class Money(BaseModel):
    amount: int
    currency: str


def pay(to: str, money: Money, *, idempotency_key: str) -> str:
    """Pay someone."""
    return f"{to}:{money.amount}{money.currency}:{idempotency_key}"


def test_tool_schema_is_generated_from_the_signature() -> None:
    tool = Tool(lookup)
    spec = tool.spec
    assert isinstance(spec, ToolSpec)
    assert spec.name == "lookup"
    assert spec.description == "Look up the weather in a city."
    assert spec.parameters["required"] == ["city"]
    properties = spec.parameters["properties"]
    assert isinstance(properties, dict)
    assert properties["limit"] == {
        "default": 3,
        "maximum": 10,
        "minimum": 1,
        "title": "Limit",
        "type": "integer",
    }
    assert spec.parameters["additionalProperties"] is False


def test_tool_action_schema_hides_the_idempotency_key_and_asks_for_a_reason() -> None:
    tool = Tool(pay, kind="action")
    properties = tool.parameters["properties"]
    assert isinstance(properties, dict)
    assert set(properties) == {"to", "money", "reason"}
    assert tool.parameters["required"] == ["to", "money", "reason"]
    assert tool.validate('{"to": "ann", "money": {"amount": 1, "currency": "EUR"}}') == {
        "to": "ann",
        "money": {"amount": 1, "currency": "EUR"},
    }


def test_tool_refuses_an_action_with_a_parameter_named_reason() -> None:
    def note(reason: str, *, idempotency_key: str) -> None:
        """Note."""

    with pytest.raises(ValueError, match="an action's parameter cannot be named 'reason'"):
        Tool(note, kind="action")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"city": 5}', "city: Input should be a valid string"),
        ('{"city": "Oslo", "limit": 11}', "limit: Input should be less than or equal to 10"),
        ('{"city": "Oslo", "rm": "-rf"}', "rm: Extra inputs are not permitted"),
        ("{}", "city: Field required"),
        ("[1]", "the arguments must be a JSON object, not list"),
        ("{'city': 'Oslo'}", "the arguments are not JSON"),
    ],
)
def test_tool_validate_refuses_bad_arguments_saying_where(arguments: str, problem: str) -> None:
    with pytest.raises(ValueError, match="^" + problem.replace("(", r"\(")):
        Tool(lookup).validate(arguments)


def test_tool_validate_returns_the_arguments_as_they_will_be_passed() -> None:
    assert Tool(lookup).validate('{"city": "Ōslo\u202e"}') == {"city": "Ōslo\u202e", "limit": 3}


async def test_tool_call_runs_a_sync_function_with_validated_arguments() -> None:
    result = await Tool(pay, kind="action").call(
        {"to": "ann", "money": {"amount": 5, "currency": "EUR"}}, idempotency_key="k1"
    )
    assert result == "ann:5EUR:k1"


async def test_tool_call_times_out_a_hanging_async_function() -> None:
    async def hang() -> str:
        """Never answers."""
        await anyio.sleep(60)
        return "never"

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await Tool(hang, timeout=0.2).call({})
    assert time.monotonic() - started < 5


async def test_tool_call_refuses_a_result_that_is_not_json() -> None:
    def odd() -> object:
        """Returns an object."""
        return object()

    with pytest.raises(ValueError, match="returned object, which is not JSON"):
        await Tool(odd).call({})


@pytest.mark.parametrize(
    ("function", "kind", "problem"),
    [
        (lambda: None, "read", "tool name '<lambda>'"),
        (lookup, "action", "an action's function must take `idempotency_key: str`"),
        (pay, "read", "a read tool takes no `idempotency_key`"),
    ],
)
def test_tool_refuses_a_function_it_cannot_describe(
    function: object, kind: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        Tool(function, kind=kind)  # pyright: ignore[reportArgumentType]


def test_tool_refuses_an_unannotated_parameter() -> None:
    def bare(x) -> None:  # pyright: ignore[reportMissingParameterType, reportUnknownParameterType]
        """Bare."""

    with pytest.raises(ValueError, match="parameter 'x' has no annotation"):
        Tool(bare)  # pyright: ignore[reportUnknownArgumentType]


def test_tool_validate_allows_a_control_character_inside_a_string_as_models_write_them() -> None:
    assert Tool(lookup).validate('{"city": "Oslo\nwest"}') == {"city": "Oslo\nwest", "limit": 3}
