"""The run report's timeline: every execution of a run on one time axis, as inline SVG.

The x axis is the run's own time (`CycleTrace.at_seconds`: a human's wait is left out), with
ticks in its units; one lane per suggestor in registration order. A cycle's executions start
together at the cycle's start, so each is a bar from there as long as its duration. Records
written before cycles carried their times are laid end to end, each cycle as long as its
slowest execution, with a note saying so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from .._core._escape import esc
from .._core._trace import CycleTrace, Execution, RunTrace
from ._svg import format_ms, num, short

__all__ = ["TIMELINE_CYCLE_LIMIT", "TIMELINE_LANE_LIMIT", "cycle_starts", "timeline_svg"]

TIMELINE_CYCLE_LIMIT: Final = 500
"""The timeline draws at most this many cycles (the latest)."""
TIMELINE_LANE_LIMIT: Final = 30
"""Above this many suggestors, the slowest this many get a lane and the rest share one."""

_LABEL_W: Final = 200
_PLOT_X: Final = 210.0
_PLOT_W: Final = 960.0
_LANE_H: Final = 26
_BAR_H: Final = 14
_HEAD_H: Final = 46
_FOOT_H: Final = 30
_OTHERS: Final = "\x00others"


def longest_ms(cycle: CycleTrace) -> float:
    """The duration of the cycle's slowest execution, in milliseconds (0 without any)."""
    return max((e.duration_ms for e in cycle.executions), default=0.0)


def cycle_starts(cycles: Sequence[CycleTrace]) -> tuple[list[float], bool]:
    """Each cycle's start in seconds from the first one's; and whether the record timed them.

    Untimed records (from before `at_seconds`) get their cycles laid end to end.
    """
    timed = all(cycle.at_seconds is not None for cycle in cycles)
    starts: list[float] = []
    clock = 0.0
    origin = (cycles[0].at_seconds or 0.0) if cycles else 0.0
    for cycle in cycles:
        at = cycle.at_seconds
        starts.append(at - origin if timed and at is not None else clock)
        clock += longest_ms(cycle) / 1000
    return starts, timed


def _lanes(cycles: Sequence[CycleTrace]) -> tuple[list[str], dict[str, int], int]:
    """Lane names in registration order (slowest kept above the limit), each suggestor's
    lane index, and how many suggestors share the "others" lane."""
    ids: dict[str, int] = {}
    total: dict[str, float] = {}
    for cycle in cycles:
        for execution in cycle.executions:
            ids.setdefault(execution.suggestor, execution.suggestor_id)
            total[execution.suggestor] = total.get(execution.suggestor, 0.0) + execution.duration_ms
    names = sorted(ids, key=lambda name: (ids[name], name))
    others = 0
    if len(names) > TIMELINE_LANE_LIMIT:
        slowest = set(sorted(names, key=lambda n: (-total[n], ids[n]))[:TIMELINE_LANE_LIMIT])
        others = len(names) - len(slowest)
        lanes = [name for name in names if name in slowest] + [_OTHERS]
    else:
        lanes = names
    index = {name: i for i, name in enumerate(lanes)}
    lane_of = {name: index.get(name, len(lanes) - 1) for name in names}
    return lanes, lane_of, others


def _step(span: float) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving 4 to 10 ticks over `span`."""
    raw = span / 6
    power = 10 ** math.floor(math.log10(raw))
    return next(f * power for f in (1, 2, 5, 10) if f * power >= raw)


def _tick_label(seconds: float, step: float) -> str:
    if step < 1:
        ms = seconds * 1000
        decimals = max(0, -math.floor(math.log10(step * 1000) + 1e-9))
        return f"{ms:.{decimals}f} ms"
    if step < 60 or step % 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


@dataclass(frozen=True)
class _Axis:
    span: float
    width: float

    def x(self, seconds: float) -> float:
        return _PLOT_X + seconds / self.span * self.width

    def ticks(self, bottom: float) -> str:
        step = _step(self.span)
        out = [
            f'<g class="axis"><line x1="{_PLOT_X}" y1="{bottom}" x2="{num(self.x(self.span))}"'
            f' y2="{bottom}"/>'
        ]
        for index in range(int(self.span / step + 1e-9) + 1):
            x = self.x(index * step)
            out.append(
                f'<line x1="{num(x)}" y1="{bottom}" x2="{num(x)}" y2="{bottom + 4}"/>'
                f'<text class="tick" x="{num(x)}" y="{bottom + 16}" text-anchor="middle">'
                f"{_tick_label(index * step, step)}</text>"
            )
        out.append("</g>")
        return "".join(out)


def _marker(outcome: str, x: float, y: float) -> str:
    """A failure cross or a timeout clock centred on (x, y)."""
    if outcome == "failed":
        return (
            f'<g class="marker marker-failed"><circle cx="{num(x)}" cy="{num(y)}" r="7"/>'
            f'<path d="M{num(x - 3)} {num(y - 3)}L{num(x + 3)} {num(y + 3)}'
            f'M{num(x + 3)} {num(y - 3)}L{num(x - 3)} {num(y + 3)}"/></g>'
        )
    return (
        f'<g class="marker marker-timed_out"><circle cx="{num(x)}" cy="{num(y)}" r="7"/>'
        f'<path d="M{num(x)} {num(y - 4)}L{num(x)} {num(y)}L{num(x + 3)} {num(y + 2)}"/></g>'
    )


def _bar(execution: Execution, cycle: int, x: float, y: float, width: float) -> str:
    outcome = execution.outcome
    tip = [
        f"{execution.suggestor} · cycle {cycle} · {outcome.replace('_', ' ')}",
        f"{format_ms(execution.duration_ms)}, {execution.proposals} proposal(s), "
        f"{execution.tokens} token(s)",
    ]
    if execution.phase == "accepts":
        tip.append("failed in accepts()")
    if execution.error:
        tip.append(execution.error)
    metadata = execution.metadata
    if isinstance(metadata, Mapping) and "worker_pid" in metadata:  # an isolated call
        worker = f"in worker process {metadata['worker_pid']}"
        killed = metadata.get("kill_reason")
        tip.append(worker if killed is None else f"{worker}, killed: {killed}")
    parts = [
        f'<g class="exec exec-{outcome}" data-outcome="{outcome}" data-cycle="{cycle}" '
        f'data-suggestor="{esc(execution.suggestor)}" data-x="{x - _PLOT_X:.3f}" '
        f'data-width="{width:.3f}"><title>{esc(chr(10).join(tip))}</title>',
        f'<rect class="bar" x="{num(x)}" y="{num(y)}" width="{max(width, 2.0):.1f}" '
        f'height="{_BAR_H}" rx="2"/>',
    ]
    if outcome != "ok":
        parts.append(_marker(outcome, x + max(width, 2.0) + 9, y + _BAR_H / 2))
    parts.append("</g>")
    return "".join(parts)


def _held_cycle(gate_id: str) -> int | None:
    """The cycle in a gate id `gate:{cycle}:{key}/{id}`, or `None` when it has none."""
    parts = gate_id.split(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _human_marks(trace: RunTrace, at: dict[int, float], ends: dict[int, float]) -> list[str]:
    """Diamonds for the decisions applied on resume, dashed lines for continuations."""
    decided: dict[int, list[str]] = {}
    for decision in trace.decisions:
        cycle = _held_cycle(decision.gate_id)
        if cycle is not None:
            verdict = "approved" if decision.approved else "rejected"
            decided.setdefault(cycle, []).append(f"{decision.gate_id}: {verdict} by {decision.by}")
    out: list[str] = []
    for cycle, lines in sorted(decided.items()):
        x = at.get(cycle + 1, ends.get(cycle))
        if x is None:
            continue
        tip = f"resumed after cycle {cycle} with {len(lines)} decision(s):\n" + "\n".join(lines)
        out.append(
            f'<g class="human" data-human="{cycle}"><title>{esc(tip)}</title>'
            f'<path d="M{num(x)} 24l6 7-6 7-6-7z"/><line x1="{num(x)}" y1="38" x2="{num(x)}" '
            f'y2="{_HEAD_H}"/></g>'
        )
    for continuation in trace.continuations:
        after = continuation.after_cycle
        x = at.get(after + 1, ends.get(after))
        if x is None:
            continue
        out.append(
            f'<g class="continuation" data-continuation="{after}"><title>continued after cycle '
            f"{after} ({continuation.cause})</title>"
            f'<path d="M{num(x - 5)} 26h10v10h-10z"/></g>'
        )
    return out


def timeline_svg(trace: RunTrace) -> str:
    """The timeline: one lane per suggestor, one bar per execution, on the run's time axis."""
    cycles = list(trace.cycles)
    if not cycles:
        return '<p class="empty">No cycle ran: the inputs alone ended the run.</p>'
    notes: list[str] = []
    if len(cycles) > TIMELINE_CYCLE_LIMIT:
        notes.append(f"Showing the latest {TIMELINE_CYCLE_LIMIT} of {len(cycles)} cycles.")
        cycles = cycles[-TIMELINE_CYCLE_LIMIT:]
    starts, timed = cycle_starts(cycles)
    if not timed:
        notes.append(
            "This record has no cycle start times (it predates them): its cycles are laid end "
            "to end, each as long as its slowest execution."
        )
    lanes, lane_of, others = _lanes(cycles)
    if others:
        notes.append(
            f"{len(lanes) - 1} slowest of {len(lanes) - 1 + others} suggestors have a lane; "
            f"the other {others} share the last one."
        )
    span = max(s + longest_ms(c) / 1000 for s, c in zip(starts, cycles, strict=True))
    axis = _Axis(
        span=span if span > 0 else 0.001, width=max(_PLOT_W, min(12.0 * len(cycles), 12_000.0))
    )
    width = _PLOT_X + axis.width + 30
    bottom = _HEAD_H + _LANE_H * max(len(lanes), 1)
    height = bottom + _FOOT_H
    out = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{num(width)}" '
        f'height="{num(height)}" viewBox="0 0 {num(width)} {num(height)}" role="img" '
        'aria-label="Timeline">'
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" class="hatch-bg"/>'
        '<line x1="0" y1="0" x2="0" y2="6" class="hatch-line"/></pattern></defs>'
    ]
    for index, name in enumerate(lanes):
        y = _HEAD_H + index * _LANE_H
        label = f"others ({others})" if name == _OTHERS else name
        out.append(
            f'<g class="lane" data-lane="{esc(label)}"><rect class="lane-bg lane-{index % 2}" '
            f'x="0" y="{y}" width="{num(width)}" height="{_LANE_H}"/>'
            f'<text class="lane-label" x="8" y="{y + _LANE_H / 2 + 4:.0f}"><title>{esc(label)}'
            f"</title>{esc(short(label, 27))}</text></g>"
        )
    if not lanes:
        out.append(f'<text class="idle" x="8" y="{_HEAD_H + 17}">No suggestor was eligible.</text>')
    at = {c.cycle: axis.x(s) for s, c in zip(starts, cycles, strict=True)}
    ends = {c.cycle: axis.x(s + longest_ms(c) / 1000) for s, c in zip(starts, cycles, strict=True)}
    out.append(_cycle_rules(cycles, at, bottom))
    for start, cycle in zip(starts, cycles, strict=True):
        for execution in cycle.executions:
            y = _HEAD_H + lane_of[execution.suggestor] * _LANE_H + (_LANE_H - _BAR_H) / 2
            bar = execution.duration_ms / 1000 / axis.span * axis.width
            out.append(_bar(execution, cycle.cycle, axis.x(start), y, bar))
    out.extend(_human_marks(trace, at, ends))
    out.append(axis.ticks(bottom))
    out.append("</svg>")
    note = "".join(f'<p class="note">{esc(text)}</p>' for text in notes)
    return f'{note}<div class="scroll">{"".join(out)}</div>'


def _cycle_rules(cycles: Sequence[CycleTrace], at: dict[int, float], bottom: float) -> str:
    """A faint vertical line at each cycle's start, numbered where there is room."""
    out: list[str] = []
    last_label = -math.inf
    for cycle in cycles:
        x = at[cycle.cycle]
        tip = (
            f"cycle {cycle.cycle}: {len(cycle.executions)} execution(s), "
            f"{len(cycle.promoted)} promoted, {len(cycle.rejected)} rejected, "
            f"{len(cycle.held)} held, {len(cycle.violations)} violation(s)"
        )
        label = ""
        if x - last_label >= 22:
            last_label = x
            label = f'<text class="cycle-label" x="{num(x + 3)}" y="14">{cycle.cycle}</text>'
        out.append(
            f'<g class="cycle" data-cycle="{cycle.cycle}"><title>{tip}</title>'
            f'<line class="cycle-rule" x1="{num(x)}" y1="2" x2="{num(x)}" y2="{num(bottom)}"/>'
            f"{label}</g>"
        )
    return "".join(out)
