"""The report's bounded fact tables, `converge export`'s hint, and the console's fact pages,
in HTML and in Chromium: a large run stays a small page, every count is the run's, and any
fact can still be reached."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from starlette.testclient import TestClient

from converge import ContextKey, Engine, ProposedFact, RunRecord, SqliteRunStore, render_report
from converge._report._facts import FACT_ENDS
from converge._report._render import render_built_report
from converge._report._svg import LINEAGE_LIMIT
from converge.ui import Reviewers
from converge.ui._fact_page import FACTS_PER_PAGE
from tests.browser import chromium_or_skip, launch
from tests.converge.test_ui_console import client_for

H = ContextKey.HYPOTHESES
S = ContextKey.SEEDS


def big_record(count: int) -> RunRecord:
    """Three seeds and `count` hypotheses; every 50th hypothesis cites the one 49 before."""
    inputs = [
        ProposedFact(key=S, id=f"s{n}", content=f"seed {n}", provenance="in") for n in range(3)
    ]
    inputs += [
        ProposedFact(
            key=H,
            id=f"h{n}",
            content=f"claim {n}",
            provenance="in",
            evidence=(f"hypotheses/h{n - 49}",) if n % 50 == 49 else (),
        )
        for n in range(count)
    ]
    return RunRecord.of(anyio.run(lambda: Engine().run(inputs=inputs)))


@pytest.fixture(scope="module")
def record() -> RunRecord:
    return big_record(2_000)


def test_report_lists_each_keys_ends_and_marks_the_gaps_with_their_sizes(
    record: RunRecord,
) -> None:
    html = render_report(record)
    listed = re.findall(r'<tr id="fact-(\d+)" data-fact="([^"]+)"', html)
    refs = [ref for _, ref in listed]
    assert refs[:3] == ["seeds/s0", "seeds/s1", "seeds/s2"]
    hypotheses = [ref for ref in refs if ref.startswith("hypotheses/")]
    assert hypotheses[:FACT_ENDS] == [f"hypotheses/h{n}" for n in range(FACT_ENDS)]
    assert len(hypotheses) == FACT_ENDS + LINEAGE_LIMIT  # the lineage's latest include the last
    gaps = [int(gap) for gap in re.findall(r'data-gap="(\d+)"', html)]
    assert sum(gaps) + len(hypotheses) == 2_000
    assert 'data-count="facts-hypotheses" data-value="2000"' in html
    assert f'data-count="listed-hypotheses" data-value="{len(hypotheses)}"' in html
    assert "listed-seeds" not in html
    assert 'data-count="facts" data-value="2003"' in html
    assert f"converge export {record.run_id} --format jsonl" in html
    assert len(html) < 250_000


def test_report_marks_evidence_whose_fact_it_leaves_out(record: RunRecord) -> None:
    """A listed fact citing one left out says "(not listed)", never "(no such fact)"."""
    html = render_report(record)
    listed = set(re.findall(r'data-fact="hypotheses/(h\d+)"', html))
    assert {"h1899", "h1999", "h1950"} <= listed  # the lineage's latest 120
    assert "h1850" not in listed
    row = re.search(r'<tr id="fact-\d+" data-fact="hypotheses/h1999">.*?</tr>', html)
    assert row is not None  # h1999 cites h1950: a link to its row
    assert 'href="#fact-' in row.group()
    row = re.search(r'<tr id="fact-\d+" data-fact="hypotheses/h1899">.*?</tr>', html)
    assert row is not None  # h1899 cites h1850, left out
    assert '<code class="ref">hypotheses/<wbr>h1850</code> <span class="muted">(not listed)' in (
        row.group()
    )
    marked = re.findall(r'hypotheses/<wbr>(h\d+)</code> <span class="muted">\(([^)]+)\)', html)
    assert marked
    assert all(reason == "not listed" and ref not in listed for ref, reason in marked)


def test_report_size_does_not_grow_with_the_run() -> None:
    small, large = render_report(big_record(300)), render_report(big_record(6_000))
    assert len(large) < len(small) * 1.3


def test_report_of_a_small_run_lists_every_fact_without_gaps() -> None:
    record = big_record(FACT_ENDS * 2)
    html = render_report(record)
    assert html.count('<tr id="fact-') == len(record.facts)
    assert 'data-gap="' not in html
    assert "converge export" not in html


def test_report_lists_a_held_proposals_evidence_whatever_its_place() -> None:
    from converge import AgentEffect, Context, HitlPolicy

    class Cite:
        name = "cite"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposal(
                ProposedFact(
                    key=ContextKey.STRATEGIES,
                    id="plan",
                    content="a plan",
                    provenance="cite",
                    evidence=("hypotheses/h500",),
                )
            )

    inputs = [
        ProposedFact(key=H, id=f"h{n}", content=f"claim {n}", provenance="in") for n in range(1000)
    ]

    async def run() -> RunRecord:
        engine = Engine(hitl=HitlPolicy(gated_keys=frozenset({ContextKey.STRATEGIES})))
        engine.register_suggestor(Cite())
        return RunRecord.of(await engine.run(inputs=inputs))

    paused = anyio.run(run)
    assert paused.pending
    html = render_report(paused)
    assert 'data-fact="hypotheses/h500"' in html
    held = re.search(r'<article class="held".*?</article>', html, re.S)
    assert held is not None
    assert "(not listed)" not in held.group()
    assert 'href="#fact-' in held.group()


# --- in Chromium ---------------------------------------------------------------------------


def test_report_of_20000_facts_renders_fast_and_filters_the_listed_rows(tmp_path: Path) -> None:
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    record = big_record(20_000)
    path = tmp_path / "report.html"
    path.write_text(render_report(record), encoding="utf-8")
    assert path.stat().st_size < 300_000
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("pageerror", lambda error: errors.append(str(error)))
            started = time.perf_counter()
            page.goto(path.as_uri(), wait_until="load")
            page.evaluate("document.body.getBoundingClientRect().height")
            assert time.perf_counter() - started < 10  # minutes before the tables were bounded
            rows = page.locator("tr[data-fact]").count()
            assert rows == 3 + FACT_ENDS + LINEAGE_LIMIT
            shown = page.locator('[data-count="facts-shown"]')
            assert shown.inner_text() == f"{rows} of {rows} facts"
            # every lineage node and every evidence link lands on a row of the page
            targets = page.locator(".lineage a, td.refs a").evaluate_all(
                "links => links.map(a => a.getAttribute('href'))"
            )
            assert targets
            missing = page.evaluate(
                "ids => ids.filter(id => !document.getElementById(id.slice(1)))", targets
            )
            assert missing == []
            assert page.locator("tr[data-gap]:visible").count() == 1
            page.locator("#fact-filter").fill("claim 19999")
            assert page.locator("tr[data-fact]:visible").count() == 1
            assert page.locator("tr[data-gap]:visible").count() == 0
            assert shown.inner_text() == f"1 of {rows} facts"
            page.locator("#fact-filter").fill("")
            assert page.locator("tr[data-gap]:visible").count() == 1
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        finally:
            browser.close()
    assert errors == []


# --- the console's fact pages ----------------------------------------------------------------


@pytest.fixture
def console(tmp_path: Path, record: RunRecord) -> Iterator[TestClient]:
    store = str(tmp_path / "runs.db")

    async def save() -> None:
        opened = SqliteRunStore(store)
        try:
            await opened.save(record)
        finally:
            opened.close()

    anyio.run(save)
    reviewers, token = Reviewers.single("ana")
    with client_for(store, reviewers, token=token) as client:
        yield client


def _facts(run_id: str, query: str) -> str:
    return f"/runs/{quote(run_id, safe='')}/facts?{query}"


def test_console_run_page_links_each_cut_key_to_its_fact_pages(
    console: TestClient, record: RunRecord
) -> None:
    page = console.get(f"/runs/{record.run_id}")
    assert page.status_code == 200
    links = re.findall(r'data-all-facts="([^"]+)" href="([^"]+)"', page.text)
    assert links == [("hypotheses", _facts(record.run_id, "key=hypotheses&amp;page=1"))]


def test_console_fact_pages_list_every_fact_of_a_key_a_page_at_a_time(
    console: TestClient, record: RunRecord
) -> None:
    pages = -(-2_000 // FACTS_PER_PAGE)
    seen: list[str] = []
    for number in range(1, pages + 1):
        response = console.get(_facts(record.run_id, f"key=hypotheses&page={number}"))
        assert response.status_code == 200
        assert f'data-count="pages" data-value="{pages}"' in response.text
        seen += re.findall(r'data-fact="hypotheses/(h\d+)"', response.text)
    assert seen == [f"h{n}" for n in range(2_000)]
    last = console.get(_facts(record.run_id, f"key=hypotheses&page={pages}")).text
    assert 'rel="next"' not in last
    assert 'rel="prev"' in last


def test_console_fact_page_links_evidence_to_the_page_of_its_fact(
    console: TestClient, record: RunRecord
) -> None:
    text = console.get(_facts(record.run_id, "key=hypotheses&page=2")).text
    # h149 (page 2) cites h100 (page 2); h199 cites h150; on page 1, h99 cites h50
    assert f'href="{_facts(record.run_id, "key=hypotheses&amp;page=2")}#fact-' in text
    first = console.get(_facts(record.run_id, "key=hypotheses&page=1")).text
    index = next(i for i, f in enumerate(record.facts) if f.id == "h50")
    assert f"page=1#fact-{index}" in first


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("key=nope&page=1", "holds no facts under the key"),
        ("key=hypotheses&page=0", "page must be a whole number"),
        ("key=hypotheses&page=-1", "page must be a whole number"),
        ("key=hypotheses&page=x", "page must be a whole number"),
        ("key=hypotheses&page=99", "hypotheses has 20 page(s) of facts, not 99"),
        ("key=hypotheses&page=99999999999999999999", "page must be a whole number"),
        ("page=1", "holds no facts under the key"),
    ],
)
def test_console_fact_page_that_does_not_exist_is_a_404_saying_why(
    console: TestClient, record: RunRecord, query: str, said: str
) -> None:
    response = console.get(_facts(record.run_id, query))
    assert response.status_code == 404
    assert said in response.text.replace("&#x27;", "'")
    assert "data-fact=" not in response.text


def test_console_fact_pages_page_through_in_chromium(
    console: TestClient, record: RunRecord
) -> None:
    """The pages as served, in Chromium: next and previous links, the rows of each page."""
    chromium_or_skip("the review console tests")
    from playwright.sync_api import Route, sync_playwright

    def serve(route: Route) -> None:
        path = route.request.url.removeprefix("http://console.test")
        response = console.get(path)
        route.fulfill(
            status=response.status_code,
            headers={"content-type": response.headers["content-type"]},
            body=response.content,
        )

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("http://console.test/**", serve)
            page.goto(f"http://console.test/runs/{record.run_id}")
            page.locator('[data-all-facts="hypotheses"]').click()
            page.wait_for_url("**page=1")
            assert page.locator("tr[data-fact]").count() == FACTS_PER_PAGE
            page.locator('a[rel="next"]').first.click()
            page.wait_for_url("**page=2")
            first = page.locator("tr[data-fact]").first.get_attribute("data-fact")
            assert first == f"hypotheses/h{FACTS_PER_PAGE}"
            page.locator('a[rel="last"]').first.click()
            page.wait_for_url("**page=20")
            assert page.locator("tr[data-fact]").last.get_attribute("data-fact") == (
                "hypotheses/h1999"
            )
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        finally:
            browser.close()


def test_report_does_not_verify_a_proof_whose_fact_count_was_edited(record: RunRecord) -> None:
    """The report checks the facts once (the restore), and still the proof's count."""
    proof = record.integrity.model_copy(update={"fact_count": record.integrity.fact_count + 1})
    html = render_report(record.model_copy(update={"integrity": proof}))
    assert 'data-verified="false"' in html
    assert 'data-verified="true"' in render_report(record)


def test_a_report_from_a_runs_own_facts_is_the_report_of_its_record() -> None:
    """`converge run` renders a run saved as rows from its result's facts, not records of
    them: the same page, but for when the facts were checked."""
    inputs = [
        ProposedFact(
            key=H,
            id=f"h{n}",
            content=f"claim {n}",
            provenance="in",
            payload={"n": n} if n % 7 == 0 else n,
            evidence=(f"hypotheses/h{n - 1}",) if n % 10 == 9 else (),
        )
        for n in range(500)
    ]
    result = anyio.run(lambda: Engine().run(inputs=inputs))
    record = RunRecord.of(result)
    bare = record.model_copy(update={"facts": ()})
    whole = render_built_report(record)
    shown = render_built_report(bare, facts=result.context.facts())
    ended = "checked against the leaf the engine kept for it as the run ended"
    assert ended in shown
    assert (
        shown.replace(
            ended, "checked against the leaf the engine kept for it as this record was built"
        )
        == whole
    )
