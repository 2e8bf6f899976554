"""The inbox above the runs list: every gate waiting in the store, the longest first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._core._escape import esc
from .._core._listing import PendingGate
from .._report._parts import format_time
from ._pages import gate_url, run_url

__all__ = ["INBOX_LIMIT", "inbox_box"]

INBOX_LIMIT: Final = 50
"""How many waiting gates the inbox shows."""


def inbox_box(gates: Sequence[PendingGate]) -> str:
    """The gates waiting for a human, oldest first (`""` when none waits).

    What it lists is the store's index of its paused runs; each gate's page checks the
    run's record before it offers a decision.
    """
    if not gates:
        return ""
    rows = "".join(
        "<tr>"
        f'<td><a href="{esc(gate_url(gate.run_id, gate.gate_id))}">{esc(gate.gate_id)}</a></td>'
        f'<td><a href="{esc(run_url(gate.run_id))}">{esc(gate.run_id[:12])}</a></td>'
        f"<td>{esc(gate.name or '')}</td>"
        f"<td>{esc(gate.ref)}</td>"
        f"<td>{esc(gate.summary[:200])}</td>"
        f"<td>{esc(gate.suggestor)} (cycle {gate.cycle})</td>"
        f"<td>{esc(format_time(gate.saved_at))}</td>"
        "</tr>"
        for gate in gates
    )
    head = "".join(
        f"<th>{name}</th>"
        for name in ("gate", "run", "formation", "proposal", "summary", "from", "waiting since")
    )
    more = (
        f" The {INBOX_LIMIT} longest waiting are shown; `converge review --offset "
        f"{INBOX_LIMIT}` lists the rest."
        if len(gates) >= INBOX_LIMIT
        else ""
    )
    return (
        f'<section class="inbox"><h2>Waiting for a human ({len(gates)}'
        f"{'+' if more else ''})</h2><p class='note'>Every gate waiting in the store, the "
        f"longest waiting first.{esc(more)}</p>"
        f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        "</section>"
    )
