"""The two charts of the HTML run report, as inline SVG: the cycle timeline and the lineage graph.

Both are plain strings built here, with every user-provided text escaped; they need no script
and no network. Large runs degrade gracefully: the timeline keeps the latest cycles and the
lineage graph the latest facts, each with a note saying what was left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Final

from ._checkpoint import FactRecord
from ._key import KEY_ORDER, ContextKey
from ._trace import CycleTrace, Execution, RunTrace

__all__ = [
    "KEY_COLOURS",
    "LINEAGE_LIMIT",
    "TIMELINE_CYCLE_LIMIT",
    "TIMELINE_LANE_LIMIT",
    "esc",
    "format_ms",
    "lineage_svg",
    "short",
    "timeline_svg",
]

KEY_COLOURS: Final[Mapping[ContextKey, str]] = {
    ContextKey.SEEDS: "#2f6fdf",
    ContextKey.HYPOTHESES: "#8a4fd8",
    ContextKey.STRATEGIES: "#1c9a74",
    ContextKey.CONSTRAINTS: "#c0392b",
    ContextKey.SIGNALS: "#d4880f",
    ContextKey.COMPETITORS: "#b5487f",
    ContextKey.EVALUATIONS: "#138ba8",
    ContextKey.PROPOSALS: "#7a7f2a",
    ContextKey.DIAGNOSTIC: "#6b7280",
}
"""One colour per context key, shared by the lineage graph and the fact tables."""

TIMELINE_CYCLE_LIMIT: Final = 200
"""The timeline draws at most this many cycles (the latest)."""
TIMELINE_LANE_LIMIT: Final = 80
"""The timeline draws at most this many lanes (suggestors with failures first)."""
LINEAGE_LIMIT: Final = 120
"""The lineage graph draws at most this many facts (the latest promoted)."""

_OUTCOME_LABEL: Final = {"ok": "ok", "failed": "failed", "timed_out": "timed out"}


def esc(text: object) -> str:
    """`text` as HTML (or SVG) text or attribute value: `& < > " '` escaped."""
    return escape(str(text), quote=True)


def short(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "…"


def format_ms(duration_ms: float) -> str:
    """A duration for people: `0.05 ms`, `12.3 ms`, `250 ms`, `1.50 s`."""
    if duration_ms >= 1000:
        return f"{duration_ms / 1000:.2f} s"
    if duration_ms >= 100:
        return f"{duration_ms:.0f} ms"
    if duration_ms >= 1:
        return f"{duration_ms:.1f} ms"
    return f"{duration_ms:.2f} ms"


def _n(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


# --- the cycle timeline -----------------------------------------------------------------------

_LABEL_W: Final = 200
_LANE_H: Final = 26
_BAR_H: Final = 14
_HEAD_H: Final = 40
_FOOT_H: Final = 22
_WIDTH: Final = 1188


def _lanes(cycles: Sequence[CycleTrace]) -> tuple[list[str], int]:
    """Suggestor names in id order, capped (failing ones kept first); and how many were cut."""
    ids: dict[str, int] = {}
    failing: set[str] = set()
    for cycle in cycles:
        for execution in cycle.executions:
            ids.setdefault(execution.suggestor, execution.suggestor_id)
            if execution.outcome != "ok":
                failing.add(execution.suggestor)
    names = sorted(ids, key=lambda name: (ids[name], name))
    if len(names) <= TIMELINE_LANE_LIMIT:
        return names, 0
    kept = [name for name in names if name in failing][:TIMELINE_LANE_LIMIT]
    kept += [name for name in names if name not in failing][: TIMELINE_LANE_LIMIT - len(kept)]
    chosen = set(kept)
    return [name for name in names if name in chosen], len(names) - len(kept)


def _marker(outcome: str, x: float, y: float) -> str:
    """A failure cross or a timeout clock centred on (x, y)."""
    if outcome == "failed":
        return (
            f'<g class="marker marker-failed"><circle cx="{_n(x)}" cy="{_n(y)}" r="7"/>'
            f'<path d="M{_n(x - 3)} {_n(y - 3)}L{_n(x + 3)} {_n(y + 3)}'
            f'M{_n(x + 3)} {_n(y - 3)}L{_n(x - 3)} {_n(y + 3)}"/></g>'
        )
    return (
        f'<g class="marker marker-timed_out"><circle cx="{_n(x)}" cy="{_n(y)}" r="7"/>'
        f'<path d="M{_n(x)} {_n(y - 4)}L{_n(x)} {_n(y)}L{_n(x + 3)} {_n(y + 2)}"/></g>'
    )


def _bar(execution: Execution, cycle: int, x: float, y: float, width: float) -> str:
    outcome = execution.outcome
    tip = [
        f"{execution.suggestor} · cycle {cycle} · {_OUTCOME_LABEL[outcome]}",
        f"{format_ms(execution.duration_ms)}, {execution.proposals} proposal(s), "
        f"{execution.tokens} token(s)",
    ]
    if execution.phase == "accepts":
        tip.append("failed in accepts()")
    if execution.error:
        tip.append(execution.error)
    parts = [
        f'<g class="exec exec-{outcome}" data-outcome="{outcome}" data-cycle="{cycle}" '
        f'data-suggestor="{esc(execution.suggestor)}"><title>{esc(chr(10).join(tip))}</title>',
        f'<rect class="bar" x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" height="{_BAR_H}" rx="3"/>',
    ]
    if outcome != "ok":
        mid = y + _BAR_H / 2
        parts.append(_marker(outcome, x + width + 9 if width < 24 else x + width - 9, mid))
    parts.append("</g>")
    return "".join(parts)


def timeline_svg(trace: RunTrace) -> str:
    """The cycle timeline: one lane per suggestor, one column per cycle, a bar per execution.

    Bars start at their cycle's left edge (a cycle's suggestors run concurrently) and their
    width is the duration, scaled to the slowest execution of that cycle.
    """
    cycles = list(trace.cycles)
    if not cycles:
        return '<p class="empty">No cycle ran: the inputs alone ended the run.</p>'
    notes: list[str] = []
    if len(cycles) > TIMELINE_CYCLE_LIMIT:
        notes.append(f"Showing the latest {TIMELINE_CYCLE_LIMIT} of {len(cycles)} cycles.")
        cycles = cycles[-TIMELINE_CYCLE_LIMIT:]
    lanes, cut = _lanes(cycles)
    if cut:
        notes.append(f"Showing {len(lanes)} of {len(lanes) + cut} suggestors (failing ones first).")
    lane_of = {name: index for index, name in enumerate(lanes)}
    col_w = max(96.0, (_WIDTH - _LABEL_W) / len(cycles))
    width = _LABEL_W + col_w * len(cycles)
    height = _HEAD_H + _LANE_H * max(len(lanes), 1) + _FOOT_H
    out = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" '
        f'height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" '
        f'aria-label="Cycle timeline">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" class="hatch-bg"/>'
        '<line x1="0" y1="0" x2="0" y2="6" class="hatch-line"/></pattern></defs>',
    ]
    for index, name in enumerate(lanes):
        y = _HEAD_H + index * _LANE_H
        out.append(
            f'<g class="lane" data-lane="{esc(name)}"><rect class="lane-bg lane-{index % 2}" '
            f'x="0" y="{y}" width="{_n(width)}" height="{_LANE_H}"/>'
            f'<text class="lane-label" x="8" y="{y + _LANE_H / 2 + 4:.0f}"><title>{esc(name)}'
            f"</title>{esc(short(name, 27))}</text></g>"
        )
    if not lanes:
        out.append(f'<text class="idle" x="8" y="{_HEAD_H + 17}">No suggestor was eligible.</text>')
    for column, cycle in enumerate(cycles):
        x0 = _LABEL_W + column * col_w
        slowest = max((e.duration_ms for e in cycle.executions), default=0.0)
        scale = (col_w - 30) / slowest if slowest > 0 else 0.0
        out.append(
            f'<g class="cycle" data-cycle="{cycle.cycle}">'
            f'<line class="cycle-rule" x1="{_n(x0)}" y1="4" x2="{_n(x0)}" y2="{height - 4}"/>'
            f'<text class="cycle-label" x="{_n(x0 + 6)}" y="16">cycle {cycle.cycle}</text>'
            f'<text class="cycle-scale" x="{_n(x0 + 6)}" y="31">'
            f"{'max ' + format_ms(slowest) if cycle.executions else 'nothing eligible'}</text>"
        )
        for execution in cycle.executions:
            lane = lane_of.get(execution.suggestor)
            if lane is None:
                continue
            bar_w = max(3.0, execution.duration_ms * scale)
            y = _HEAD_H + lane * _LANE_H + (_LANE_H - _BAR_H) / 2
            out.append(_bar(execution, cycle.cycle, x0 + 6, y, bar_w))
        wide = col_w >= 220
        counts = [f"+{len(cycle.promoted)}{' promoted' if wide else ''}"]
        for number, word, letter in (
            (len(cycle.rejected), "rejected", "r"),
            (len(cycle.held), "held", "h"),
            (len(cycle.violations), "violated", "v"),
        ):
            if number:
                counts.append(f"{number} {word}" if wide else f"{number}{letter}")
        tip = (
            f"cycle {cycle.cycle}: {len(cycle.promoted)} promoted, {len(cycle.rejected)} "
            f"rejected, {len(cycle.held)} held, {len(cycle.violations)} violation(s)"
        )
        out.append(
            f'<text class="cycle-foot" x="{_n(x0 + 6)}" y="{height - 7}">'
            f"<title>{tip}</title>{' · '.join(counts)}</text></g>"
        )
    out.append("</svg>")
    note = "".join(f'<p class="note">{esc(text)}</p>' for text in notes)
    return f'{note}<div class="scroll">{"".join(out)}</div>'


# --- the lineage graph ------------------------------------------------------------------------

_NODE_W: Final = 190
_NODE_H: Final = 24
_NODE_GAP: Final = 8
_SUB_W: Final = 262
_PER_COLUMN: Final = 24
_TOP: Final = 34


def _place(facts: Sequence[FactRecord]) -> tuple[dict[str, tuple[float, float]], list[str], float]:
    """Node positions by ref, column headers as SVG, and the graph's height."""
    by_cycle: dict[int, list[FactRecord]] = {}
    for fact in facts:
        by_cycle.setdefault(fact.promotion.cycle, []).append(fact)
    positions: dict[str, tuple[float, float]] = {}
    headers: list[str] = []
    x = 10.0
    rows = 1
    for cycle in sorted(by_cycle):
        group = sorted(by_cycle[cycle], key=lambda f: (KEY_ORDER[f.key], f.promotion.clock))
        label = "inputs" if cycle == 0 else f"cycle {cycle}"
        headers.append(
            f'<text class="col-label" x="{_n(x)}" y="18">{label} · {len(group)} fact(s)</text>'
        )
        for index, fact in enumerate(group):
            column, row = divmod(index, _PER_COLUMN)
            rows = max(rows, row + 1)
            positions[f"{fact.key.value}/{fact.id}"] = (
                x + column * _SUB_W,
                _TOP + row * (_NODE_H + _NODE_GAP),
            )
        x += _SUB_W * ((len(group) - 1) // _PER_COLUMN + 1)
    return positions, headers, _TOP + rows * (_NODE_H + _NODE_GAP) + 6


def _edge(source: tuple[float, float], target: tuple[float, float]) -> str:
    sx, sy = source[0] + _NODE_W, source[1] + _NODE_H / 2
    tx, ty = target[0], target[1] + _NODE_H / 2
    bend = max(30.0, abs(tx - sx) / 2) if tx > sx else 60.0
    control = f"{_n(sx + bend)} {_n(sy)} {_n(tx - bend)} {_n(ty)}"
    return f"M{_n(sx)} {_n(sy)}C{control} {_n(tx - 4)} {_n(ty)}"


def lineage_svg(facts: Sequence[FactRecord], anchors: Mapping[str, str]) -> str:
    """The lineage graph: facts as nodes in columns by promotion cycle, evidence → fact edges.

    `anchors` maps each fact's `"key/id"` to the id of its row in the fact table, so a node
    links to it. Above `LINEAGE_LIMIT` facts only the latest promoted are drawn, with a note.
    """
    if not facts:
        return (
            '<p class="empty" data-count="lineage-nodes" data-value="0">No facts, so no '
            'lineage.<span data-count="lineage-edges" data-value="0"></span></p>'
        )
    shown = list(facts)
    cut = len(shown) > LINEAGE_LIMIT
    if cut:
        shown = sorted(shown, key=lambda f: f.promotion.clock)[-LINEAGE_LIMIT:]
    positions, headers, height = _place(shown)
    known = {f"{fact.key.value}/{fact.id}" for fact in facts}
    edges: list[str] = []
    hidden = dangling = 0
    for fact in shown:
        ref = f"{fact.key.value}/{fact.id}"
        for evidence in fact.evidence:
            source = positions.get(evidence)
            if source is None:
                hidden += evidence in known
                dangling += evidence not in known
                continue
            edges.append(
                f'<path class="edge" data-from="{esc(evidence)}" data-to="{esc(ref)}" '
                f'd="{_edge(source, positions[ref])}" marker-end="url(#arrow)"/>'
            )
    notes: list[str] = []
    if cut:
        notes.append(
            f"Showing the latest {LINEAGE_LIMIT} of {len(facts)} facts (by promotion clock); "
            f"{hidden} edge(s) from older facts are left out. The fact table lists every fact."
        )
    if dangling:
        notes.append(f"{dangling} evidence reference(s) name no fact of this run; not drawn.")
    nodes: list[str] = []
    for fact in shown:
        ref = f"{fact.key.value}/{fact.id}"
        x, y = positions[ref]
        colour = KEY_COLOURS[fact.key]
        tip = (
            f"{ref}\n{short(fact.content, 300)}\nby {fact.provenance} · gate {fact.promotion.gate}"
        )
        nodes.append(
            f'<a href="#{esc(anchors.get(ref, ""))}"><g class="node gate-{fact.promotion.gate}" '
            f'data-ref="{esc(ref)}"><title>{esc(tip)}</title>'
            f'<rect class="node-box" x="{_n(x)}" y="{_n(y)}" width="{_NODE_W}" '
            f'height="{_NODE_H}" rx="4" style="stroke:{colour}"/>'
            f'<rect x="{_n(x)}" y="{_n(y)}" width="5" height="{_NODE_H}" rx="2" '
            f'style="fill:{colour}"/><text class="node-label" x="{_n(x + 11)}" '
            f'y="{_n(y + 16)}">{esc(short(ref, 26))}</text></g></a>'
        )
    width = max((x for x, _ in positions.values()), default=0.0) + _NODE_W + 20
    svg = (
        f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" '
        f'height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" '
        f'aria-label="Lineage graph" data-count="lineage-nodes" data-value="{len(shown)}">'
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0 0L8 4L0 8z" '
        f'class="arrow"/></marker></defs>{"".join(headers)}'
        f'<g class="edges" data-count="lineage-edges" data-value="{len(edges)}">'
        f"{''.join(edges)}</g>{''.join(nodes)}</svg>"
    )
    note = "".join(f'<p class="note">{esc(text)}</p>' for text in notes)
    return f'{note}<div class="scroll">{svg}</div>'
