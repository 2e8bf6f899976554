"""An MCP server in its own process for the tool tests: stdio, or streamable HTTP on a port.

`python mcp_server.py stdio` or `python mcp_server.py http PORT`. Its tools: `forecast` (a
look-up), `die` (the process exits mid-call), `hang` (never answers), `garbage` (writes a line
that is not JSON-RPC and an answer to a request never sent to stdout, then answers) and
`fail` (answers with an error).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

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


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
