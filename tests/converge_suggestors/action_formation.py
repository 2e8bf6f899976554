"""A formation whose model proposes a payment that a human approves before it runs.

The payment tool keys its effect by the idempotency key, as a payment API does, and writes
one line per call to the ledger file named by `CONVERGE_TEST_LEDGER`: the key, and whether
this call applied the transfer. With `CONVERGE_TEST_CRASH` set to `before` or `after`, the
first call kills its own process with SIGKILL before or after the effect. With
`CONVERGE_TEST_MCP=1`, the transfer is the action of an MCP server in its own process
(`mcp_server.py`, which does the same).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from converge import ContextKey, Formation, HitlPolicy
from converge_suggestors import (
    ACTIONS,
    ActionRunner,
    ChatResponse,
    LlmSuggestor,
    McpServer,
    ScriptedChatProvider,
    SeedSuggestor,
    Tool,
    ToolCall,
)

LEDGER = Path(os.environ.get("CONVERGE_TEST_LEDGER", "ledger.jsonl"))
CRASH = os.environ.get("CONVERGE_TEST_CRASH", "")


def _crash_once(when: str) -> None:
    mark = LEDGER.with_suffix(f".crashed-{when}")
    if CRASH == when and not mark.exists():
        mark.touch()
        os.kill(os.getpid(), signal.SIGKILL)


def transfer(to: str, amount: int, *, idempotency_key: str) -> dict[str, object]:
    """Transfer an amount to someone."""
    _crash_once("before")
    lines = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    applied = all(json.loads(line)["key"] != idempotency_key for line in lines)
    with LEDGER.open("a") as ledger:
        ledger.write(
            json.dumps({"key": idempotency_key, "to": to, "amount": amount, "applied": applied})
            + "\n"
        )
        ledger.flush()
        os.fsync(ledger.fileno())
    _crash_once("after")
    return {"applied": applied, "to": to, "amount": amount}


TRANSFER = Tool(transfer, kind="action")
CALL = ToolCall(
    id="call-1",
    name="transfer",
    arguments='{"to": "acme", "amount": 1200, "reason": "invoice seeds/invoice is due"}',
)

MCP = os.environ.get("CONVERGE_TEST_MCP") == "1"
BANK = (
    McpServer(
        "bank",
        command=[sys.executable, str(Path(__file__).resolve().parent / "mcp_server.py"), "stdio"],
        env=dict(os.environ),
        tools=["transfer"],
        actions=["transfer"],
        timeout=20,
    )
    if MCP
    else None
)

formation = Formation(
    name="payment",
    description="a model proposes a payment; a human approves it; it runs once",
    suggestors=(
        SeedSuggestor("invoice", "Invoice 17 from acme: 1200 EUR, due today"),
        LlmSuggestor(
            "clerk",
            ScriptedChatProvider(
                [ChatResponse(content="", tool_calls=(CALL,)), '{"proposals": []}']
            ),
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Pay the invoices that are due.",
            tools=[] if BANK else [TRANSFER],
            mcp_servers=[BANK] if BANK else [],
        ),
        ActionRunner(mcp_servers=[BANK]) if BANK else ActionRunner(tools=[TRANSFER]),
    ),
    hitl=HitlPolicy(gated_keys=frozenset({ACTIONS})),
)
