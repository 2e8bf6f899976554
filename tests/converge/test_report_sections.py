"""The HTML run report's sections: header times, summary, held proposals, badge, timeline."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime

import anyio
from pydantic import JsonValue

from converge import (
    ContextKey,
    Engine,
    GateDecision,
    HitlPolicy,
    ProposedFact,
    RunRecord,
    render_report,
)
from converge._report._gates import flatten_payload
from converge._report._header import SUMMARY_FACT_LIMIT
from converge._report._render import report_body
from converge_suggestors import SeedSuggestor
from tests.converge.test_report import Page, rich_records
from tests.doubles import FirstCycleOnly

H = ContextKey.HYPOTHESES
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>\x1b[31m\u202eevil'
DEAL: JsonValue = {
    "terms": {"amount": 420000, "currency": "EUR", "extras": {}},
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
    "tags": [],
    "approved": None,
}


def held(
    ident: str, content: str, payload: object = None, evidence: tuple[str, ...] = ()
) -> ProposedFact:
    return ProposedFact.model_validate(
        {
            "key": H,
            "id": ident,
            "content": content,
            "provenance": "dealer",
            "confidence": 0.3,
            "payload": payload,
            "evidence": evidence,
        }
    )


def gated_engine(*proposals: ProposedFact) -> Engine:
    engine = Engine(hitl=HitlPolicy(confidence_below=0.5))
    engine.register_suggestor(SeedSuggestor("goal", "Close the deal"))
    engine.register_suggestor(FirstCycleOnly("dealer", "ok", proposals))
    return engine


@functools.cache
def paused_deal() -> RunRecord:
    """A run paused on two gates: a deal with a nested payload, and a hostile one."""
    proposals = (
        held("deal", "Sign the ACME deal", DEAL, evidence=("seeds/goal",)),
        held("hostile", HOSTILE, {HOSTILE: HOSTILE}),
    )
    return RunRecord.of(anyio.run(gated_engine(*proposals).run), name="deals", formation="deals.py")


def gate_of(record: RunRecord, ident: str) -> str:
    return next(g.gate_id for g in record.pending if g.proposal.id == ident)


# --- header -----------------------------------------------------------------------------------


def test_report_header_shows_formation_and_times() -> None:
    record = paused_deal()
    page = Page(render_report(record))
    first, last = record.trace.cycles[0], record.trace.cycles[-1]
    assert first.started_at is not None
    assert last.at_seconds is not None
    started = page.with_attr("data-started")[0]["data-started"]
    assert started == first.started_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = "".join(page.text)
    assert first.started_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") in text
    assert page.with_attr("data-ended")[0]["data-ended"] >= started
    duration = float(page.with_attr("data-duration")[0]["data-duration"])
    slowest = max(e.duration_ms for e in last.executions) / 1000
    assert abs(duration - (last.at_seconds + slowest)) < 1e-5
    assert page.with_attr("data-formation-name")
    assert "deals.py" in text
    assert "<h1>deals</h1>" in render_report(record)


def test_report_header_shows_a_dash_for_times_an_old_record_lacks() -> None:
    record = paused_deal()
    cycles = tuple(
        c.model_copy(update={"started_at": None, "at_seconds": None}) for c in record.trace.cycles
    )
    old = record.model_copy(update={"trace": record.trace.model_copy(update={"cycles": cycles})})
    html = render_report(old)
    page = Page(html)
    for name in ("data-started", "data-ended", "data-duration"):
        assert page.with_attr(name, "")
    assert re.search(r'data-started="">—<', html)
    assert re.search(r'data-duration=""[^>]*>—<', html)
    assert "laid end to end" in html


# --- summary ----------------------------------------------------------------------------------


def test_report_summary_says_what_waits_and_links_to_the_held_proposals() -> None:
    page = Page(render_report(paused_deal()))
    assert "summary" in page.ids()
    assert "held" in page.ids()
    assert page.with_attr("data-summary", "pending")
    assert page.with_attr("href", "#held")
    assert "2 proposal(s) wait for a human decision" in "".join(page.text)


async def test_report_summary_shows_decisions_and_the_last_promoted_facts() -> None:
    seeds = [SeedSuggestor(f"s{index}", f"seed {index}") for index in range(SUMMARY_FACT_LIMIT + 3)]
    engine = Engine(hitl=HitlPolicy(confidence_below=0.5))
    for seed in seeds:
        engine.register_suggestor(seed)
    engine.register_suggestor(FirstCycleOnly("dealer", "ok", [held("deal", "Sign", DEAL)]))
    paused = await engine.run()
    assert paused.checkpoint is not None
    decision = GateDecision.reject(paused.pending[0].gate_id, by="jane", reason="too <much>")
    record = RunRecord.of(await engine.resume(paused.checkpoint, [decision]))
    html = render_report(record)
    page = Page(html)
    decided = page.with_attr("data-summary-decision", paused.pending[0].gate_id)
    assert decided
    assert "too &lt;much&gt;" in html
    assert "by <b>jane</b>" in html
    last = next(c for c in reversed(record.trace.cycles) if c.promoted)
    shown = [a["data-summary-fact"] for a in page.with_attr("data-summary-fact")]
    assert shown == list(last.promoted[:SUMMARY_FACT_LIMIT])
    more = len(last.promoted) - SUMMARY_FACT_LIMIT
    assert more <= 0 or f"and {more} more" in html


# --- held proposals ---------------------------------------------------------------------------


def payload_rows(html: str, gate: str) -> dict[str, str]:
    start = html.index(f'data-payload="{gate}"')
    chunk = html[start : html.index("</table>", start)]
    cells = re.findall(r"<td[^>]*><code>(.*?)</code></td>", chunk)
    return dict(zip(cells[::2], cells[1::2], strict=True))


def test_report_shows_each_held_proposal_with_its_full_payload() -> None:
    record = paused_deal()
    html = render_report(record)
    gate = gate_of(record, "deal")
    rows = payload_rows(html, gate)
    assert rows["terms.amount"] == "420000"
    assert rows["terms.currency"] == "&quot;EUR&quot;"
    assert rows["terms.extras"] == "{}"
    assert rows["items[0].sku"] == "&quot;A-1&quot;"
    assert rows["items[1].qty"] == "1"
    assert rows["tags"] == "[]"
    assert rows["approved"] == "null"
    page = Page(html)
    assert [a["data-gate"] for a in page.with_attr("data-gate")] == [
        g.gate_id for g in record.pending
    ]
    assert "Sign the ACME deal" in "".join(page.text)
    assert page.with_attr(
        "href", "#" + next(a["id"] for a in page.with_attr("data-fact", "seeds/goal"))
    )


def test_flatten_payload_gives_a_non_object_payload_one_row() -> None:
    assert flatten_payload([1, {"a": 2}]) == [("(value)", '[1, {"a": 2}]')]
    assert flatten_payload("text") == [("(value)", '"text"')]
    assert flatten_payload({}) == [("(value)", "{}")]
    assert flatten_payload({"a b": {"c": True}}) == [('["a b"].c', "true")]


def test_report_gives_the_commands_that_decide_every_pending_gate() -> None:
    record = paused_deal()
    html = render_report(record, store_argument=" --store /tmp/runs.db")
    deal, hostile = gate_of(record, "deal"), gate_of(record, "hostile")
    run = record.run_id
    assert f"converge review {run} --store /tmp/runs.db</pre>" in html
    assert (
        f"converge resume {run} --approve {deal} {hostile} --by NAME --store /tmp/runs.db" in html
    )
    assert (
        f"converge resume {run} --reject {deal} --approve {hostile} --by NAME --reason "
        "&quot;...&quot; --store /tmp/runs.db" in html
    )
    assert "names all of them" in html
    assert "--store" not in render_report(record).split('id="summary"')[1].split("Decide")[0]


def test_report_body_links_each_pending_gate_to_the_console() -> None:
    record = paused_deal()
    body = report_body(record, gate_href=lambda gate: f"/runs/x/gates/{gate}?a=1&b=2")
    page = Page(body)
    links = [a["href"] for a in page.with_attr("class", "console")]
    assert links == [f"/runs/x/gates/{g.gate_id}?a=1&b=2" for g in record.pending]
    assert "Review in the console" in body
    assert "<html" not in body
    assert "<style" not in body
    assert "<script" not in body
    assert report_body(record) in render_report(record)


def test_report_renders_hostile_text_in_a_payload_and_a_gate_summary_inert() -> None:
    record = paused_deal()
    gate = next(g for g in record.pending if g.proposal.id == "hostile")
    assert gate.summary == HOSTILE
    html = render_report(record)
    page = Page(html)
    assert "<img" not in html
    assert "\x1b" not in html
    assert "\u202e" not in html
    assert [tag for tag, _ in page.tags].count("script") == 1
    assert not [attrs for _, attrs in page.tags if "onerror" in attrs]
    rows = payload_rows(html, gate.gate_id)
    assert len(rows) == 1
    ((key, value),) = rows.items()
    assert "&lt;script&gt;" in key
    assert "\\u001b[31m" in key
    assert "\\u202e" in key
    assert "&lt;img src=x onerror=alert(2)&gt;" in value
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img" in html


# --- badge ------------------------------------------------------------------------------------


def test_report_badge_is_not_green_when_a_suggestor_failed() -> None:
    record = rich_records()[1]
    assert record.trace.failures()
    badge = Page(render_report(record)).with_attr("data-badge")[0]
    assert badge["data-stop-reason"] == "converged"
    assert "stop-converged " not in badge["class"] + " "
    assert "stop-converged_with_failures" in badge["class"]


async def test_report_badge_is_green_for_a_clean_run() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("goal", "Ship"))
    record = RunRecord.of(await engine.run())
    badge = Page(render_report(record)).with_attr("data-badge")[0]
    assert badge["class"] == "badge stop-converged"


# --- timeline ---------------------------------------------------------------------------------


def test_report_timeline_draws_one_time_axis_over_the_whole_run() -> None:
    """A cycle whose execution lasts 5 times as long draws a bar 5 times as wide."""
    record = paused_deal()
    first = record.trace.cycles[0]
    one = first.model_copy(
        update={
            "executions": tuple(
                e.model_copy(update={"duration_ms": 10.0}) for e in first.executions
            )
        }
    )
    two = first.model_copy(
        update={
            "cycle": 2,
            "executions": tuple(
                e.model_copy(update={"duration_ms": 50.0}) for e in first.executions
            ),
            "at_seconds": (first.at_seconds or 0.0) + 0.2,
            "started_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )
    trace = record.trace.model_copy(update={"cycles": (one, two)})
    page = Page(render_report(record.model_copy(update={"trace": trace})))
    bars = page.with_attr("data-width")
    short_bar = next(b for b in bars if b["data-cycle"] == "1")
    long_bar = next(b for b in bars if b["data-cycle"] == "2")
    ratio = float(long_bar["data-width"]) / float(short_bar["data-width"])
    assert 4.9 < ratio < 5.1
    gap = float(long_bar["data-x"]) - float(short_bar["data-x"])
    assert 19.9 < gap / float(short_bar["data-width"]) < 20.1
    markers = [a["data-cycle"] for _, a in page.tags if a.get("class") == "cycle"]
    assert markers == ["1", "2"]
    assert any(text.endswith(" ms") for text in page.text)


def test_report_timeline_marks_human_decisions() -> None:
    page = Page(render_report(rich_records()[1]))
    assert page.with_attr("data-human")


# --- facts and lineage ------------------------------------------------------------------------


async def test_report_wraps_long_evidence_refs_and_labels() -> None:
    long_id = "customer-" + "x" * 30 + ":region/eu-west-1:segment-enterprise"
    inputs = [
        ProposedFact(key=ContextKey.SEEDS, id=long_id, content="a", provenance="input"),
        ProposedFact(
            key=H, id="claim", content="b", provenance="input", evidence=(f"seeds/{long_id}",)
        ),
    ]
    html = render_report(RunRecord.of(await Engine().run(inputs=inputs)))
    assert "seeds/<wbr>customer-<wbr>" in html
    assert re.search(
        r'<td class="wrap refs"><a href="#fact-\d+"><code class="ref">seeds/<wbr>', html
    )
    labels = re.findall(r'<text class="node-label">(.*?)</text>', html)
    full = [re.sub(r"<[^>]+>", "", label) for label in labels]
    assert f"seeds/{long_id}" in full
    assert any(label.count("<tspan") > 1 for label in labels)
    assert 'class="scroll lineage-scroll"' in html


def test_report_has_a_fact_filter() -> None:
    record = rich_records()[1]
    page = Page(render_report(record))
    assert page.with_attr("id", "fact-filter")[0]["type"] == "search"
    assert page.counts()["facts-shown"] == len(record.facts)
