"""MCP servers' tools for `LlmSuggestor`: a real server in its own process, stdio and HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import JsonValue

from converge import ContextKey, ConvergeResult, Engine, ProposedFact
from converge_suggestors import (
    ChatResponse,
    LlmSuggestor,
    McpServer,
    ScriptedChatProvider,
    ToolCall,
)

pytest.importorskip("mcp", reason="the mcp extra is not installed")

SERVER = str(Path(__file__).resolve().parent / "mcp_server.py")
FINAL = json.dumps({"proposals": [{"id": "rain", "content": "Rain.", "confidence": 0.6}]})
SEED = ProposedFact(key=ContextKey.SEEDS, id="q", content="Oslo weather?", provenance="input")

pytestmark = pytest.mark.slow  # a server process per run


def stdio(*, timeout: float = 30.0) -> McpServer:
    return McpServer("weather", command=[sys.executable, SERVER, "stdio"], timeout=timeout)


def calling(name: str, arguments: str) -> ChatResponse:
    return ChatResponse(content="", tool_calls=(ToolCall(id="c1", name=name, arguments=arguments),))


def run(
    server: McpServer, *replies: str | ChatResponse
) -> tuple[ConvergeResult, ScriptedChatProvider]:
    provider = ScriptedChatProvider([*replies, FINAL])
    engine = Engine(suggestor_timeout=60)
    engine.register_suggestor(
        LlmSuggestor(
            "forecaster",
            provider,
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Forecast.",
            mcp_servers=[server],
        )
    )
    return engine.run_sync(inputs=[SEED]), provider


def entries(result: ConvergeResult) -> list[dict[str, JsonValue]]:
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "ok", execution.error
    assert isinstance(execution.metadata, dict)
    found = execution.metadata["tool_calls"]
    assert isinstance(found, list)
    return [entry for entry in found if isinstance(entry, dict)]


def test_an_mcp_servers_tools_are_offered_with_their_schemas() -> None:
    _, provider = run(stdio())
    offered = {tool.name: tool for tool in provider.requests[0].tools}
    assert set(offered) == {"forecast", "die", "hang", "garbage", "fail", "transfer"}
    assert offered["forecast"].description == "The forecast for a city."
    assert offered["forecast"].parameters["required"] == ["city"]


def test_an_mcp_read_tool_over_stdio_runs_and_its_result_is_recorded() -> None:
    result, provider = run(stdio(), calling("forecast", '{"city": "Oslo", "days": 2}'))
    [entry] = entries(result)
    assert entry["status"] == "ok"
    assert entry["result"] == {"city": "Oslo", "days": 2, "sky": "rain"}
    assert provider.requests[1].messages[-1].role == "tool"
    assert result.context.find(ContextKey.PROPOSALS, "rain") is not None


def test_arguments_that_do_not_match_the_servers_schema_are_refused_before_the_call() -> None:
    result, provider = run(stdio(), calling("forecast", '{"city": 5}'))
    [entry] = entries(result)
    assert entry["status"] == "invalid"
    assert entry["error"] == "city: 5 is not of type 'string'"
    assert provider.requests[1].messages[-1].content.startswith("Error: invalid arguments")


def test_a_tool_error_answer_is_recorded_as_failed() -> None:
    result, _ = run(stdio(), calling("fail", '{"city": "Oslo"}'))
    [entry] = entries(result)
    assert entry["status"] == "failed"
    assert str(entry["error"]).startswith("McpToolError: MCP server 'weather', tool 'fail': ")


def test_a_server_that_dies_mid_call_fails_that_call_and_the_run_goes_on() -> None:
    started = time.monotonic()
    result, _ = run(stdio(timeout=5), calling("die", "{}"))
    [entry] = entries(result)
    assert (entry["status"], entry["error"]) == ("failed", "MCPError: Connection closed")
    assert "result" not in entry
    assert time.monotonic() - started < 30


def test_a_server_that_hangs_is_timed_out() -> None:
    started = time.monotonic()
    result, _ = run(stdio(timeout=1), calling("hang", "{}"))
    [entry] = entries(result)
    assert entry["status"] == "timed_out"
    assert time.monotonic() - started < 30


def test_a_server_that_writes_garbage_does_not_read_as_a_garbage_result() -> None:
    result, _ = run(stdio(timeout=5), calling("garbage", "{}"))
    [entry] = entries(result)
    # The SDK skips the line that is not JSON-RPC and the answer to a request never sent;
    # the real answer that follows is the result, and nothing of the garbage is.
    assert entry["status"] == "ok"
    assert entry["result"] == {"result": "after garbage"}


def test_a_server_that_cannot_start_fails_the_execution_saying_which() -> None:
    server = McpServer("nowhere", command=["/nonexistent/mcp-server"], timeout=5)
    provider = ScriptedChatProvider([FINAL])
    engine = Engine()
    engine.register_suggestor(
        LlmSuggestor(
            "forecaster",
            provider,
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Forecast.",
            mcp_servers=[server],
        )
    )
    result = engine.run_sync(inputs=[SEED])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert (execution.error or "").startswith(
        "McpToolError: MCP server 'nowhere' could not be opened"
    )
    assert provider.requests == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the MCP server exited"
                assert time.monotonic() < deadline, "the MCP server never listened"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_an_mcp_read_tool_over_streamable_http_runs_and_is_recorded(http_server: str) -> None:
    server = McpServer("weather", url=http_server, timeout=10)
    result, _ = run(server, calling("forecast", '{"city": "Bergen"}'))
    [entry] = entries(result)
    assert entry["status"] == "ok"
    assert entry["result"] == {"city": "Bergen", "days": 1, "sky": "rain"}


def test_mcp_server_needs_either_a_command_or_a_url() -> None:
    with pytest.raises(ValueError, match="give either command or url"):
        McpServer("x")
    with pytest.raises(ValueError, match="give either command or url"):
        McpServer("x", command=["a"], url="http://127.0.0.1:1/mcp")
