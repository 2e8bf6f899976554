"""A tiny MCP server for `tool_approval.py`: invoice look-ups, spoken over stdio.

`python examples/mcp_invoices.py` serves it on stdin and stdout; the example starts it
itself, as a child process, for each look-up conversation.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("invoices")

INVOICES: dict[str, dict[str, object]] = {
    "17": {"invoice": "17", "vendor": "acme", "amount": 1200, "due": "2026-01-05", "paid": False},
    "18": {"invoice": "18", "vendor": "globex", "amount": 300, "due": "2026-02-01", "paid": True},
}


@server.tool()
def invoice_status(invoice: str) -> dict[str, object]:
    """The vendor, amount, due date and payment status of an invoice."""
    found = INVOICES.get(invoice)
    if found is None:
        raise ValueError(f"no invoice {invoice!r}")
    return found


if __name__ == "__main__":
    server.run("stdio")
