"""The console's lineage pages: a run's parent and forks, "fork from this cycle", the diff.

A run page shows the run it was forked from (with the cycle and the parent's root there)
and the forks of it among the newest runs, each with a link to the diff page. Below the
timeline, a form picks the cycle to fork from; the fork page takes the changes (inputs as
JSON, retracted facts one per line, cascade, a cycle budget) and posts them. The diff page
shows what `converge diff` prints: where the two runs part, the facts only in one of them
or changed, key by key, and both stop reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final
from urllib.parse import urlencode

from .._core._checkpoint import FactRecord
from .._core._escape import esc
from .._core._record import RunRecord
from .._core._stop import RunStatus
from .._diff import FactSide, KeyDiff, RunDiff
from .._review import SignatureCheck
from ._html import Viewer, hidden, page
from ._pages import run_url
from ._trust import Trust, banner, formation_note

__all__ = [
    "FAMILY_CSS",
    "FactsAt",
    "Family",
    "ForkForm",
    "Forked",
    "diff_page",
    "diff_url",
    "family_box",
    "fork_cycle",
    "fork_from",
    "fork_page",
    "fork_url",
]

SHOWN_FACTS: Final = 500
"""How many of the parent's facts at the fork cycle the fork page lists."""

FAMILY_CSS: Final = (
    "<style>.family { margin: 0 0 14px; padding: 8px 14px; border: 1px solid var(--line); "
    "border-radius: 6px; background: var(--soft); } .family p, .family ul { margin: 4px 0; } "
    "form.fork-from, form.fork { margin: 12px 0; display: flex; flex-wrap: wrap; gap: 8px; "
    "align-items: end; } form.fork { flex-direction: column; align-items: stretch; "
    "max-width: 900px; } form.fork textarea { width: 100%; min-height: 90px; "
    "font-family: var(--mono, monospace); } .facts-at { max-height: 320px; overflow: auto; "
    "font-size: 12.5px; } form.fork-from .muted { font-size: 12.5px; flex-basis: 100%; }"
    "</style>"
)


def fork_url(run_id: str, cycle: int | None = None) -> str:
    """The console path of the form that forks run `run_id` (at `cycle`)."""
    query = "" if cycle is None else f"?{urlencode({'at': cycle})}"
    return f"{run_url(run_id)}/fork{query}"


def diff_url(run_a: str, run_b: str) -> str:
    """The console path of the diff of two runs."""
    return f"/diff?{urlencode({'a': run_a, 'b': run_b})}"


@final
@dataclass(frozen=True, slots=True)
class Forked:
    """A fork of the run a page shows: its id, the cycle it forked at and how it stands."""

    run_id: str
    at_cycle: int
    outcome: str
    failed: bool = False
    """Whether the fork's record failed its signature check."""


@final
@dataclass(frozen=True, slots=True)
class Family:
    """A run's parent (if it is a fork) and its forks among the newest `scanned` runs."""

    parent_present: bool
    """Whether the store holds the parent the record names."""
    forks: tuple[Forked, ...]
    scanned: int
    """How many of the newest runs were searched for forks."""
    parent_failed: str = ""
    """What the parent's failed signature check said (`""`: it did not fail)."""
    lineage_problem: str | None = None
    """Why the run's lineage does not verify (`None`: it does, or the run is no fork)."""
    lineage_checked: bool = True
    """Whether the lineage was checked (a large run's page does not read its facts)."""


def _lineage_check(family: Family) -> str:
    """Whether the lineage verifies, as `converge verify` says it."""
    if not family.lineage_checked:
        return (
            '<p data-lineage="not-checked">Lineage not checked on this page, which does not '
            "read the run&#x27;s facts: <code>converge verify</code> checks it.</p>"
        )
    if family.lineage_problem is not None:
        return (
            '<p class="bad" data-lineage="failed"><b>Lineage does not verify</b>: '
            f"{esc(family.lineage_problem)}.</p>"
        )
    if family.parent_failed:
        against = (
            "checked against the fork alone: the parent's signature check failed "
            f"({esc(family.parent_failed)})"
        )
    elif family.parent_present:
        against = "the parent's record has that root there too"
    else:
        against = "the parent is not in this store: checked against the fork alone"
    return (
        '<p data-lineage="verified">Lineage verified: the fork\'s context before its changes '
        f"has the parent's root at that cycle; {against}.</p>"
    )


def family_box(record: RunRecord, family: Family) -> str:
    """Above the report: the run it was forked from, and its forks (links, and diffs)."""
    parts: list[str] = []
    lineage = record.lineage
    if lineage is not None:
        parent = esc(lineage.parent_run_id)
        how = "replayed, then run live" if lineage.kind == "replay" else "forked"
        removed = (
            f"; retracted {esc(', '.join(lineage.retracted_refs))}" if lineage.retracted else ""
        )
        if family.parent_present and family.parent_failed:
            where = (
                f'<a href="{run_url(lineage.parent_run_id)}" data-parent-link><code>{parent}'
                '</code></a> <b class="bad" data-parent-signature="failed">(its signature check '
                "failed)</b>"
            )
            compare = ""
        elif family.parent_present:
            where = (
                f'<a href="{run_url(lineage.parent_run_id)}" data-parent-link><code>{parent}'
                "</code></a>"
            )
            compare = (
                f' · <a href="{esc(diff_url(lineage.parent_run_id, record.run_id))}" '
                "data-diff-link>compare with its parent</a>"
            )
        else:
            where, compare = f"<code>{parent}</code> (not in this store)", ""
        parts.append(
            f'<p data-parent="{parent}" data-fork-cycle="{lineage.at_cycle}">{how.capitalize()}'
            f" from {where} at cycle {lineage.at_cycle} (parent root "
            f'<code title="{esc(lineage.parent_root)}">{esc(lineage.parent_root[:12])}</code>)'
            f"{removed}{compare}</p>" + _lineage_check(family)
        )
    if family.forks:
        items = "".join(
            f'<li data-fork="{esc(fork.run_id)}"><a href="{run_url(fork.run_id)}"><code>'
            f"{esc(fork.run_id)}</code></a> at cycle {fork.at_cycle}: {esc(fork.outcome)}"
            + (' <b class="bad">(signature check failed)</b>' if fork.failed else "")
            + " · "
            f'<a href="{esc(diff_url(record.run_id, fork.run_id))}">compare</a></li>'
            for fork in family.forks
        )
        parts.append(
            f'<p data-forks="{len(family.forks)}">{len(family.forks)} fork(s) of this run among '
            f"the newest {family.scanned} runs:</p><ul>{items}</ul>"
        )
    if not parts:
        return ""
    return f'{FAMILY_CSS}<div class="family" data-family>{"".join(parts)}</div>'


def fork_from(record: RunRecord) -> str:
    """Below the timeline: a form that opens the fork page at the cycle chosen."""
    if record.status is RunStatus.RUNNING:
        return ""
    last = record.cycles
    return FAMILY_CSS + (
        f'<form class="fork-from" method="get" action="{fork_url(record.run_id)}" data-fork-from>'
        f'<label>Fork from cycle <input type="number" name="at" min="0" max="{last}" '
        f'value="{last}" required></label><button type="submit">Fork from this cycle</button>'
        f'<span class="muted">a new run from this run&#x27;s context at the end of that cycle '
        "(0: its inputs), with your changes, run live with the formation as it is now</span>"
        "</form>"
    )


@final
@dataclass(frozen=True, slots=True)
class ForkForm:
    """What a reviewer typed in the fork form, as typed (shown again with an error)."""

    at: str = ""
    inputs: str = ""
    """A JSON list of proposed facts, as `converge fork --inputs FILE.json` reads."""
    retract: str = ""
    """Fact references (`key/id`, or an id that names one fact), one per line."""
    cascade: bool = False
    max_cycles: str = ""

    @classmethod
    def of(cls, form: dict[str, str]) -> ForkForm:
        """The fields of a posted form."""
        return cls(
            at=form.get("at", "").strip(),
            inputs=form.get("inputs", ""),
            retract=form.get("retract", ""),
            cascade=form.get("cascade", "") == "on",
            max_cycles=form.get("max_cycles", "").strip(),
        )

    @property
    def retracted(self) -> tuple[str, ...]:
        """The references to retract, one per non-blank line."""
        return tuple(line.strip() for line in self.retract.splitlines() if line.strip())


_INPUTS_HINT: Final = (
    '[{"key": "signals", "id": "s2", "content": "a new signal"}]  '
    "(provenance defaults to your reviewer name; payload, evidence and confidence as in "
    "--inputs FILE.json)"
)


@final
@dataclass(frozen=True, slots=True)
class FactsAt:
    """The facts in a run's context at the end of a cycle: how many, and the first ones."""

    count: int
    first: tuple[FactRecord, ...]
    """The first `SHOWN_FACTS` of them, in the record's order."""

    @classmethod
    def of(cls, facts: Sequence[FactRecord], cycle: int) -> FactsAt:
        """Those of `facts` (a record's) promoted by the end of `cycle`."""
        kept = [fact for fact in facts if fact.promotion.cycle <= cycle]
        return cls(len(kept), tuple(kept[:SHOWN_FACTS]))


def _facts_at(facts: FactsAt, cycle: int) -> str:
    count = facts.count
    rows = "".join(
        f"<li><code>{esc(f'{fact.key}/{fact.id}')}</code>: {esc(fact.content[:200])} "
        f'<span class="muted">(cycle {fact.promotion.cycle}, {esc(fact.promotion.suggestor)})'
        "</span></li>"
        for fact in facts.first[:SHOWN_FACTS]
    )
    more = f"<li>... {count - SHOWN_FACTS} more</li>" if count > SHOWN_FACTS else ""
    return (
        f'<details class="facts-at" data-facts-at="{count}"><summary>{count} fact(s) '
        f"in the context at the end of cycle {cycle}</summary><ul>{rows}{more}</ul></details>"
    )


def fork_cycle(record: RunRecord, values: ForkForm) -> int:
    """The cycle the fork page shows the context of: the one typed, at most the last."""
    typed = values.at
    whole = typed.isascii() and typed.isdecimal() and len(typed) <= 10
    return min(int(typed), record.cycles) if whole else record.cycles


def fork_page(
    record: RunRecord,
    *,
    viewer: Viewer,
    found: Trust,
    values: ForkForm,
    error: str = "",
    once: str = "",
    facts: FactsAt | None = None,
) -> str:
    """The fork form for `record` at the cycle `values.at`, with `error` above it.

    `once` identifies this form: posted twice, it forks once. `facts`: those in the context
    at the end of that cycle (`fork_cycle`), when `record` does not hold its facts (a head's).
    """
    run_id = record.run_id
    cycle = fork_cycle(record, values)
    said = (
        f'<div class="message refused" data-message data-fork-error><p>{esc(error)}</p></div>'
        if error
        else ""
    )
    refusal = (
        f'<p class="bad" data-cannot-fork>This console will not fork this run: '
        f"{esc(found.refusal)}.</p>"
        if found.refusal
        else ""
    )
    form = _fork_form(record, viewer=viewer, values=values, cycle=cycle, once=once)
    body = (
        f"<h1>Fork run <code>{esc(run_id)}</code></h1>"
        f'<p><a href="{run_url(run_id)}">back to the run</a></p>'
        f"{said}{refusal}{formation_note(record, found)}"
        '<p class="note">The fork starts from the run\'s context at the end of the cycle '
        "(rebuilt from the stored facts; no suggestor runs for it), applies your changes, and "
        "runs on live. Human decisions after that cycle are not carried over. The page "
        "answers once the fork stops or pauses.</p>"
        f"{form}{_facts_at(FactsAt.of(record.facts, cycle) if facts is None else facts, cycle)}"
    )
    return page(
        f"Fork {run_id}",
        FAMILY_CSS + body,
        viewer=viewer,
        banner=banner(found.check),
        data={"run-id": run_id},
    )


def _fork_form(
    record: RunRecord, *, viewer: Viewer, values: ForkForm, cycle: int, once: str
) -> str:
    """The form itself, filled with `values` (the cycle field with `cycle` when empty)."""
    run_id = record.run_id
    checked = " checked" if values.cascade else ""
    return (
        f'<form class="fork" method="post" action="{fork_url(run_id)}" data-fork-form>'
        f"{hidden('csrf', viewer.csrf)}{hidden('once', once)}"
        f'<label>Fork at the end of cycle (0 to {record.cycles}) <input type="number" '
        f'name="at" min="0" max="{record.cycles}" value="{esc(values.at or cycle)}" required>'
        "</label>"
        "<label>Inputs to add (a JSON list of proposed facts)"
        f'<textarea name="inputs" placeholder="{esc(_INPUTS_HINT)}">{esc(values.inputs)}'
        "</textarea></label>"
        "<label>Facts to retract (key/id, one per line)"
        f'<textarea name="retract">{esc(values.retract)}</textarea></label>'
        f'<label><input type="checkbox" name="cascade"{checked}> cascade: also retract every '
        "fact whose evidence reaches a retracted one</label>"
        "<label>Max cycles (counted from the parent&#x27;s first cycle; empty: the "
        f'formation&#x27;s budget) <input type="number" name="max_cycles" min="1" '
        f'value="{esc(values.max_cycles)}"></label>'
        '<button type="submit">Fork</button></form>'
    )


def _side(fact: FactSide) -> str:
    return (
        f"<code>{esc(fact.id)}</code>: {esc(fact.content)} "
        f'<span class="muted">(by <code>{esc(fact.suggestor)}</code>, cycle {fact.cycle}, '
        f"provenance <code>{esc(fact.provenance)}</code>)</span>"
    )


def _key(diff: KeyDiff) -> str:
    rows: list[str] = []
    for side, mark, count in (
        (diff.only_a, "only in A", diff.only_a_count),
        (diff.only_b, "only in B", diff.only_b_count),
    ):
        which = "a" if mark.endswith("A") else "b"
        rows.extend(f'<li data-only="{which}">{mark}: {_side(fact)}</li>' for fact in side)
        if count > len(side):
            rows.append(f"<li>... {count - len(side)} more {mark}</li>")
    for change in diff.changed:
        rows.append(
            f'<li data-changed="{esc(change.id)}">changed <code>{esc(change.id)}</code> '
            f"({esc(', '.join(change.fields))})<ul><li>A: {_side(change.a)}</li>"
            f"<li>B: {_side(change.b)}</li></ul></li>"
        )
    if diff.changed_count > len(diff.changed):
        rows.append(f"<li>... {diff.changed_count - len(diff.changed)} more changed</li>")
    return (
        f'<section data-diff-key="{esc(diff.key)}"><h3>{esc(diff.key)}</h3>'
        f"<ul>{''.join(rows)}</ul></section>"
    )


def _stopped(diff: RunDiff, side: str) -> str:
    run_id, stop, detail = (
        (diff.run_a, diff.stop_a, diff.detail_a)
        if side == "A"
        else (diff.run_b, diff.stop_b, diff.detail_b)
    )
    reason = "running" if stop is None else stop.value
    return (
        f'<tr data-side="{side}"><td>{side}</td><td><a href="{run_url(run_id)}"><code>'
        f"{esc(run_id)}</code></a></td><td>{esc(reason)}</td><td>{esc(detail)}</td></tr>"
    )


def _narrow(diff: RunDiff, key: str, limit: int) -> str:
    """The form that narrows the diff to one key, or keeps more facts per list."""
    return (
        '<form class="filters" method="get" action="/diff" data-diff-form>'
        f"{hidden('a', diff.run_a)}{hidden('b', diff.run_b)}"
        f'<label>key<input type="search" name="key" value="{esc(key)}"></label>'
        f'<label>facts per list<input type="number" name="limit" min="1" value="{limit}">'
        '</label><button type="submit">Show</button></form>'
    )


def diff_page(
    diff: RunDiff,
    *,
    viewer: Viewer,
    checks: Sequence[SignatureCheck],
    key: str = "",
    limit: int = 200,
) -> str:
    """Where two runs part and how their facts differ, as `converge diff` prints it.

    `key` and `limit` are what the page was asked for (the form shows them again).
    """
    if diff.first_difference is None:
        where = "The same context at the end of every cycle." if diff.same else "Same history."
    else:
        where = (
            f"First difference at the end of cycle {diff.first_difference}: A root "
            f"<code>{esc((diff.root_a or '')[:12])}</code>, B root "
            f"<code>{esc((diff.root_b or '')[:12])}</code>."
        )
    keys = "".join(_key(key) for key in diff.keys) or "<p>No fact differs.</p>"
    failed = [check for check in checks if check.failed]
    top = banner(failed[0]) if failed else "".join(banner(check) for check in checks[:1])
    body = (
        "<h1>Diff</h1><table><thead><tr><th></th><th>run</th><th>stop reason</th>"
        f"<th>detail</th></tr></thead><tbody>{_stopped(diff, 'A')}{_stopped(diff, 'B')}"
        f'</tbody></table><p data-first-difference="{diff.first_difference}">{where}</p>'
        f"{_narrow(diff, key, limit)}{keys}"
    )
    return page("Diff", FAMILY_CSS + body, viewer=viewer, banner=top)
