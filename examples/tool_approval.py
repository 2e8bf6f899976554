"""A model looks things up with tools and proposes a payment that a person approves first.

The clerk model (scripted here, so the run is the same every time) reads the account balance
with a Python read tool and the invoice with an MCP server's tool (`mcp_invoices.py`, started
over stdio; skipped when the `mcp` extra is missing), then asks for a transfer: an action,
which becomes a proposal under `ACTIONS` and waits at a human gate. Once approved, the
`ActionRunner` runs it, once, and records the outcome under `ACTION_RESULTS`.

`python examples/tool_approval.py` runs it in this process and approves as "jane". With a
store, `converge run examples/tool_approval.py` pauses at the gate; approve it in the console
(`converge ui`) or with `converge resume RUN_ID --approve GATE --by NAME`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import anyio

from converge import ContextKey, ConvergeResult, Formation, GateDecision, HitlPolicy, ProposedFact
from converge_suggestors import (
    ACTION_RESULTS,
    ACTIONS,
    ActionRunner,
    ChatResponse,
    LlmSuggestor,
    McpServer,
    ScriptedChatProvider,
    Tool,
    ToolCall,
)

HERE = Path(__file__).resolve().parent
HAS_MCP = importlib.util.find_spec("mcp") is not None
sent: dict[str, dict[str, object]] = {}


def balance(account: str) -> dict[str, object]:
    """The balance of one of our accounts, in EUR."""
    return {"account": account, "balance": 5000}


def transfer(to: str, amount: int, *, idempotency_key: str) -> dict[str, object]:
    """Transfer an amount in EUR to a vendor."""
    # A payment API keyed by the idempotency key: a repeated call changes nothing.
    receipt = sent.setdefault(idempotency_key, {"to": to, "amount": amount, "n": len(sent) + 1})
    return {"receipt": receipt["n"], "to": to, "amount": amount}


def call(ident: str, name: str, arguments: dict[str, object]) -> ChatResponse:
    """A scripted reply that calls one tool."""
    return ChatResponse(
        content="", tool_calls=(ToolCall(id=ident, name=name, arguments=json.dumps(arguments)),)
    )


PAY = Tool(transfer, kind="action")
script = [
    call("1", "balance", {"account": "operations"}),
    *([call("2", "invoice_status", {"invoice": "17"})] if HAS_MCP else []),
    call("3", "transfer", {"to": "acme", "amount": 1200, "reason": "invoice 17 is due"}),
    json.dumps(
        {
            "proposals": [
                {
                    "id": "invoice-17-covered",
                    "content": "The balance covers invoice 17.",
                    "confidence": 0.9,
                }
            ]
        }
    ),
]
servers = (
    [McpServer("invoices", command=[sys.executable, str(HERE / "mcp_invoices.py")], timeout=30)]
    if HAS_MCP
    else []
)

formation = Formation(
    name="tool_approval",
    description="a model looks up with tools, and a person approves its payment before it runs",
    suggestors=(
        LlmSuggestor(
            "clerk",
            ScriptedChatProvider(script, model="scripted-clerk"),
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Pay the invoices that are due when the balance covers them.",
            tools=[Tool(balance), PAY],
            mcp_servers=servers,
        ),
        ActionRunner(tools=[PAY]),
    ),
    hitl=HitlPolicy(gated_keys=frozenset({ACTIONS})),
    inputs=(
        ProposedFact(
            key=ContextKey.SEEDS,
            id="task",
            content="Invoice 17 from acme is due today.",
            provenance="input",
        ),
    ),
)


def main() -> ConvergeResult:
    """Run to the gate, approve as jane, and print what the tools and the action did."""
    engine = formation.engine()
    paused = anyio.run(engine.run)
    [gate] = paused.pending
    print(f"paused      : {paused.stop_reason.value}, gate {gate.gate_id}")
    print(f"to approve  : {gate.proposal.content}")
    [execution] = paused.trace.cycles[0].executions
    assert isinstance(execution.metadata, dict)
    calls = execution.metadata["tool_calls"]
    assert isinstance(calls, list)
    for entry in calls:
        assert isinstance(entry, dict)
        print(f"tool call   : {entry['tool']} -> {entry['status']}")
    print(f"payments    : {len(sent)} before approval")
    assert paused.checkpoint is not None
    decision = GateDecision.approve(gate.gate_id, by="jane")
    result = anyio.run(engine.resume, paused.checkpoint, [decision])
    [outcome] = ACTION_RESULTS.read(result.context)
    print(f"outcome     : {outcome.status} {outcome.result}")
    print(f"payments    : {len(sent)} after approval")
    print(f"stop reason : {result.stop_reason.value}")
    return result


if __name__ == "__main__":
    main()
