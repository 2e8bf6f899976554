"""A real language model calls a read tool: SmolLM2 on llama.cpp's server, over HTTP.

The first reply must call the tool (`first_tool`, which llama-cpp-python enforces with a
grammar built from the tool's JSON schema); the tool runs in the suggestor, its result goes
back to the model, and the next reply is read as proposals. Skips like the other real-model
tests when the `local-model` extra is missing.
"""

from __future__ import annotations

import pytest

from converge import ContextKey, Engine, ProposedFact
from converge_suggestors import LlmSuggestor, Tool
from examples.model_review import open_provider
from tests.converge_suggestors.test_real_model import model_url

__all__ = ["model_url"]  # the fixture, shared with the other real-model tests

pytestmark = [pytest.mark.model, pytest.mark.slow]

asked: list[str] = []


@pytest.fixture
def anyio_backend() -> str:
    """One backend: the model does the work, and each run costs a minute or more."""
    return "asyncio"


def opening_hours(shop: str) -> dict[str, str]:
    """The opening hours of a shop."""
    asked.append(shop)
    return {"shop": shop, "opens": "09:00", "closes": "17:00"}


async def test_a_real_model_calls_a_read_tool_whose_result_is_recorded(model_url: str) -> None:
    async with open_provider(model_url) as provider:
        engine = Engine(suggestor_timeout=600)
        engine.register_suggestor(
            LlmSuggestor(
                "clerk",
                provider,
                dependencies=[ContextKey.SEEDS],
                target=ContextKey.HYPOTHESES,
                instructions="Look up the opening hours of the shop in the question, then "
                "state them as one proposal.",
                tools=[Tool(opening_hours)],
                first_tool="opening_hours",
                max_tokens=96,
                max_tool_turns=1,
                max_repairs=1,
            )
        )
        seed = ProposedFact(
            key=ContextKey.SEEDS,
            id="q",
            content="When does the bakery open?",
            provenance="input",
        )
        result = await engine.run(inputs=[seed])
    [execution] = result.trace.cycles[0].executions
    assert isinstance(execution.metadata, dict)
    calls = execution.metadata["tool_calls"]
    assert isinstance(calls, list)
    first = calls[0]
    assert isinstance(first, dict)
    assert first["tool"] == "opening_hours"
    assert first["status"] == "ok", first
    assert len(asked) >= 1
    assert first["result"] == {"shop": asked[0], "opens": "09:00", "closes": "17:00"}
    assert execution.tokens > 0
