"""An MCP server in its own process for the tool tests: stdio, or streamable HTTP on a port.

`python mcp_server.py stdio` or `python mcp_server.py http PORT`. Its tools: `forecast` (a
look-up), `die` (the process exits mid-call), `hang` (never answers), `garbage` (writes a line
that is not JSON-RPC and an answer to a request never sent to stdout, then answers) and
`fail` (answers with an error); and an action, `transfer`, keyed by its idempotency key as a
payment API is: one ledger line per call (`CONVERGE_TEST_LEDGER`) with the key of its argument
and of its request's `_meta`, and whether this call applied it. With `CONVERGE_TEST_CRASH` set
to `before` or `after`, its first call kills the server's parent (the converge process) with
SIGKILL before or after the effect; `CONVERGE_TEST_DIE=1` makes it exit instead of answering.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("weather")


@server.tool()
def forecast(city: str, days: int = 1) -> dict[str, object]:
    """The forecast for a city."""
    return {"city": city, "days": days, "sky": "rain"}


@server.tool()
def die() -> str:
    """Exits the server's process in the middle of the call."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"


@server.tool()
def garbage() -> str:
    """Writes garbage to stdout, then answers."""
    os.write(1, b'this is not JSON-RPC\n{"jsonrpc": "2.0", "id": 999, "result": 1}\n')
    return "after garbage"


@server.tool()
def fail(city: str) -> str:
    """Answers with an error."""
    raise ValueError(f"no station in {city}")


LEDGER = Path(os.environ.get("CONVERGE_TEST_LEDGER", "ledger.jsonl"))


def _crash_once(when: str) -> None:
    mark = LEDGER.with_suffix(f".crashed-{when}")
    if os.environ.get("CONVERGE_TEST_CRASH", "") == when and not mark.exists():
        mark.touch()
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(9)  # and this process with it, as when the machine goes down


@server.tool()
def transfer(to: str, amount: int, idempotency_key: str, ctx: Context) -> dict[str, object]:
    """Transfer an amount to someone."""
    _crash_once("before")
    if os.environ.get("CONVERGE_TEST_DIE") == "1":
        os._exit(3)
    meta = ctx.request_context.meta
    meta_key = None if meta is None else dict(meta).get("converge/idempotency_key")
    lines = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    applied = all(json.loads(line)["key"] != idempotency_key for line in lines)
    line = {"key": idempotency_key, "meta_key": meta_key, "to": to, "amount": amount}
    with LEDGER.open("a") as ledger:
        ledger.write(json.dumps({**line, "applied": applied}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    _crash_once("after")
    return {"applied": applied, "to": to, "amount": amount}


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
