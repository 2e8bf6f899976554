"""Building blocks of the HTML run report: tables, sections, counts, links, times.

Shared by the modules that write the report's sections (`_report`, `_report_header`,
`_report_gates`); every user-provided text goes through `esc`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final

from .._core._escape import esc
from .._core._invariant import Violation
from .._core._record import RunRecord
from .._core._trace import Execution, RunTimes
from ._svg import format_ms

__all__ = [
    "RunTimes",
    "count_stat",
    "executions",
    "format_seconds",
    "format_time",
    "ref_html",
    "ref_link",
    "run_times",
    "section",
    "table",
    "violations",
]

_RIGHT: Final = ' class="num"'
_BREAK: Final = re.compile(r"([/\-:])")


def count_stat(name: str, value: int, label: str, *, level: str = "") -> str:
    """A count in the header: `data-count` and `data-value` carry it for tools and tests."""
    cls = f"stat {level}".strip()
    return (
        f'<div class="{cls}"><b data-count="{name}" data-value="{value}">{value}</b>'
        f"<span>{esc(label)}</span></div>"
    )


def table(
    headers: Sequence[str],
    rows: Iterable[str],
    *,
    kind: str,
    widths: Sequence[int] = (),
    right: Sequence[int] = (),
    attrs: str = "",
) -> str:
    """A table; `widths` (percentages) fix the layout; `right` columns are right-aligned."""
    cols = "".join(f'<col style="width:{width}%">' for width in widths)
    head = "".join(
        f"<th{_RIGHT if index in right else ''}>{esc(header)}</th>"
        for index, header in enumerate(headers)
    )
    fixed = " fixed" if widths else ""
    return (
        f'<table class="{kind}{fixed}"{attrs}><colgroup>{cols}</colgroup><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def section(ident: str, title: str, body: str, *, count: int | None = None) -> str:
    """A titled `<section>`, its count (if any) beside the title."""
    badge = "" if count is None else f' <span class="muted">({count})</span>'
    return f'<section id="{ident}"><h2>{esc(title)}{badge}</h2>{body}</section>'


def ref_html(ref: str) -> str:
    """A `key/id` reference as escaped HTML that may break after `/`, `-` or `:`."""
    return "".join(
        esc(part) + ("<wbr>" if _BREAK.fullmatch(part) else "") for part in _BREAK.split(ref)
    )


def ref_link(ref: str, anchors: dict[str, str]) -> str:
    """A reference linked to its fact's row, or marked when no fact has it, or when the
    report leaves its fact out (its anchor is `""`). An anchor with a `#` is a whole link
    (a row on another page); any other is the id of a row on this page."""
    anchor = anchors.get(ref)
    if anchor is None:
        return f'<code class="ref">{ref_html(ref)}</code> <span class="muted">(no such fact)</span>'
    if not anchor:
        return f'<code class="ref">{ref_html(ref)}</code> <span class="muted">(not listed)</span>'
    href = esc(anchor) if "#" in anchor else f"#{anchor}"  # another page's row, or this one's
    return f'<a href="{href}"><code class="ref">{ref_html(ref)}</code></a>'


def violations(record: RunRecord) -> list[Violation]:
    """Every recorded violation: the inputs', then each cycle's."""
    found = list(record.trace.input_violations)
    for cycle in record.trace.cycles:
        found.extend(cycle.violations)
    return found


def executions(record: RunRecord) -> list[tuple[int, Execution]]:
    """Every execution with its cycle number, in order."""
    return [(cycle.cycle, e) for cycle in record.trace.cycles for e in cycle.executions]


def run_times(record: RunRecord) -> RunTimes:
    """The run's times from its cycles; `None` for what an older record did not keep."""
    return record.trace.times()


def format_time(moment: datetime | None) -> str:
    """`2026-12-01 13:06:16 UTC` (a naive time is taken as UTC), or `—`."""
    if moment is None:
        return "—"
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_seconds(seconds: float | None) -> str:
    """A run's duration for people: `0.42 ms`, `12.3 ms`, `4.20 s`, `3 min 05 s`, or `—`."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return format_ms(seconds * 1000)
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"
