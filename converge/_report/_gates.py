"""The human gates of the HTML run report: every held proposal in full, and the decisions.

A held proposal shows everything a reviewer needs to decide it without another tool: its key,
id and content, its whole payload as a table of `path → value` rows, its confidence, who
proposed it and when, its evidence, its deadline, and the exact commands that decide it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from typing import Final

from pydantic import JsonValue

from .._core._escape import esc
from .._core._hitl import GateRequest
from .._core._key import ContextKey
from .._core._record import RunRecord
from ._parts import format_time, ref_link, section, table

__all__ = ["flatten_payload", "gates"]

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _scalar(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def flatten_payload(payload: JsonValue) -> list[tuple[str, str]]:
    """`(path, value)` rows: nested objects and lists flattened (`terms.amount`,
    `items[0].sku`), scalars as JSON, empty ones as `{}` or `[]`. A payload that is not an
    object is one row, its path `(value)`."""
    if not isinstance(payload, dict):
        return [("(value)", json.dumps(payload, ensure_ascii=False, sort_keys=True))]
    rows: list[tuple[str, str]] = []

    def walk(value: JsonValue, path: str) -> None:
        if isinstance(value, dict):
            if not value:
                rows.append((path or "(value)", "{}"))
            for key, item in value.items():
                step = key if _NAME.fullmatch(key) else f"[{json.dumps(key, ensure_ascii=False)}]"
                walk(item, f"{path}.{step}" if path and not step.startswith("[") else path + step)
        elif isinstance(value, list):
            if not value:
                rows.append((path or "(value)", "[]"))
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")
        else:
            rows.append((path, _scalar(value)))

    walk(payload, "")
    return rows


def _payload(gate: GateRequest) -> str:
    payload = gate.proposal.payload
    if payload is None:
        return '<p class="muted">No payload.</p>'
    rows = [
        f'<tr><td class="wrap"><code>{esc(path)}</code></td>'
        f'<td class="wrap"><code>{esc(value)}</code></td></tr>'
        for path, value in flatten_payload(payload)
    ]
    return table(
        ["path", "value"],
        rows,
        kind="payload",
        widths=(38, 62),
        attrs=f' data-payload="{esc(gate.gate_id)}"',
    )


def _commands(record: RunRecord, gate: GateRequest, store_argument: str) -> str:
    run = shlex.quote(record.run_id)
    every = [shlex.quote(g.gate_id) for g in record.pending]
    this = shlex.quote(gate.gate_id)
    others = [g for g in every if g != this]
    rest = f" --approve {' '.join(others)}" if others else ""
    lines = [
        ("review", f"converge review {run}{store_argument}"),
        ("approve", f"converge resume {run} --approve {' '.join(every)} --by NAME{store_argument}"),
        (
            "reject",
            f'converge resume {run} --reject {this}{rest} --by NAME --reason "..."{store_argument}',
        ),
    ]
    return "".join(
        f'<div class="cmd"><span class="muted">{word}</span><pre data-command="{word}">'
        f"{esc(command)}</pre></div>"
        for word, command in lines
    )


def _held(
    record: RunRecord,
    index: int,
    gate: GateRequest,
    anchors: dict[str, str],
    store_argument: str,
    gate_href: Callable[[str], str] | None,
) -> str:
    proposal = gate.proposal
    target = f" → <code>{esc(proposal.target.value)}</code>" if proposal.target else ""
    evidence = " ".join(ref_link(ref, anchors) for ref in proposal.evidence) or "—"
    summary = (
        ""
        if gate.summary == proposal.content
        else f'<dt>summary</dt><dd class="wrap">{esc(gate.summary)}</dd>'
    )
    console = (
        f'<p><a class="console" href="{esc(gate_href(gate.gate_id))}">Review in the console</a></p>'
        if gate_href is not None
        else ""
    )
    return (
        f'<article class="held" id="gate-{index}" data-gate="{esc(gate.gate_id)}">'
        f'<h3><code>{esc(gate.gate_id)}</code></h3>{console}<dl class="gate-facts">'
        f'<dt>proposal</dt><dd><code class="ref">{esc(proposal.key.value)}/{esc(proposal.id)}'
        f"</code>{target}</dd>"
        f'<dt>content</dt><dd class="wrap content">{esc(proposal.content)}</dd>{summary}'
        f"<dt>confidence</dt><dd>{proposal.confidence:.2f}</dd>"
        f"<dt>proposed by</dt><dd><code>{esc(gate.suggestor)}</code> (#{gate.suggestor_id}) in "
        f"cycle {gate.cycle}; provenance <code>{esc(proposal.provenance)}</code></dd>"
        f'<dt>evidence</dt><dd class="refs">{evidence}</dd>'
        f"<dt>deadline</dt><dd>{format_time(gate.deadline) if gate.deadline else 'none'}</dd>"
        f"</dl><h4>Payload</h4>{_payload(gate)}<h4>Decide</h4>"
        f"{_commands(record, gate, store_argument)}</article>"
    )


def _decision_rows(record: RunRecord, anchors: dict[str, str]) -> list[str]:
    rows: list[str] = []
    for d in record.trace.decisions:
        ref = d.gate_id.split(":", 2)[-1]
        verdict = (
            '<span class="ok">approved</span>'
            if d.approved
            else '<span class="bad">rejected</span>'
        )
        if not d.approved:
            ref = f"{ContextKey.DIAGNOSTIC.value}/hitl-rejected:{ref.partition('/')[2]}"
        fact = ref_link(ref, anchors) if ref in anchors else "—"
        rows.append(
            f'<tr data-decision="{esc(d.gate_id)}" data-approved="{str(d.approved).lower()}">'
            f'<td class="wrap"><code>{esc(d.gate_id)}</code></td><td>{verdict}</td>'
            f'<td class="wrap">{esc(d.by)}</td>'
            f'<td class="wrap">{esc(d.reason or "")}</td><td class="wrap">{fact}</td></tr>'
        )
    return rows


def gates(
    record: RunRecord,
    anchors: dict[str, str],
    *,
    store_argument: str = "",
    gate_href: Callable[[str], str] | None = None,
) -> str:
    """The human gates section: each held proposal in full, then the decisions applied."""
    pending = record.pending
    several = (
        f'<p class="note">A resume needs a decision for every one of the {len(pending)} '
        "pending gates, so each command below names all of them: approve them all, or reject "
        "one and approve the rest (edit the command to reject more).</p>"
        if len(pending) > 1
        else ""
    )
    held = "".join(
        _held(record, index, gate, anchors, store_argument, gate_href)
        for index, gate in enumerate(pending)
    )
    decisions = _decision_rows(record, anchors)
    body = (
        f'<h3 id="held">Held proposals <span class="muted">({len(pending)})</span></h3>'
        + (several + held if pending else '<p class="empty">No gate is waiting for a human.</p>')
        + f'<h3>Decisions <span class="muted">({len(decisions)})</span></h3>'
        + (
            table(
                ["gate", "decision", "by", "reason", "fact"],
                decisions,
                kind="decisions",
                widths=(28, 10, 14, 28, 20),
            )
            if decisions
            else '<p class="empty">No human decision was applied.</p>'
        )
    )
    return section("gates", "Human gates", body)
