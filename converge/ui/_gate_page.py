"""A pending gate's page: the proposal as the signed checkpoint will apply it, and the form.

The page says which rule of the HITL policy held the proposal, what Approve and Reject do
next, which formation resuming imports and whether the record's signature was checked.
Every live gate of a paused run needs a decision when the run resumes, so the form decides
them all: this gate first, the others below it, each with its payload and evidence. With
one gate, two buttons decide it. When the console will not resume the run (a failed
signature check, or an unauthenticated record naming its formation), the page says why
instead of showing the form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from .._core._checkpoint import Checkpoint, FactRecord, restore_fact
from .._core._escape import esc
from .._core._evidence import Cited, evidence_tree
from .._core._exceptions import StoreError
from .._core._hitl import GateRequest
from .._core._key import ContextKey
from .._core._proposal import ProposedFact
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._report._gates import flatten_payload
from .._report._parts import format_time
from ._html import Viewer, hidden, page
from ._pages import gate_url, run_url
from ._trust import Trust, banner, formation_note

__all__ = ["cited", "gate_page", "live_gates"]


def _payload(proposal: ProposedFact) -> str:
    if proposal.payload is None:
        return '<p class="empty">This proposal carries no payload.</p>'
    rows = "".join(
        f'<tr><td class="wrap"><code>{esc(path)}</code></td><td class="wrap">{esc(value)}</td></tr>'
        for path, value in flatten_payload(proposal.payload)
    )
    return (
        f'<table class="payload" data-payload="{esc(proposal.ref)}"><thead><tr><th>field</th>'
        f"<th>value</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _chain(nodes: Sequence[Cited]) -> str:
    """The evidence tree `nodes`, each fact with its own evidence below it, to the seeds."""
    items: list[str] = []
    for node in nodes:
        ref, fact = node.ref, node.fact
        if fact is None:
            items.append(
                f'<li><code>{esc(ref)}</code> <span class="muted">(not a fact of this run)</span>'
            )
            continue
        if node.below is None:
            items.append(f'<li><code>{esc(ref)}</code> <span class="muted">(shown above)</span>')
            continue
        below = _chain(node.below) if node.below else ""
        items.append(
            f'<li data-evidence="{esc(ref)}"><code>{esc(ref)}</code>: {esc(fact.content)} '
            f'<span class="muted">by {esc(fact.provenance)}, cycle {fact.promotion.cycle}'
            f"</span>{below}</li>"
        )
    return f"<ul>{''.join(items)}</ul>"


def _rule(request: GateRequest) -> str:
    if request.rule:
        return f'<dd data-rule="{esc(request.gate_id)}">held because {esc(request.rule)}</dd>'
    return (
        f'<dd data-rule="{esc(request.gate_id)}" class="muted">not recorded (the run was '
        "paused by a converge that did not record it)</dd>"
    )


def _next(request: GateRequest, checkpoint: Checkpoint, reviewer: str, others: int) -> str:
    """What Approve and Reject do next, for this gate."""
    proposal = request.proposal
    cycle = checkpoint.cycle
    then = (
        f"once the {others} other gate(s) of this form are decided too, the run continues"
        if others
        else "the run continues"
    )
    note = f"{ContextKey.DIAGNOSTIC.value}/hitl-rejected:{proposal.id}"
    return (
        f'<div class="next" data-next="{esc(request.gate_id)}">'
        f"<p><b>Approve</b>: the proposal becomes the fact <code>{esc(proposal.ref)}</code>, "
        f"approved by <b>{esc(reviewer)}</b>, in cycle {cycle}; {then} from cycle "
        f"{cycle + 1}.</p>"
        f"<p><b>Reject</b>: the proposal is refused for the rest of the run; the fact "
        f"<code>{esc(note)}</code> records your name and reason; {then} from cycle "
        f"{cycle + 1}.</p></div>"
    )


def _detail(request: GateRequest, facts: Mapping[str, FactRecord]) -> str:
    proposal = request.proposal
    chain = (
        _chain(evidence_tree(proposal.evidence, facts))
        if proposal.evidence
        else '<p class="empty">The proposal cites no evidence.</p>'
    )
    return (
        f'<dl class="proof"><dt>gate</dt><dd><code>{esc(request.gate_id)}</code></dd>'
        f"<dt>rule</dt>{_rule(request)}"
        f"<dt>proposal</dt><dd><code>{esc(proposal.ref)}</code></dd>"
        f'<dt>content</dt><dd data-content="{esc(proposal.ref)}">{esc(proposal.content)}</dd>'
        f"<dt>confidence</dt><dd>{proposal.confidence:.2f}</dd>"
        f"<dt>suggestor</dt><dd><code>{esc(request.suggestor)}</code> "
        f"(#{request.suggestor_id}), cycle {request.cycle}</dd>"
        f"<dt>provenance</dt><dd><code>{esc(proposal.provenance)}</code></dd>"
        f"<dt>deadline</dt><dd>{format_time(request.deadline)}</dd></dl>"
        f"<h3>Payload</h3>{_payload(proposal)}"
        f'<h3>Evidence, back to the seeds</h3><div class="chain">{chain}</div>'
    )


def _choice(request: GateRequest, single: bool, run_id: str, shown: str) -> str:
    """One gate's part of the form, below `shown` (its detail, for every gate but the page's).

    `shown` holds what the page shows of the gate: its detail and what each button does.
    """
    gate = request.gate_id
    reason = (
        f'<label>reason (recorded with the decision)<textarea name="reason:{esc(gate)}" '
        'maxlength="2000"></textarea></label>'
    )
    if single:
        buttons = (
            f'<button class="approve" type="submit" name="gate:{esc(gate)}" value="approve">'
            f'Approve</button> <button class="reject" type="submit" name="gate:{esc(gate)}" '
            'value="reject">Reject</button>'
        )
        return f'<fieldset class="decide" data-decide="{esc(gate)}">{reason}{buttons}</fieldset>'
    radios = "".join(
        f'<label><input type="radio" name="gate:{esc(gate)}" value="{value}" required> '
        f"{value}</label> "
        for value in ("approve", "reject")
    )
    return (
        f'<fieldset class="decide" data-decide="{esc(gate)}"><legend><a href="'
        f'{gate_url(run_id, gate)}"><code>{esc(gate)}</code></a>: {esc(request.summary)}'
        f"</legend>{shown}{radios}{reason}</fieldset>"
    )


def cited(source: RunRecord | RecordHead) -> dict[str, FactRecord]:
    """The facts a gate page may show, by `"key/id"`.

    A record's own, or those a paused run's head cites, each checked against its digest.

    Raises:
        StoreError: A fact the head cites does not match its digest.
    """
    if isinstance(source, RunRecord):
        return {f"{fact.key.value}/{fact.id}": fact for fact in source.facts}
    facts: dict[str, FactRecord] = {}
    for fact in source.cited:
        try:
            restore_fact(fact)
        except ValueError as error:
            raise StoreError(
                f"run {source.record.run_id}: a fact its gates cite was changed ({error})"
            ) from None
        facts[f"{fact.key.value}/{fact.id}"] = fact
    return facts


def live_gates(checkpoint: Checkpoint, now: datetime) -> list[GateRequest]:
    """The gates a reviewer still decides: those whose deadline has not passed."""
    return [g for g in checkpoint.pending if g.deadline is None or g.deadline > now]


def _form(
    record: RunRecord,
    checkpoint: Checkpoint,
    gate_id: str,
    live: list[GateRequest],
    viewer: Viewer,
    facts: Mapping[str, FactRecord],
) -> str:
    expired = len(record.pending) - len(live)
    note = (
        f"<p class='note'>{expired} gate(s) passed their deadline: their timeout decides them "
        "when the run resumes.</p>"
        if expired
        else ""
    )
    single = len(live) == 1
    if len(live) > 1:
        note += (
            f"<p class='note'>This run waits on {len(live)} gates; it resumes when all are "
            "decided, so this form decides them all.</p>"
        )
    others = len(live) - 1
    choices = "".join(
        _choice(
            one,
            single,
            record.run_id,
            ""
            if one.gate_id == gate_id
            else _detail(one, facts) + _next(one, checkpoint, viewer.name, others),
        )
        for one in live
    )
    submit = "" if single else '<button type="submit">Submit the decisions</button>'
    if not live:
        submit = '<button type="submit">Resume the run</button>'
    return (
        f'<form method="post" action="{gate_url(record.run_id, gate_id)}" data-decision-form>'
        f"{hidden('csrf', viewer.csrf)}{hidden('version', record.version)}{note}{choices}{submit}"
        f"<p class='note'>You decide as <b>{esc(viewer.name)}</b>.</p></form>"
    )


def gate_page(
    record: RunRecord,
    checkpoint: Checkpoint,
    gate_id: str,
    *,
    facts: Mapping[str, FactRecord],
    viewer: Viewer,
    now: datetime,
    found: Trust,
) -> str:
    """The gate `gate_id` of the paused run `record`, and the form deciding every live gate.

    `facts` holds, by `"key/id"`, at least the facts the evidence trees of the live gates
    cite (`cited_facts`). When the console will not resume the run, the page says why
    instead of the form.
    """
    live = sorted(live_gates(checkpoint, now), key=lambda g: g.gate_id != gate_id)
    [request] = [g for g in checkpoint.pending if g.gate_id == gate_id]
    others = max(len(live) - 1, 0) if any(g.gate_id == gate_id for g in live) else len(live)
    if found.refusal:
        decide = (
            f'<div class="message refused" data-cannot-resume><p>You cannot decide here: '
            f"{esc(found.refusal)}.</p></div>"
        )
    else:
        decide = _form(record, checkpoint, gate_id, live, viewer, facts)
    body = (
        f'<p><a href="{run_url(record.run_id)}">run <code>{esc(record.run_id)}</code></a>'
        f"{' (' + esc(record.name) + ')' if record.name else ''}</p>"
        f"<h1>Gate: {esc(request.summary)}</h1>{formation_note(record, found)}"
        f"{_detail(request, facts)}<h3>What each button does</h3>"
        f"{_next(request, checkpoint, viewer.name, others)}<h2>Decide</h2>{decide}"
    )
    return page(f"Gate {gate_id}", body, viewer=viewer, banner=banner(found.check))
