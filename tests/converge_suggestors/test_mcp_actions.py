"""An MCP server's tool as an action: staged for approval, run once by `ActionRunner`.

The server (`mcp_server.py`) runs in its own process over stdio; its `transfer` writes one
ledger line per call, with the idempotency key of its argument and of its request's `_meta`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from action_forger import action_engine, forged, outcome, staged

from converge import ContextKey, ConvergeResult, Engine, GateDecision, ProposedFact
from converge_suggestors import ACTION_RESULTS, ActionRunner, McpServer, ToolCall
from converge_suggestors._tool import arguments_digest

pytest.importorskip("mcp")

SERVER = str(Path(__file__).resolve().parent / "mcp_server.py")
SEED = ProposedFact(key=ContextKey.SEEDS, id="q", content="Invoice 17 is due", provenance="input")
CALL = '{"to": "acme", "amount": 1200, "reason": "invoice 17 is due"}'


def bank(tmp_path: Path, **env: str) -> McpServer:
    variables = {**os.environ, "CONVERGE_TEST_LEDGER": str(tmp_path / "ledger.jsonl"), **env}
    return McpServer(
        "bank",
        command=[sys.executable, SERVER, "stdio"],
        env=variables,
        tools=["transfer", "forecast"],
        actions=["transfer"],
        timeout=20,
    )


def ledger(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def engine(server: McpServer) -> Engine:
    call = ToolCall(id="c1", name="transfer", arguments=CALL)
    return action_engine(call, ActionRunner(mcp_servers=[server]), mcp_servers=[server])


def paused_and_gate(built: Engine, tmp_path: Path) -> tuple[ConvergeResult, str]:
    paused, gate = staged(built, SEED)
    assert ledger(tmp_path) == []  # staged, not run
    return paused, gate


def test_the_model_is_offered_an_mcp_action_with_a_reason_and_without_the_key(
    tmp_path: Path,
) -> None:
    async def tools() -> dict[str, tuple[str, str]]:
        async with bank(tmp_path).connect() as listed:
            return {
                tool.name: (tool.kind, json.dumps(tool.spec.parameters, sort_keys=True))
                for tool in listed
            }

    offered = anyio.run(tools)
    kind, text = offered["transfer"]
    schema = json.loads(text)
    assert kind == "action"
    assert set(schema["properties"]) == {"to", "amount", "reason"}
    assert set(schema["required"]) == {"to", "amount", "reason"}  # not idempotency_key
    assert offered["forecast"][0] == "read"


def test_an_approved_mcp_action_runs_once_with_its_idempotency_key(tmp_path: Path) -> None:
    built = engine(bank(tmp_path))
    paused, gate = paused_and_gate(built, tmp_path)
    assert paused.checkpoint is not None
    result = anyio.run(built.resume, paused.checkpoint, [GateDecision.approve(gate, by="jane")])
    assert result.converged
    [line] = ledger(tmp_path)
    done = outcome(result)
    assert done.status == "done"
    assert done.result == {"applied": True, "to": "acme", "amount": 1200}
    assert line["key"] == line["meta_key"] == done.idempotency_key  # argument and _meta
    assert (line["to"], line["amount"]) == ("acme", 1200)


def test_a_rejected_mcp_action_never_runs(tmp_path: Path) -> None:
    built = engine(bank(tmp_path))
    paused, gate = paused_and_gate(built, tmp_path)
    assert paused.checkpoint is not None
    decision = GateDecision.reject(gate, by="jane", reason="not now")
    result = anyio.run(built.resume, paused.checkpoint, [decision])
    assert result.converged
    assert ledger(tmp_path) == []
    assert result.context.get(ACTION_RESULTS) == ()


def test_an_mcp_server_dying_mid_action_is_recorded_as_failed(tmp_path: Path) -> None:
    built = engine(bank(tmp_path, CONVERGE_TEST_DIE="1"))
    paused, gate = paused_and_gate(built, tmp_path)
    assert paused.checkpoint is not None
    result = anyio.run(built.resume, paused.checkpoint, [GateDecision.approve(gate, by="jane")])
    failed = outcome(result)
    assert failed.status == "failed"
    assert failed.error is not None
    assert ledger(tmp_path) == []


APPROVED: dict[str, object] = {"to": "acme", "amount": 1200}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (
            {"to": "mallory", "amount": 1200},
            "its arguments differ from the approved ones (SHA-256 mismatch)",
        ),
        (
            {"to": "acme", "amount": 1200, "idempotency_key": "mine"},
            "its arguments differ from the approved ones (SHA-256 mismatch)",
        ),
    ],
)
def test_an_mcp_action_whose_arguments_changed_is_refused_never_sent(
    tmp_path: Path, arguments: dict[str, object], problem: str
) -> None:
    payload: dict[str, object] = {
        "tool": "transfer",
        "arguments": arguments,
        "arguments_sha256": arguments_digest(json.loads(json.dumps(APPROVED))),
        "reason": "forged",
    }
    runner = ActionRunner(mcp_servers=[bank(tmp_path)], require_approval=False)
    result = forged(payload, runner).run_sync(inputs=[SEED])
    refused = outcome(result)
    assert (refused.status, refused.error) == ("refused", problem)
    assert ledger(tmp_path) == []


def test_an_mcp_action_must_be_a_tool_of_its_server(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"actions \['wire'\] are not among its tools"):
        McpServer("bank", command=["x"], tools=["transfer"], actions=["wire"])
    with pytest.raises(ValueError, match="MCP server 'plain' declares no actions"):
        ActionRunner(mcp_servers=[McpServer("plain", command=["x"])])
