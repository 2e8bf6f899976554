"""The HTML run report: escaping, sections, counts and marks, and the page in headless Chromium."""

from __future__ import annotations

import functools
from html.parser import HTMLParser
from pathlib import Path

import anyio
import pytest
from hitl_formation import Recommender, build_engine

import converge
from converge import (
    Context,
    ContextKey,
    Engine,
    GateDecision,
    HitlPolicy,
    IntegrityProof,
    ProposedFact,
    RunRecord,
    StopReason,
    render_report,
    suggestor,
)
from converge._report._facts import FACT_ENDS
from converge._report._svg import LINEAGE_LIMIT
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor
from tests.browser import chromium_or_skip, launch
from tests.doubles import FirstCycleOnly, NoForbiddenHypothesis, seed

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
XSS = "<script>alert(1)</script>"
H = ContextKey.HYPOTHESES
GATE = "gate:2:strategies/costly"


# --- reading the page -------------------------------------------------------------------------


class Page(HTMLParser):
    """Every start tag with its attributes, in document order, and the page's text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name: value or "" for name, value in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def with_attr(self, name: str, value: str | None = None) -> list[dict[str, str]]:
        return [
            attrs
            for _, attrs in self.tags
            if name in attrs and (value is None or attrs[name] == value)
        ]

    def counts(self) -> dict[str, int]:
        return {
            attrs["data-count"]: int(attrs["data-value"]) for attrs in self.with_attr("data-count")
        }

    def ids(self) -> set[str]:
        return {attrs["id"] for _, attrs in self.tags if "id" in attrs}


# --- runs -------------------------------------------------------------------------------------


def rich_engine() -> Engine:
    """A formation with a failure, a timeout, rejections, a violation and a human gate."""
    engine = Engine(hitl=HitlPolicy(confidence_below=0.5), suggestor_timeout=0.25)
    engine.register_suggestor(SeedSuggestor("budget", "Pick a plan within budget"))
    engine.register_suggestor(Recommender())
    engine.register_suggestor(
        ReactOnceSuggestor(
            "plan-noted",
            "A plan is on the table",
            source=ContextKey.STRATEGIES,
            target=ContextKey.EVALUATIONS,
        )
    )
    engine.register_suggestor(FirstCycleOnly("flaky-llm", "fail"))
    engine.register_suggestor(FirstCycleOnly("slow-search", "hang"))
    engine.register_suggestor(
        FirstCycleOnly(
            "intruder",
            "ok",
            [
                ProposedFact(
                    key=ContextKey.STRATEGIES, id="sneaky", content="Skip review", provenance="x"
                ),
                ProposedFact(
                    key=H,
                    id="xss",
                    content=XSS,
                    provenance="intruder<b>",
                    evidence=("seeds/customer",),
                ),
            ],
        )
    )
    engine.register_suggestor(
        FirstCycleOnly(
            "rogue", "ok", [ProposedFact(key=H, id="forbidden", content="no", provenance="r")]
        )
    )
    engine.register_invariant(NoForbiddenHypothesis())
    return engine


INPUTS = (
    ProposedFact(
        key=ContextKey.SEEDS,
        id="customer",
        content="ACME, 40 seats",
        provenance="input:crm",
        payload={"seats": 40},
    ),
    ProposedFact(key=ContextKey.SEEDS, id="bad id", content="x", provenance="input:crm"),
)


@functools.cache
def rich_records() -> tuple[RunRecord, RunRecord]:
    """The rich run paused on its gate, and the same run resumed with an approval."""

    async def run() -> tuple[RunRecord, RunRecord]:
        engine = rich_engine()
        paused = await engine.run(inputs=INPUTS)
        assert paused.checkpoint is not None
        decision = GateDecision.approve(paused.pending[0].gate_id, by="jane")
        resumed = await engine.resume(paused.checkpoint, [decision])
        return RunRecord.of(paused), RunRecord.of(resumed)

    return anyio.run(run)


def expected_counts(record: RunRecord) -> dict[str, int]:
    executions = [e for cycle in record.trace.cycles for e in cycle.executions]
    violations = len(record.trace.input_violations) + sum(
        len(cycle.violations) for cycle in record.trace.cycles
    )
    by_key = {
        f"facts-{key.value}": sum(fact.key is key for fact in record.facts) for key in ContextKey
    }
    return {
        "cycles": record.cycles,
        "facts": len(record.facts),
        "tokens": record.tokens,
        "executions": len(executions),
        "failures": sum(e.outcome == "failed" for e in executions),
        "timeouts": sum(e.outcome == "timed_out" for e in executions),
        "rejections": len(record.rejections),
        "pending": len(record.pending),
        "decisions": len(record.trace.decisions),
        "violations": violations,
        "lineage-nodes": len(record.facts),
        "lineage-edges": sum(len(fact.evidence) for fact in record.facts),
        **{name: count for name, count in by_key.items() if count},
        **({"facts-shown": len(record.facts)} if record.facts else {}),
    }


# --- the HTML ---------------------------------------------------------------------------------


def test_report_is_one_self_contained_page() -> None:
    html = render_report(rich_records()[1])
    page = Page(html)
    assert html.startswith("<!DOCTYPE html>")
    assert [tag for tag, _ in page.tags].count("script") == 1
    assert page.with_attr("src") == []
    assert [tag for tag, _ in page.tags if tag in ("link", "img", "iframe", "object")] == []
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html
    assert "@import" not in html
    policy = page.with_attr("http-equiv", "Content-Security-Policy")[0]["content"]
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]


def test_report_renders_a_script_in_fact_content_inert() -> None:
    record = rich_records()[1]
    assert any(fact.content == XSS for fact in record.facts)
    html = render_report(record, title="<img src=x onerror=alert(1)>")
    page = Page(html)
    assert XSS not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert XSS in "".join(page.text)
    assert "intruder&lt;b&gt;" in html
    assert "<img" not in html
    assert [tag for tag, _ in page.tags].count("script") == 1


def test_report_shows_every_section() -> None:
    page = Page(render_report(rich_records()[1]))
    assert {"timeline", "facts", "lineage", "rejections", "gates", "invariants", "integrity"} <= (
        page.ids()
    )
    assert page.with_attr("data-stop-reason", "converged")
    assert page.with_attr("data-verified", "true")


def test_report_counts_match_the_record() -> None:
    for record in rich_records():
        page = Page(render_report(record))
        assert page.counts() == expected_counts(record)
        assert len(page.with_attr("data-fact")) == len(record.facts)
        assert len(page.with_attr("data-rejection")) == len(record.rejections)
        refs = {attrs["data-fact"] for attrs in page.with_attr("data-fact")}
        assert refs == {f"{fact.key.value}/{fact.id}" for fact in record.facts}


def test_report_marks_failures_and_timeouts_in_the_timeline() -> None:
    html = render_report(rich_records()[0])
    page = Page(html)
    failed = page.with_attr("data-outcome", "failed")
    timed_out = page.with_attr("data-outcome", "timed_out")
    assert [(a["data-suggestor"], a["class"]) for a in failed if a.get("data-cycle")] == [
        ("flaky-llm", "exec exec-failed")
    ]
    assert [(a["data-suggestor"], a["class"]) for a in timed_out if a.get("data-cycle")] == [
        ("slow-search", "exec exec-timed_out")
    ]
    assert len(page.with_attr("class", "marker marker-failed")) == 1
    assert len(page.with_attr("class", "marker marker-timed_out")) == 1
    assert "RuntimeError: model endpoint returned 503" in html
    assert "TimeoutError" in html
    assert len(page.with_attr("data-outcome", "ok")) == 4


def test_report_lists_rejections_with_reasons() -> None:
    html = render_report(rich_records()[1])
    assert "not authorised to write strategies" in html
    assert "id &#x27;bad id&#x27; contains whitespace" in html


def test_report_shows_invariant_violations() -> None:
    html = render_report(rich_records()[1])
    page = Page(html)
    assert len(page.with_attr("data-violation")) == 1
    assert "hypotheses/forbidden must never exist" in html


async def test_report_of_a_paused_run_shows_pending_gates() -> None:
    record = RunRecord.of(await build_engine().run())
    page = Page(render_report(record))
    assert record.stop_reason is StopReason.AWAITING_HUMAN
    assert page.with_attr("data-stop-reason", "awaiting_human")
    assert [attrs["data-gate"] for attrs in page.with_attr("data-gate")] == [GATE]
    assert page.counts()["pending"] == 1
    assert page.counts()["decisions"] == 0
    assert "Buy the enterprise plan" in "".join(page.text)
    assert page.with_attr("class", "callout")


@pytest.mark.parametrize("approve", [True, False])
async def test_report_of_a_resumed_run_shows_decisions(approve: bool) -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    decision = (
        GateDecision.approve(GATE, by="jane")
        if approve
        else GateDecision.reject(GATE, by="jane", reason="too <costly>")
    )
    record = RunRecord.of(await engine.resume(paused.checkpoint, [decision]))
    html = render_report(record)
    page = Page(html)
    rows = page.with_attr("data-decision", GATE)
    assert [row["data-approved"] for row in rows] == [str(approve).lower()]
    assert page.counts()["pending"] == 0
    assert page.counts()["decisions"] == 1
    fact = "strategies/costly" if approve else "diagnostic/hitl-rejected:costly"
    anchor = next(a["id"] for a in page.with_attr("data-fact", fact))
    assert page.with_attr("href", f"#{anchor}")
    if not approve:
        assert "too &lt;costly&gt;" in html


def test_report_draws_an_edge_per_evidence_link() -> None:
    record = rich_records()[1]
    page = Page(render_report(record))
    edges = {(a["data-from"], a["data-to"]) for a in page.with_attr("data-from")}
    expected = {
        (evidence, f"{fact.key.value}/{fact.id}")
        for fact in record.facts
        for evidence in fact.evidence
    }
    assert edges == expected
    assert expected


async def test_report_draws_only_the_latest_facts_above_the_lineage_limit() -> None:
    count = LINEAGE_LIMIT + 30
    inputs = [
        ProposedFact(
            key=H,
            id=f"h{index}",
            content=f"claim {index}",
            provenance="input",
            evidence=(f"hypotheses/h{index - 1}",) if index else (),
        )
        for index in range(count)
    ]
    record = RunRecord.of(await Engine().run(inputs=inputs))
    html = render_report(record)
    page = Page(html)
    assert page.counts()["lineage-nodes"] == LINEAGE_LIMIT
    assert page.counts()["lineage-edges"] == LINEAGE_LIMIT - 1
    listed = [a["data-fact"] for a in page.with_attr("data-fact")]
    assert len(listed) == FACT_ENDS + LINEAGE_LIMIT
    assert listed[FACT_ENDS - 1 : FACT_ENDS + 1] == [
        f"hypotheses/h{FACT_ENDS - 1}",
        f"hypotheses/h{count - LINEAGE_LIMIT}",
    ]
    assert [a["data-gap"] for a in page.with_attr("data-gap")] == [
        str(count - LINEAGE_LIMIT - FACT_ENDS)
    ]
    assert f"Showing the latest {LINEAGE_LIMIT} of {count} facts" in html
    drawn = {a["data-ref"] for a in page.with_attr("data-ref")}
    assert f"hypotheses/h{count - 1}" in drawn
    assert "hypotheses/h0" not in drawn


async def test_report_shows_the_error_when_the_stored_facts_do_not_restore() -> None:
    record = RunRecord.of(await build_engine().run())
    tampered = record.model_copy(
        update={
            "facts": (record.facts[0].model_copy(update={"content": "changed"}), *record.facts[1:])
        }
    )
    html = render_report(tampered)
    assert Page(html).with_attr("data-verified", "error")
    assert "does not match its fields" in html


async def test_report_says_when_the_proof_does_not_verify() -> None:
    record = RunRecord.of(await build_engine().run())
    proof = IntegrityProof(
        merkle_root=record.integrity.merkle_root,
        clock=record.integrity.clock,
        fact_count=record.integrity.fact_count + 1,
    )
    page = Page(render_report(record.model_copy(update={"integrity": proof})))
    assert page.with_attr("data-verified", "false")


async def test_report_shows_the_conflict_that_stopped_a_run() -> None:
    @suggestor(name="rival")
    async def rival(ctx: Context) -> list[ProposedFact]:
        return [ProposedFact(key=ContextKey.SEEDS, id="plan", content="Plan <B>", provenance="r")]

    engine = Engine()
    engine.register_suggestor(rival)
    plan = ProposedFact(key=ContextKey.SEEDS, id="plan", content="Plan A", provenance="input")
    record = RunRecord.of(await engine.run(inputs=[plan]))
    html = render_report(record)
    assert record.stop_reason is StopReason.CONFLICT
    assert Page(html).with_attr("data-conflict")
    assert "Plan &lt;B&gt;" in html


async def test_report_of_a_run_without_cycles_or_facts_renders() -> None:
    record = RunRecord.of(await Engine().run())
    page = Page(render_report(record, title="empty"))
    assert page.counts() == expected_counts(record)
    assert page.counts()["facts"] == 0
    assert page.with_attr("data-verified", "true")


def test_report_is_deterministic_and_uses_the_title() -> None:
    record = rich_records()[1]
    assert render_report(record) == render_report(record)
    html = render_report(record, title="Vendor selection")
    assert "<title>Vendor selection</title>" in html
    assert f"<title>converge run {record.run_id}</title>" in render_report(record)


# --- headless Chromium ------------------------------------------------------------------------


@functools.cache
def wide_lineage_record() -> RunRecord:
    """A chain of inputs with long ids: a lineage graph wider than the page."""
    ids = [f"customer-{index:03d}-" + "segment:enterprise/eu-west-1-" * 2 for index in range(130)]
    inputs = [
        ProposedFact(
            key=H,
            id=ident,
            content=f"claim {index}",
            provenance="input",
            evidence=(f"hypotheses/{ids[index - 1]}",) if index else (),
        )
        for index, ident in enumerate(ids)
    ]
    return RunRecord.of(Engine().run_sync(inputs=inputs))


def test_report_loads_in_headless_chromium_with_the_expected_counts() -> None:
    chromium_or_skip("the headless Chromium report test")
    from playwright.sync_api import ConsoleMessage, Request, sync_playwright

    record = rich_records()[1]
    executions = [e for cycle in record.trace.cycles for e in cycle.executions]
    assert {e.outcome for e in executions} == {"ok", "failed", "timed_out"}
    assert record.rejections
    assert record.trace.decisions
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "report.html"
    path.write_text(render_report(record), encoding="utf-8")
    wide = ARTIFACTS / "report-wide.html"
    wide.write_text(render_report(wide_lineage_record()), encoding="utf-8")

    console: list[str] = []
    page_errors: list[str] = []
    failed: list[str] = []
    network: list[str] = []
    dialogs: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            console.append(f"{message.type}: {message.text}")

    def on_request(request: Request) -> None:
        if not request.url.startswith(("file:", "data:", "about:")):
            network.append(request.url)

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("console", on_console)
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.on("request", on_request)
            page.on("requestfailed", lambda request: failed.append(request.url))
            page.on("dialog", lambda dialog: dialogs.append(dialog.message))
            page.goto(path.as_uri(), wait_until="load")

            def count(name: str) -> int:
                return int(page.locator(f'[data-count="{name}"]').get_attribute("data-value") or -1)

            expected = expected_counts(record)
            assert {name: count(name) for name in expected} == expected
            assert page.locator("tr[data-fact]").count() == len(record.facts)
            assert page.locator(".lineage .node").count() == len(record.facts)
            assert page.locator(".lineage .edge").count() == expected["lineage-edges"]
            assert page.locator("g.exec").count() == len(executions)
            assert page.locator('g.exec[data-outcome="failed"]').count() == 1
            assert page.locator('g.exec[data-outcome="timed_out"]').count() == 1
            assert page.locator("tr[data-rejection]").count() == len(record.rejections)
            assert page.locator("tr[data-decision]").count() == len(record.trace.decisions)
            assert page.locator("body").get_attribute("data-stop-reason") == "converged"
            assert page.locator("[data-verified]").get_attribute("data-verified") == "true"

            xss = page.locator('tr[data-fact="hypotheses/xss"] td').nth(1)
            assert xss.inner_text().strip() == XSS
            assert page.evaluate("document.scripts.length") == 1

            page.locator('.lineage .node[data-ref="hypotheses/xss"]').hover()
            assert page.locator(".lineage .edge.hot").count() == 1

            total = len(record.facts)
            page.locator("#fact-filter").fill("PLAN")
            visible_refs = page.locator("tr[data-fact]:visible").evaluate_all(
                "rows => rows.map(row => row.getAttribute('data-fact'))"
            )
            matching = [
                f"{f.key.value}/{f.id}"
                for f in record.facts
                if "plan" in " ".join((f.id, f.content, f.provenance)).lower()
            ]
            assert visible_refs == matching
            assert 0 < len(matching) < total
            assert count("facts-shown") == len(matching)
            shown = page.locator('[data-count="facts-shown"]').inner_text()
            assert shown == f"{len(matching)} of {total} facts"
            assert page.locator('.key-group[data-key="hypotheses"]').is_hidden()
            page.locator("#fact-filter").fill("")
            assert page.locator("tr[data-fact]:visible").count() == total
            assert count("facts-shown") == total

            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            badge = page.locator("header [data-stop-reason]").bounding_box()
            assert badge is not None
            assert badge["y"] + badge["height"] < 800
            page.mouse.move(0, 0)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)

            page.emulate_media(media="print")
            assert page.locator("nav").is_hidden()
            pdf = page.pdf(path=str(ARTIFACTS / "report.pdf"), format="A4")
            assert pdf.startswith(b"%PDF")

            page.emulate_media(media="screen")
            page.goto(wide.as_uri(), wait_until="load")
            box = page.locator(".lineage-scroll")
            scroll = box.evaluate("b => [b.scrollLeft, b.scrollWidth, b.clientWidth]")
            assert scroll[1] > scroll[2]
            assert scroll[0] > 0
            assert scroll[0] + scroll[2] >= scroll[1] - 1
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            overflowing = page.locator("td.refs").evaluate_all(
                "cells => cells.filter(c => c.scrollWidth > c.clientWidth + 1).length"
            )
            assert overflowing == 0
            page.screenshot(path=str(ARTIFACTS / "report-wide.png"), full_page=False)
        finally:
            browser.close()

    assert console == []
    assert page_errors == []
    assert failed == []
    assert network == []
    assert dialogs == []
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000


def test_report_footer_names_the_converge_versions_that_rendered_and_saved_the_run() -> None:
    record = RunRecord.of(Engine().run_sync(inputs=[seed("a")]))
    old = record.model_copy(update={"converge_version": ""})
    assert (
        f"Generated by converge {converge.__version__} from a stored run record saved by "
        f"converge {converge.__version__}." in render_report(record)
    )
    assert (
        f"Generated by converge {converge.__version__} from a stored run record. "
        in render_report(old)
    )
