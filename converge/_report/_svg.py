"""Shared helpers of the HTML run report, and its lineage graph as inline SVG.

Every user-provided text goes through `esc`, which also writes control and invisible
characters (`\\x1b`, `\\u202e`, zero-width characters) as visible escapes, so no text can
reorder or hide what the page shows. The lineage graph needs no script to read, and sizes each
column to its longest label (wrapping labels that are longer still), so no label is cut off.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, islice
from operator import gt
from typing import Final

from .._core._checkpoint import AnyFact, clock_of
from .._core._escape import esc, visible
from .._core._key import AnyKey, ContextKey, key_rank

__all__ = [
    "KEY_COLOURS",
    "LINEAGE_LIMIT",
    "format_ms",
    "key_colour",
    "latest_facts",
    "lineage_svg",
    "num",
    "short",
    "wrap_label",
]

KEY_COLOURS: Final[Mapping[AnyKey, str]] = {
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

_OWN_KEY_COLOUR: Final = "#475569"


def key_colour(key: AnyKey) -> str:
    """`key`'s colour; keys of your own share one."""
    return KEY_COLOURS.get(key, _OWN_KEY_COLOUR)


LINEAGE_LIMIT: Final = 120
"""The lineage graph draws at most this many facts (the latest promoted)."""


def latest_facts(facts: Sequence[AnyFact]) -> list[int]:
    """The indexes of the latest `LINEAGE_LIMIT` facts by promotion clock, in clock order
    (of equal clocks, the later index last): the tail of a stable sort by clock.

    Not a sort of every fact: a record holds each key's facts in promotion order, so the
    latest are among the last `LINEAGE_LIMIT` of each run where the clock never drops; that
    holds of any order, and an altered record only has more, shorter runs.
    """
    clocks = list(map(clock_of, facts))
    drops = compress(range(1, len(clocks)), map(gt, clocks, islice(clocks, 1, None)))
    starts = [0, *drops]
    ends = [*starts[1:], len(clocks)]
    tails = [
        i
        for start, end in zip(starts, ends, strict=True)
        for i in range(max(start, end - LINEAGE_LIMIT), end)
    ]
    return sorted(tails, key=clocks.__getitem__)[-LINEAGE_LIMIT:]


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


def num(value: float) -> str:
    """A coordinate for SVG: one decimal, without a trailing `.0`."""
    return f"{value:.1f}".removesuffix(".0")


def _columns(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def wrap_label(text: str, limit: int) -> list[str]:
    """`text` in lines of at most `limit` columns, broken after `/`, `-`, `:`, `_` or `.`
    when one falls in the second half of a line, else anywhere."""
    lines: list[str] = []
    while sum(map(_columns, text)) > limit:
        used = cut = 0
        while cut < len(text) and used + _columns(text[cut]) <= limit:
            used += _columns(text[cut])
            cut += 1
        cut = max(cut, 1)
        soft = [i + 1 for i in range(cut // 2, cut) if text[i] in "/-:_."]
        best = soft[-1] if soft else cut
        lines.append(text[:best])
        text = text[best:]
    lines.append(text)
    return lines


# --- the lineage graph ------------------------------------------------------------------------

_CHAR_W: Final = 7.0
"""The width of one column of the node labels' 11.5px monospace font, rounded up."""
_LABEL_COLUMNS: Final = 44
"""Labels wider than this many columns wrap onto further lines."""
_MIN_NODE_W: Final = 120.0
_LINE_H: Final = 14
_NODE_GAP: Final = 8
_COLUMN_GAP: Final = 72.0
_PER_COLUMN: Final = 24
_TOP: Final = 34


@dataclass(frozen=True)
class _Node:
    fact: AnyFact
    ref: str
    lines: list[str]
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0

    @property
    def height(self) -> float:
        return 10 + _LINE_H * len(self.lines)


def _sub_columns(group: Sequence[AnyFact], x: float) -> tuple[list[_Node], float]:
    """One cycle's nodes placed in sub-columns of at most `_PER_COLUMN`; and the next x."""
    placed: list[_Node] = []
    for start in range(0, len(group), _PER_COLUMN):
        labels = [
            (fact, f"{fact.key.value}/{fact.id}") for fact in group[start : start + _PER_COLUMN]
        ]
        wrapped = [
            (fact, ref, wrap_label(visible(ref, lines=True), _LABEL_COLUMNS))
            for fact, ref in labels
        ]
        widest = max(sum(map(_columns, line)) for _, _, lines in wrapped for line in lines)
        width = max(_MIN_NODE_W, widest * _CHAR_W + 18)
        y = float(_TOP)
        for fact, ref, lines in wrapped:
            node = _Node(fact, ref, lines, x, y, width)
            placed.append(node)
            y += node.height + _NODE_GAP
        x += width + _COLUMN_GAP
    return placed, x


def _place(facts: Sequence[AnyFact]) -> tuple[dict[str, _Node], list[str], float, float]:
    """Nodes by ref, column headers as SVG, and the graph's width and height."""
    by_cycle: dict[int, list[AnyFact]] = {}
    for fact in facts:
        by_cycle.setdefault(fact.promotion.cycle, []).append(fact)
    nodes: dict[str, _Node] = {}
    headers: list[str] = []
    x = 10.0
    for cycle in sorted(by_cycle):
        group = sorted(by_cycle[cycle], key=lambda f: (key_rank(f.key), f.promotion.clock))
        label = "inputs" if cycle == 0 else f"cycle {cycle}"
        headers.append(
            f'<text class="col-label" x="{num(x)}" y="18">{label} · {len(group)} fact(s)</text>'
        )
        placed, x = _sub_columns(group, x)
        nodes.update((node.ref, node) for node in placed)
    height = max((node.y + node.height for node in nodes.values()), default=_TOP) + 14
    return nodes, headers, x - _COLUMN_GAP + 20, height


def _edge(source: _Node, target: _Node) -> str:
    sx, sy = source.x + source.width, source.y + source.height / 2
    tx, ty = target.x, target.y + target.height / 2
    bend = max(30.0, abs(tx - sx) / 2) if tx > sx else 60.0
    control = f"{num(sx + bend)} {num(sy)} {num(tx - bend)} {num(ty)}"
    return f"M{num(sx)} {num(sy)}C{control} {num(tx - 4)} {num(ty)}"


def _node(node: _Node, anchors: Mapping[str, str]) -> str:
    fact = node.fact
    colour = key_colour(fact.key)
    tip = (
        f"{node.ref}\n{short(fact.content, 300)}\nby {fact.provenance} · gate {fact.promotion.gate}"
    )
    text = "".join(
        f'<tspan x="{num(node.x + 11)}" y="{num(node.y + 16 + index * _LINE_H)}">{esc(line)}'
        "</tspan>"
        for index, line in enumerate(node.lines)
    )
    return (
        f'<a href="#{esc(anchors.get(node.ref, ""))}"><g class="node gate-{fact.promotion.gate}" '
        f'data-ref="{esc(node.ref)}"><title>{esc(tip)}</title>'
        f'<rect class="node-box" x="{num(node.x)}" y="{num(node.y)}" width="{num(node.width)}" '
        f'height="{num(node.height)}" rx="4" style="stroke:{colour}"/>'
        f'<rect x="{num(node.x)}" y="{num(node.y)}" width="5" height="{num(node.height)}" rx="2" '
        f'style="fill:{colour}"/><text class="node-label">{text}</text></g></a>'
    )


def lineage_svg(facts: Sequence[AnyFact], latest: Sequence[int], anchors: Mapping[str, str]) -> str:
    """The lineage graph: facts as nodes in columns by promotion cycle, evidence → fact edges.

    Above `LINEAGE_LIMIT` facts only the `latest` (`latest_facts`) are drawn, with a note.
    `anchors` maps each fact's `"key/id"` to the id of its row in the fact table, so a node
    links to it, and holds every fact a drawn one cites (`FactTable.anchors`, whose tables
    list the drawn facts): evidence it lacks names no fact of the run. The graph sits in a
    horizontally scrolling container, which the page's script scrolls to its right end (the
    latest facts).
    """
    if not facts:
        return (
            '<p class="empty" data-count="lineage-nodes" data-value="0">No facts, so no '
            'lineage.<span data-count="lineage-edges" data-value="0"></span></p>'
        )
    cut = len(facts) > LINEAGE_LIMIT
    shown = [facts[index] for index in latest] if cut else list(facts)
    nodes, headers, width, height = _place(shown)
    edges: list[str] = []
    hidden = dangling = 0
    for node in nodes.values():
        for evidence in node.fact.evidence:
            source = nodes.get(evidence)
            if source is None:
                hidden += evidence in anchors
                dangling += evidence not in anchors
                continue
            edges.append(
                f'<path class="edge" data-from="{esc(evidence)}" data-to="{esc(node.ref)}" '
                f'd="{_edge(source, node)}" marker-end="url(#arrow)"/>'
            )
    notes: list[str] = []
    if cut:
        notes.append(
            f"Showing the latest {LINEAGE_LIMIT} of {len(facts)} facts (by promotion clock); "
            f"{hidden} edge(s) from older facts are left out."
        )
    if dangling:
        notes.append(f"{dangling} evidence reference(s) name no fact of this run; not drawn.")
    svg = (
        f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{num(width)}" '
        f'height="{num(height)}" viewBox="0 0 {num(width)} {num(height)}" role="img" '
        f'aria-label="Lineage graph" data-count="lineage-nodes" data-value="{len(nodes)}">'
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0 0L8 4L0 8z" '
        f'class="arrow"/></marker></defs>{"".join(headers)}'
        f'<g class="edges" data-count="lineage-edges" data-value="{len(edges)}">'
        f"{''.join(edges)}</g>{''.join(_node(node, anchors) for node in nodes.values())}</svg>"
    )
    note = "".join(f'<p class="note">{esc(text)}</p>' for text in notes)
    return f'{note}<div class="scroll lineage-scroll">{svg}</div>'
