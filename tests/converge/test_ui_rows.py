"""The console's pages of a large finished run stored as rows read its head and what they show.

The run page, the fact pages and the event stream of a run of more than `WHOLE_SHOW` facts
never assemble the whole record (`store.load` is counted); what they show is the head's
(its signature checked, and said to be the head's) and the rows they list, each fact
checked against its digest; a head or a row edited by hand reads as a failure, never as
verified; a fact page past the end is a 404; a small run keeps the whole report. On SQLite
and, with DATABASE_URL set, on PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import LiteralString
from urllib.parse import quote

import anyio
import pytest
from starlette.testclient import TestClient
from test_durable import sql
from test_store import scoped_postgres

from benchmarks.scale_formation import Bulk
from converge import (
    Budget,
    Checkpoint,
    Engine,
    PostgresRunStore,
    RecordHead,
    RunFinal,
    RunProgress,
    RunRecord,
    RunStore,
    RunSummary,
    SqliteRunStore,
)
from converge.stores import _rows_read
from converge.ui import ConsoleSettings, Reviewers, create_app
from converge_suggestors import SeedSuggestor

KEY = "ui-rows-key"
FACTS = 650
"""Facts the large run promotes besides its seed: 40 a cycle, in 17 entries or so."""
PER_CYCLE = 40
WHOLE = 100
"""`WHOLE_SHOW` for these tests: runs of more facts are shown from their heads."""
SHOWN = 10
PER_PAGE = 100

Target = tuple[str, str]


class Counting:
    """A built-in store that counts the whole records it assembles (`load`)."""

    def __init__(self, inner: SqliteRunStore | PostgresRunStore) -> None:
        self.inner = inner
        self.loads = 0

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        return await self.inner.save(record, expected_version=expected_version)

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        return await self.inner.save_progress(progress, expected_version=expected_version)

    async def save_final(self, final: RunFinal, /, *, expected_version: int) -> int:
        return await self.inner.save_final(final, expected_version=expected_version)

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        await self.inner.renew_lease(run_id, version=version, lease_seconds=lease_seconds)

    async def load(self, run_id: str, /) -> RunRecord:
        self.loads += 1
        return await self.inner.load(run_id)

    async def load_head(self, run_id: str, /) -> RecordHead | None:
        return await self.inner.load_head(run_id)

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]:
        return await self.inner.journal(run_id, after=after, limit=limit)

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]:
        return await self.inner.entry_counts(run_id)

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        return await self.inner.list_runs(limit=limit)

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        return await self.inner.load_checkpoint(run_id)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "runs.db")
    else:
        with scoped_postgres("ui_rows") as url:
            yield "postgres", url


@pytest.fixture(autouse=True)
def _limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rows_read, "WHOLE_SHOW", WHOLE)
    monkeypatch.setattr(_rows_read, "SHOWN_FACTS", SHOWN)
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)


def counting(target: Target) -> Counting:
    kind, where = target
    return Counting(SqliteRunStore(where) if kind == "sqlite" else PostgresRunStore(where))


def run_of(target: Target, facts: int, *, whole: bool = False) -> tuple[str, RunRecord]:
    """A signed run of `facts` facts (and its seed) saved a cycle at a time, as rows (with
    `whole`, saved whole at its end); its id and its whole record (read from another store
    object, not counted)."""
    kind, where = target
    store = SqliteRunStore(where) if kind == "sqlite" else PostgresRunStore(where)
    engine = Engine(
        store=store,
        durability="exit" if whole else "cycle",
        signing_key=KEY,
        name="w8-small",
        budget=Budget(max_cycles=facts // PER_CYCLE + 10, max_facts=facts + 10),
    )
    engine.register_suggestor(SeedSuggestor("start", "go"))
    engine.register_suggestor(Bulk(facts, PER_CYCLE))
    result = anyio.run(engine.run)
    assert result.converged
    [(layout,)] = sql(target, "SELECT layout FROM converge_runs WHERE run_id = ?", result.run_id)
    assert layout == ("whole" if whole else "rows")
    return result.run_id, anyio.run(store.load, result.run_id)


@contextmanager
def console(store: RunStore) -> Generator[TestClient]:
    reviewers, token = Reviewers.single("ana")
    settings = ConsoleSettings(store=store, reviewers=reviewers, poll_seconds=0.01)
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765") as client:
        client.headers["authorization"] = f"Bearer {token}"
        yield client


def facts_path(run_id: str, key: str, page: int | str) -> str:
    return f"/runs/{quote(run_id, safe='')}/facts?key={key}&page={page}"


def listed(html: str) -> list[str]:
    return re.findall(r'data-fact="([^"]+)"', html)


def refs(record: RunRecord, start: int, end: int) -> list[str]:
    return [f"{fact.key.value}/{fact.id}" for fact in record.facts[start:end]]


def test_the_pages_of_a_large_run_read_its_head_and_rows_never_the_whole_record(
    target: Target,
) -> None:
    run_id, record = run_of(target, FACTS)
    store = counting(target)
    with console(store) as client:
        page = client.get(f"/runs/{run_id}")
        listing = client.get("/")
        events = client.get(f"/runs/{run_id}/events")
        pages = {n: client.get(facts_path(run_id, "hypotheses", n)) for n in range(1, 8)}
        seeds = client.get(facts_path(run_id, "seeds", 1))
    assert store.loads == 0
    html = page.text
    assert page.status_code == 200
    assert 'data-layout="rows"' in html
    assert 'data-signed="head"' in html
    assert "Signature of the run&#x27;s head verified" in html
    assert 'data-count="facts" data-value="651"' in html
    assert 'data-integrity="shown"' in html
    assert 'data-verified="not-checked"' in html  # never "verified" without reading every row
    assert 'data-verified="true"' not in html
    promoted = sorted(record.facts, key=lambda fact: fact.promotion.clock)
    first = [f"{fact.key.value}/{fact.id}" for fact in promoted[:SHOWN]]
    last = [f"{fact.key.value}/{fact.id}" for fact in promoted[-SHOWN:]]
    assert listed(html) == first + last
    assert 'data-key-count="650"' in html
    assert f'href="/runs/{run_id}/facts?key=hypotheses&amp;page=7"' in html
    assert f'data-count="facts-left-out" data-value="{651 - 2 * SHOWN}"' in html
    assert "Bounded:" in html
    assert run_id in listing.text
    assert events.text.endswith(
        'event: end\ndata: {"version": null, "status": "finished", "cycles": '
        f"{record.cycles}}}\n\n"
    )
    for number, response in pages.items():
        assert response.status_code == 200
        start = 1 + (number - 1) * PER_PAGE  # the seed sorts first
        assert listed(response.text) == refs(record, start, min(start + PER_PAGE, 651))
        assert 'data-integrity="shown"' in response.text
        assert 'data-signed="head"' in response.text
    assert listed(seeds.text) == ["seeds/start"]
    assert f'id="fact-{1 + 6 * PER_PAGE}"' in pages[7].text  # the run's own row numbers


def test_a_page_that_followed_the_run_is_told_it_changed_from_the_head(target: Target) -> None:
    """A page that showed the run running (or at any version) reloads once it is finished."""
    run_id, record = run_of(target, FACTS)
    store = counting(target)
    with console(store) as client:
        running = client.get(f"/runs/{run_id}/events?seen=3&clock=40&running=1").text
        paused = client.get(f"/runs/{run_id}/events?seen=3").text
    assert store.loads == 0
    data = {"version": None, "status": "finished", "cycles": record.cycles}
    changed = f"event: changed\ndata: {json.dumps(data)}"
    assert running.endswith(changed + "\n\n")
    assert paused.endswith(changed + "\n\n")


def test_the_run_page_reads_no_other_run_whole(target: Target) -> None:
    """Its forks are found from the listing; only a run that names it as parent is read."""
    others = [run_of(target, WHOLE - 1, whole=True)[0] for _ in range(3)]
    run_id, _ = run_of(target, FACTS)
    store = counting(target)
    with console(store) as client:
        page = client.get(f"/runs/{run_id}").text
        assert store.loads == 0
        listing = client.get("/").text  # runs stored whole are listed from their records
    assert 'data-layout="rows"' in page
    assert all(other in listing for other in others)


def test_a_fact_page_past_the_end_or_of_no_key_is_a_clear_404(target: Target) -> None:
    run_id, _ = run_of(target, FACTS)
    store = counting(target)
    with console(store) as client:
        past = client.get(facts_path(run_id, "hypotheses", 8))
        zero = client.get(facts_path(run_id, "hypotheses", 0))
        word = client.get(facts_path(run_id, "hypotheses", "last"))
        nokey = client.get(facts_path(run_id, "nope", 1))
        norun = client.get(facts_path("no-such-run", "hypotheses", 1))
    assert store.loads == 0
    assert past.status_code == zero.status_code == word.status_code == nokey.status_code == 404
    assert "hypotheses has 7 page(s) of facts, not 8" in past.text
    assert "page must be a whole number from 1, got &#x27;0&#x27;" in zero.text
    assert f"run {run_id} holds no facts under the key &#x27;nope&#x27;" in nokey.text
    assert norun.status_code == 404
    assert "The store has no run no-such-run." in norun.text


def test_an_edited_head_reads_as_a_failed_signature_never_verified(target: Target) -> None:
    run_id, _ = run_of(target, FACTS)
    [(text,)] = sql(target, "SELECT record FROM converge_runs WHERE run_id = ?", run_id)
    forged = str(text).replace('"fixed point reached"', '"approved by the board"', 1)
    assert forged != text
    set_head(target, run_id, forged)
    store = counting(target)
    with console(store) as client:
        page = client.get(f"/runs/{run_id}").text
        facts = client.get(facts_path(run_id, "hypotheses", 7)).text
    assert store.loads == 0
    for html in (page, facts):
        assert 'data-signature="failed"' in html
        assert "stored head has a bad signature" in html
        assert 'data-signature="verified"' not in html


def test_a_head_that_is_no_head_is_a_clear_error_page(target: Target) -> None:
    run_id, _ = run_of(target, FACTS)
    set_head(target, run_id, '{"record": "forged"}')
    store = counting(target)
    with console(store) as client:
        pages = [client.get(path) for path in (f"/runs/{run_id}", facts_path(run_id, "seeds", 1))]
    for page in pages:
        assert page.status_code == 500
        assert "Cannot read this run" in page.text
        assert f"run {run_id}: the stored record is invalid" in page.text
        assert "data-signature" not in page.text


def test_an_edited_row_reads_as_a_failure_on_the_pages_that_show_it(target: Target) -> None:
    run_id, _ = run_of(target, FACTS)
    last = f"fact {FACTS - 1}"
    [(seq, entry)] = sql(
        target,
        "SELECT seq, entry FROM converge_journal WHERE run_id = ? AND entry LIKE ?",
        run_id,
        f'%"content":"{last}"%',
    )
    set_entry(target, run_id, int(str(seq)), str(entry).replace(last, "forged", 1))
    store = counting(target)
    with console(store) as client:
        page = client.get(f"/runs/{run_id}").text
        facts = client.get(facts_path(run_id, "hypotheses", 7)).text
        untouched = client.get(facts_path(run_id, "hypotheses", 1)).text
    assert store.loads == 0
    for html in (page, facts):
        assert 'data-integrity="failed"' in html
        assert f"fact hypotheses/h-{FACTS - 1}: digest" in html
        assert 'data-integrity="shown"' not in html
    assert 'data-integrity="shown"' in untouched  # what it lists does match its digests


def test_a_deleted_row_reads_as_a_failure(target: Target) -> None:
    run_id, _ = run_of(target, FACTS)
    [(high,)] = sql(target, "SELECT MAX(seq) FROM converge_journal WHERE run_id = ?", run_id)
    sql(target, "DELETE FROM converge_journal WHERE run_id = ? AND seq = ?", run_id, high)
    store = counting(target)
    with console(store) as client:
        page = client.get(f"/runs/{run_id}").text
        facts = client.get(facts_path(run_id, "hypotheses", 7)).text
    for html in (page, facts):
        assert 'data-integrity="failed"' in html
        assert f"journal entry {high} is missing" in html


def test_a_small_run_stored_as_rows_keeps_the_whole_report(target: Target) -> None:
    run_id, record = run_of(target, WHOLE - 1)
    store = counting(target)
    with console(store) as client:
        page = client.get(f"/runs/{run_id}").text
        facts = client.get(facts_path(run_id, "hypotheses", 1)).text
    assert store.loads == 2
    assert 'data-layout="rows"' not in page
    assert 'id="lineage"' in page  # the whole report, as before
    assert 'data-verified="true"' in page
    assert listed(facts) == refs(record, 1, WHOLE)


def set_head(target: Target, run_id: str, text: str) -> None:
    statement: LiteralString = "UPDATE converge_runs SET record = ? WHERE run_id = ?"
    sql(target, statement, text, run_id)


def set_entry(target: Target, run_id: str, seq: int, entry: str) -> None:
    statement: LiteralString = "UPDATE converge_journal SET entry = ? WHERE run_id = ? AND seq = ?"
    sql(target, statement, entry, run_id, seq)


def test_counts_edited_by_hand_read_as_a_failure_on_a_fact_page(target: Target) -> None:
    run_id, _ = run_of(target, FACTS)
    sql(
        target,
        "UPDATE converge_journal SET counts = ? WHERE run_id = ? AND seq = 2",
        '{"cycle": 1, "keys": [["hypotheses", 3]]}',
        run_id,
    )
    store = counting(target)
    with console(store) as client:
        facts = client.get(facts_path(run_id, "hypotheses", 7)).text
    assert store.loads == 0
    assert 'data-integrity="failed"' in facts
    assert f"run {run_id}: the counts beside its journal entries are not those" in facts
    assert 'data-integrity="shown"' not in facts
