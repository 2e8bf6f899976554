"""`render_report`: a stored run as one self-contained HTML page.

The page has inline CSS, inline SVG and a few lines of inline script, allowed by a content
security policy that admits nothing else: no network, no external fonts, and any script a fact
might smuggle in is escaped and would be refused anyway. The charts live in `_report_svg`; the
stylesheet, the script and the policy in `_report_assets`. Every count the page shows carries
`data-count` and `data-value`, so tests and tools can read them from the DOM.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Final

from ._checkpoint import FactRecord
from ._integrity import verify
from ._invariant import Violation
from ._key import ContextKey
from ._report_assets import CSS, POLICY, SCRIPT
from ._report_svg import KEY_COLOURS, esc, format_ms, lineage_svg, short, timeline_svg
from ._stop import StopReason
from ._store import RunRecord
from ._trace import Execution

__all__ = ["render_report"]


def _count(name: str, value: int, label: str, *, level: str = "") -> str:
    cls = f"stat {level}".strip()
    return (
        f'<div class="{cls}"><b data-count="{name}" data-value="{value}">{value}</b>'
        f"<span>{esc(label)}</span></div>"
    )


_RIGHT: Final = ' class="num"'


def _table(
    headers: Sequence[str],
    rows: Iterable[str],
    *,
    kind: str,
    widths: Sequence[int] = (),
    right: Sequence[int] = (),
) -> str:
    """A table; `widths` (percentages) fix the layout; `right` columns are right-aligned."""
    cols = "".join(f'<col style="width:{width}%">' for width in widths)
    head = "".join(
        f"<th{_RIGHT if index in right else ''}>{esc(header)}</th>"
        for index, header in enumerate(headers)
    )
    body = "".join(rows)
    fixed = " fixed" if widths else ""
    return (
        f'<table class="{kind}{fixed}"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _section(ident: str, title: str, body: str, *, count: int | None = None) -> str:
    badge = "" if count is None else f' <span class="muted">({count})</span>'
    return f'<section id="{ident}"><h2>{esc(title)}{badge}</h2>{body}</section>'


def _ref_link(ref: str, anchors: dict[str, str]) -> str:
    anchor = anchors.get(ref)
    if anchor is None:
        return f'<code>{esc(ref)}</code> <span class="muted">(no such fact)</span>'
    return f'<a href="#{anchor}"><code>{esc(ref)}</code></a>'


def _violations(record: RunRecord) -> list[Violation]:
    found = list(record.trace.input_violations)
    for cycle in record.trace.cycles:
        found.extend(cycle.violations)
    return found


def _executions(record: RunRecord) -> list[tuple[int, Execution]]:
    return [(cycle.cycle, e) for cycle in record.trace.cycles for e in cycle.executions]


def _header(record: RunRecord, title: str) -> str:
    executions = [e for _, e in _executions(record)]
    failures = sum(e.outcome == "failed" for e in executions)
    timeouts = sum(e.outcome == "timed_out" for e in executions)
    violations = len(_violations(record))
    stop = record.outcome
    flawed = record.stop_reason is StopReason.CONVERGED and (failures or timeouts or violations)
    badge = "converged_with_failures" if flawed else stop
    stats = "".join(
        [
            _count("cycles", record.cycles, "cycles"),
            _count("facts", len(record.facts), "facts"),
            _count("tokens", record.tokens, "tokens"),
            _count("executions", len(executions), "executions"),
            _count("failures", failures, "failures", level="alert" if failures else ""),
            _count("timeouts", timeouts, "timeouts", level="alert" if timeouts else ""),
            _count("rejections", len(record.rejections), "rejections"),
            _count(
                "pending",
                len(record.pending),
                "pending gates",
                level="attention" if record.pending else "",
            ),
            _count("decisions", len(record.trace.decisions), "decisions"),
            _count("violations", violations, "violations", level="alert" if violations else ""),
        ]
    )
    callout = (
        f'<p class="callout">{len(record.pending)} proposal(s) wait for a human decision: '
        '<a href="#gates">review the pending gates</a>.</p>'
        if record.pending
        else ""
    )
    return (
        f'<header class="run"><h1>{esc(title)}</h1>'
        f'<p class="subtitle">run <code data-run-id>{esc(record.run_id)}</code></p>'
        f'<p><span class="badge stop-{badge}" data-stop-reason="{stop}">'
        f'{esc(badge.replace("_", " "))}</span><span class="detail">{esc(record.detail)}'
        f'</span></p><div class="stats">{stats}</div>{callout}</header>'
    )


def _timeline(record: RunRecord) -> str:
    legend = (
        '<div class="legend"><span><i style="background:var(--bar)"></i>ok</span>'
        '<span><i style="background:var(--bad)"></i>failed ✕</span>'
        '<span><i style="background:#fde2c8;border:1px solid var(--budget)"></i>timed out ◷</span>'
        "<span>bar width: duration, scaled to the slowest execution of each cycle</span>"
        "<span>under each cycle: facts promoted, rejected (r), held (h), violations (v)</span>"
        "</div>"
    )
    failed = [(cycle, e) for cycle, e in _executions(record) if e.outcome != "ok"]
    rows = [
        f'<tr data-outcome="{e.outcome}"><td class="num">{cycle}</td>'
        f"<td><code>{esc(e.suggestor)}</code></td>"
        f'<td class="{"bad" if e.outcome == "failed" else "warn"}">'
        f"{e.outcome.replace('_', ' ')}</td><td>{e.phase}</td>"
        f'<td class="num">{format_ms(e.duration_ms)}</td><td class="wrap">'
        f"{esc(e.error or '')}"
        + (
            f"<details><summary>traceback</summary><pre>{esc(e.traceback)}</pre></details>"
            if e.traceback
            else ""
        )
        + "</td></tr>"
        for cycle, e in failed
    ]
    failures = (
        "<h3>Failures and timeouts</h3>"
        + _table(
            ["cycle", "suggestor", "outcome", "phase", "duration", "error"],
            rows,
            kind="failures",
            right=(0, 4),
            widths=(7, 20, 10, 9, 10, 44),
        )
        if rows
        else '<p class="empty">Every execution finished without error.</p>'
    )
    return _section("timeline", "Cycle timeline", legend + timeline_svg(record.trace) + failures)


def _fact_row(fact: FactRecord, anchor: str, anchors: dict[str, str]) -> str:
    ref = f"{fact.key.value}/{fact.id}"
    promotion = fact.promotion
    content = esc(fact.content)
    if fact.target is not None:
        content += f' <span class="muted">→ {esc(fact.target.value)}</span>'
    if fact.payload is not None:
        payload = json.dumps(fact.payload, indent=2, ensure_ascii=False, sort_keys=True)
        content += f"<details><summary>payload</summary><pre>{esc(payload)}</pre></details>"
    approved = (
        f"<br>approved by <b>{esc(promotion.approved_by)}</b>" if promotion.approved_by else ""
    )
    evidence = "<br>".join(_ref_link(ref, anchors) for ref in fact.evidence) or (
        '<span class="muted">—</span>'
    )
    confidence = max(0.0, min(1.0, fact.confidence))
    return (
        f'<tr id="{anchor}" data-fact="{esc(ref)}">'
        f'<td class="wrap"><code>{esc(fact.id)}</code></td>'
        f'<td class="wrap">{content}</td><td class="wrap"><code>{esc(fact.provenance)}</code></td>'
        f'<td class="num">{fact.confidence:.2f}<span class="meter"><span style="width:'
        f'{confidence * 100:.0f}%"></span></span></td>'
        f"<td>cycle {promotion.cycle} · clock {promotion.clock}<br>"
        f"<code>{esc(promotion.suggestor)}</code> (#{promotion.suggestor_id})<br>"
        f'<span class="gate gate-{promotion.gate}">gate {promotion.gate}</span>{approved}</td>'
        f'<td class="wrap">{evidence}</td></tr>'
    )


def _facts(record: RunRecord, anchors: dict[str, str]) -> str:
    if not record.facts:
        return _section(
            "facts", "Facts", '<p class="empty">The context holds no facts.</p>', count=0
        )
    groups: list[str] = []
    for key in ContextKey:
        facts = [fact for fact in record.facts if fact.key is key]
        if not facts:
            continue
        rows = [_fact_row(fact, anchors[f"{key.value}/{fact.id}"], anchors) for fact in facts]
        groups.append(
            f'<div class="key-group" data-key="{key.value}"><h3><span class="key-chip" '
            f'style="background:{KEY_COLOURS[key]}"></span>{key.value}'
            f' <span class="muted" data-count="facts-{key.value}" data-value="{len(facts)}">'
            f"({len(facts)})</span></h3>"
            + _table(
                ["id", "content", "provenance", "confidence", "promotion", "evidence"],
                rows,
                kind="facts",
                right=(3,),
                widths=(14, 29, 15, 10, 19, 13),
            )
            + "</div>"
        )
    return _section("facts", "Facts by key", "".join(groups), count=len(record.facts))


def _lineage(record: RunRecord, anchors: dict[str, str]) -> str:
    edges = sum(len(fact.evidence) for fact in record.facts)
    intro = (
        f'<p class="note">Columns are promotion cycles; an arrow runs from each piece of evidence '
        f"to the fact derived from it ({edges} evidence link(s) in all). Hover a node to "
        "highlight its links; click it to jump to its row. Dashed outline: approved by a human.</p>"
    )
    return _section("lineage", "Lineage", intro + lineage_svg(record.facts, anchors))


def _rejections(record: RunRecord) -> str:
    rows = [
        f'<tr data-rejection><td class="num">{r.cycle}</td><td><code>{esc(r.suggestor)}</code></td>'
        f"<td><code>{esc(r.proposal.key.value)}/{esc(r.proposal.id)}</code></td>"
        f'<td class="wrap">{esc(short(r.proposal.content, 400))}</td>'
        f'<td class="wrap">{esc(r.reason)}</td></tr>'
        for r in record.rejections
    ]
    body = (
        _table(
            ["cycle", "suggestor", "proposal", "content", "reason"],
            rows,
            kind="rejections",
            right=(0,),
            widths=(7, 18, 20, 27, 28),
        )
        if rows
        else '<p class="empty">No proposal was rejected.</p>'
    )
    return _section("rejections", "Rejections", body, count=len(rows))


def _gates(record: RunRecord, anchors: dict[str, str]) -> str:
    pending = [
        f'<tr data-gate="{esc(g.gate_id)}"><td class="wrap"><code>{esc(g.gate_id)}</code></td>'
        f'<td class="num">{g.cycle}</td><td><code>{esc(g.suggestor)}</code></td>'
        f'<td class="wrap">{esc(g.summary)}</td><td class="num">{g.proposal.confidence:.2f}</td>'
        f"<td>{esc(g.deadline.isoformat()) if g.deadline else '—'}</td></tr>"
        for g in record.pending
    ]
    decisions: list[str] = []
    for d in record.trace.decisions:
        ref = d.gate_id.split(":", 2)[-1]
        verdict = (
            '<span class="ok">approved</span>'
            if d.approved
            else '<span class="bad">rejected</span>'
        )
        if not d.approved:
            ref = f"{ContextKey.DIAGNOSTIC.value}/hitl-rejected:{ref.partition('/')[2]}"
        fact = _ref_link(ref, anchors) if ref in anchors else "—"
        decisions.append(
            f'<tr data-decision="{esc(d.gate_id)}" data-approved="{str(d.approved).lower()}">'
            f'<td class="wrap"><code>{esc(d.gate_id)}</code></td><td>{verdict}</td>'
            f'<td class="wrap">{esc(d.by)}</td>'
            f'<td class="wrap">{esc(d.reason or "")}</td><td class="wrap">{fact}</td></tr>'
        )
    body = (
        f'<h3>Pending <span class="muted">({len(pending)})</span></h3>'
        + (
            _table(
                ["gate", "cycle", "suggestor", "summary", "confidence", "deadline"],
                pending,
                kind="pending",
                right=(1, 4),
                widths=(24, 7, 17, 32, 10, 10),
            )
            if pending
            else '<p class="empty">No gate is waiting for a human.</p>'
        )
        + f'<h3>Decisions <span class="muted">({len(decisions)})</span></h3>'
        + (
            _table(
                ["gate", "decision", "by", "reason", "fact"],
                decisions,
                kind="decisions",
                widths=(28, 10, 14, 28, 20),
            )
            if decisions
            else '<p class="empty">No human decision was applied.</p>'
        )
    )
    return _section("gates", "Human gates", body)


def _invariants(record: RunRecord) -> str:
    rows = [
        f'<tr data-violation><td class="num">{v.cycle}</td><td><code>{esc(v.invariant)}</code></td>'
        f'<td>{v.invariant_class.value}</td><td class="wrap">{esc(v.reason)}</td></tr>'
        for v in _violations(record)
    ]
    body = (
        _table(
            ["cycle", "invariant", "class", "reason"],
            rows,
            kind="violations",
            right=(0,),
            widths=(7, 28, 12, 53),
        )
        if rows
        else '<p class="empty">No invariant violation was recorded.</p>'
    )
    if record.conflict is not None:
        body += (
            f'<h3>Conflict</h3><p class="bad" data-conflict>{esc(record.conflict.describe())}</p>'
            f"<pre>{esc(record.conflict.proposal.content)}</pre>"
        )
    return _section("invariants", "Invariants and conflicts", body, count=len(rows))


def _integrity(record: RunRecord) -> str:
    proof = record.integrity
    try:
        holds = verify(record.restore_context(), proof)
    except Exception as error:  # a report must render whatever the record holds
        status = "error"
        verdict = (
            f'<span class="bad">cannot restore the stored facts</span>: '
            f"<code>{esc(type(error).__name__)}: {esc(error)}</code>"
        )
    else:
        status = "true" if holds else "false"
        verdict = (
            '<span class="ok">✓ verified</span>: the stored facts reproduce the root and clock'
            if holds
            else '<span class="bad">✗ does not verify</span>: the facts do not match the proof'
        )
    final = record.trace.final_root or "—"
    body = (
        f'<dl class="proof"><dt>verification</dt><dd data-verified="{status}">{verdict}</dd>'
        f'<dt>Merkle root</dt><dd class="mono">{esc(proof.merkle_root)}</dd>'
        f"<dt>Lamport clock</dt><dd>{proof.clock}</dd>"
        f"<dt>fact count</dt><dd>{proof.fact_count}</dd>"
        f'<dt>initial root</dt><dd class="mono">{esc(record.trace.initial_root)}</dd>'
        f'<dt>trace final root</dt><dd class="mono">{esc(final)}</dd></dl>'
    )
    return _section("integrity", "Integrity proof", body)


_NAV: Final = (
    ("timeline", "Timeline"),
    ("facts", "Facts"),
    ("lineage", "Lineage"),
    ("rejections", "Rejections"),
    ("gates", "Human gates"),
    ("invariants", "Invariants"),
    ("integrity", "Integrity"),
)


def render_report(record: RunRecord, *, title: str | None = None) -> str:
    """The run as one self-contained HTML page (inline CSS, SVG and a few lines of script).

    It shows the stop reason and counts, the cycle timeline (failures and timeouts marked),
    the facts by key with their provenance and promotion record, the lineage graph drawn from
    `evidence`, rejections, pending gates and human decisions, invariant violations, and the
    integrity proof with whether the stored facts verify against it. Every user-provided text
    is escaped, and the page loads nothing from the network.

    Args:
        record: The run, e.g. `RunRecord.of(result)` or `await store.load(run_id)`.
        title: The heading and page title; by default the heading is `"Run report"` and the
            page title `"converge run {run_id}"`.
    """
    heading = title if title is not None else "Run report"
    page_title = title if title is not None else f"converge run {record.run_id}"
    anchors = {f"{fact.key.value}/{fact.id}": f"fact-{i}" for i, fact in enumerate(record.facts)}
    nav = "".join(f'<a href="#{ident}">{label}</a>' for ident, label in _NAV)
    body = "".join(
        [
            _header(record, heading),
            f"<nav>{nav}</nav>",
            _timeline(record),
            _facts(record, anchors),
            _lineage(record, anchors),
            _rejections(record),
            _gates(record, anchors),
            _invariants(record),
            _integrity(record),
        ]
    )
    stop = record.outcome
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="converge"><title>{esc(page_title)}</title>'
        f"<style>{CSS}</style></head>"
        f'<body data-run-id="{esc(record.run_id)}" data-stop-reason="{stop}"><main>{body}'
        "<footer>Generated by converge from a stored run record. This file is self-contained: "
        "it loads nothing from the network.</footer></main>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
