"""A paused run stored as rows: its journal kept, a signed head holding its checkpoint's rest.

A run saved after every cycle that pauses ends like a finished one: its journal stays as its
rows and its row takes a `RecordHead` whose record and checkpoint hold no facts, plus the
facts its gates' evidence cites. Each test tries to break what that promises: the record
`load` assembles is byte for byte the one signed (its checkpoint's signature included),
`converge review RUN` and the console's gate page read the head alone and say so, and a
head or row changed by hand, a head pasted into another run's row, a save that dies
between the entry and the head, or two deciders at once never read as success nor lose a
promoted fact. Every test runs on SQLite and, with DATABASE_URL set, on PostgreSQL.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest
import test_store_rows
from starlette.testclient import TestClient
from test_durable import chain_engine, sql
from test_store import copy_rows, open_store, scoped_postgres
from test_store_rows import Target, entries, head_text, layout, set_entry, set_head

from converge import (
    GateDecision,
    InvalidResumeError,
    PostgresRunStore,
    RecordHead,
    RowStore,
    RunRecord,
    RunStatus,
    RunStore,
    SqliteRunStore,
    StaleRecordError,
    StoreError,
)
from converge._core._store import SCHEMA_VERSION
from converge._formation import load_formation
from converge._kernel._pause import verify_signature
from converge.stores import _rows_read as rows_read
from converge.stores._rows_check import rows_problem
from converge.ui import ConsoleSettings, Reviewers, Sessions, create_app
from tests.cli_runs import cli, run_id_of
from tests.converge.forgery import fact_digest

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cited_formation.py")
GATE = "gate:3:strategies/bet"
KEY = "paused-rows-key"
CITED = ["seeds/budget", "hypotheses/grounds-1", "hypotheses/grounds-2"]  # in key order


target = test_store_rows.target
"""Each test runs on SQLite and, with DATABASE_URL set, on PostgreSQL."""


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    return KEY.encode()


def paused_run(target: Target) -> str:
    """A run of `cited_formation.py` paused on `GATE`, saved with `converge run`."""
    code, out = cli("--store", target[1], "run", FORMATION)
    assert code == 6, out
    return run_id_of(out)


def head_json(target: Target, run_id: str) -> Any:  # noqa: ANN401 - JSON, edited by hand
    return json.loads(head_text(target, run_id))


def row_state(target: Target, run_id: str) -> tuple[object, ...]:
    [row] = sql(
        target, "SELECT status, version, layout FROM converge_runs WHERE run_id = ?", run_id
    )
    return row


async def reads_whole(store: RunStore, run_id: str) -> RunRecord:
    return await store.load(run_id)


@contextmanager
def console(target: Target, tmp_path: Path) -> Generator[tuple[TestClient, str]]:
    """A console on the store, signed in as ana, and her CSRF token."""
    users = tmp_path / "reviewers.json"
    ana = Reviewers.add(users, "ana")
    reviewers = Reviewers.load(users)
    settings = ConsoleSettings(
        store=open_store(*target),
        reviewers=reviewers,
        poll_seconds=0.05,
        sessions=Sessions(),
        trust_unsigned=True,
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765") as client:
        client.headers["authorization"] = f"Bearer {ana}"
        found = reviewers.find(ana)
        assert found is not None
        yield client, reviewers.csrf(found)


def gate_url(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}/gates/{quote(GATE, safe='')}"


def no_whole_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every whole-record read fail: what still works reads the head alone."""

    async def refused(self: object, run_id: str, /) -> RunRecord:
        raise AssertionError(f"run {run_id} was read whole")

    monkeypatch.setattr(SqliteRunStore, "load", refused)
    monkeypatch.setattr(PostgresRunStore, "load", refused)


# -- what is stored ------------------------------------------------------------------------------


async def test_a_paused_run_is_stored_as_rows_and_loads_byte_identical(
    target: Target, keyed: bytes
) -> None:
    store = open_store(*target)
    engine = load_formation(FORMATION).engine(store=store, signing_key=keyed)
    result = await engine.run()
    run_id = result.run_id
    assert layout(target, run_id) == "rows"
    head = RecordHead.model_validate_json(head_text(target, run_id))
    head.verify_signature(keyed)
    checkpoint = head.record.checkpoint
    assert checkpoint is not None
    assert (head.record.facts, checkpoint.facts, checkpoint.cycles) == ((), (), ())
    assert [f"{f.key.value}/{f.id}" for f in head.cited] == CITED  # not the 30 fillers
    assert [g.gate_id for g in head.record.pending] == [GATE]
    saved = RunRecord.saved(result)
    assert saved is not None
    assert saved.signature is not None
    loaded = await store.load(run_id)
    assert loaded.model_dump_json() == saved.model_dump_json()
    loaded.verify_signature(keyed)
    assert loaded.checkpoint is not None
    verify_signature(loaded.checkpoint, keyed)  # the checkpoint's own, as the engine signed it
    assert await store.load_checkpoint(run_id) == result.checkpoint
    assert isinstance(store, RowStore)
    assert await store.load_head(run_id) is None  # only when asked for a paused one
    assert (await store.pending_gates(limit=500))[-1].gate_id == GATE  # type: ignore[attr-defined]


async def test_it_resumes_from_its_rows_and_ends_as_rows(target: Target, keyed: bytes) -> None:
    store = open_store(*target)
    paused = await load_formation(FORMATION).engine(store=store, signing_key=keyed).run()
    decision = GateDecision.approve(GATE, by="jane")
    engine = load_formation(FORMATION).engine(store=store, signing_key=keyed)
    resumed = await engine.resume_run(paused.run_id, [decision])
    assert resumed.converged
    assert layout(target, paused.run_id) == "rows"
    loaded = await store.load(paused.run_id)
    assert loaded.trace.decisions == (decision,)
    promoted = {f"{f.key.value}/{f.id}" for f in loaded.facts}
    assert {f"{f.key.value}/{f.id}" for f in paused.context.facts()} < promoted
    assert "strategies/bet" in promoted


def test_a_run_saved_at_its_end_only_pauses_whole_and_reads_as_before(
    target: Target, keyed: bytes, tmp_path: Path
) -> None:
    store = open_store(*target)
    engine = load_formation(FORMATION).engine(store=store, signing_key=keyed, durability="exit")
    run_id = engine.run_sync().run_id
    assert layout(target, run_id) == "whole"
    assert isinstance(store, RowStore)
    assert anyio.run(lambda: store.load_head(run_id, paused=True)) is None
    code, out = cli("--store", target[1], "review", run_id)
    assert code == 6
    assert "the stored head" not in out
    with console(target, tmp_path) as (client, _):
        page = client.get(gate_url(run_id))
        assert page.status_code == 200
        assert 'data-evidence="hypotheses/grounds-1"' in page.text


# -- read from the head alone --------------------------------------------------------------------


def test_review_reads_the_head_alone_and_says_so(
    target: Target, keyed: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = paused_run(target)
    no_whole_reads(monkeypatch)
    code, out = cli("--store", target[1], "review", run_id)
    assert code == 6
    assert f"gate {GATE}" in out
    assert "bet everything on one vendor" in out
    assert f"run {run_id}: the stored head's signature verified (its rows were not read)" in out
    code, out = cli("--store", target[1], "review", run_id, "--json")
    assert code == 6
    document = json.loads(out)
    assert [gate["gate_id"] for gate in document["pending"]] == [GATE]
    assert document["signature_check"]["state"] == "verified"
    code, out = cli("--store", target[1], "runs", "--search", run_id, "--json")  # its head
    assert code == 0
    [line] = [run for run in json.loads(out) if run["run_id"] == run_id]
    assert (line["status"], line["pending"]) == ("paused", 1)
    assert line["signature_check"]["state"] == "verified"


def test_the_gate_page_reads_the_head_and_the_facts_its_evidence_cites(
    target: Target, keyed: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = paused_run(target)
    with console(target, tmp_path) as (client, _):
        whole = client.get(f"/runs/{quote(run_id, safe='')}")  # the run page reads it whole
        assert whole.status_code == 200
        no_whole_reads(monkeypatch)
        page = client.get(gate_url(run_id))
        assert page.status_code == 200
        text = page.text
        for ref in CITED:
            assert f'data-evidence="{ref}"' in text
        assert "the vendor answers in a day" in text
        assert "<code>hypotheses/nowhere</code> <span" in text
        assert "(not a fact of this run)" in text
        assert "filler" not in text
        assert (
            '<p class="trust" data-signature="verified">The stored head&#x27;s signature '
            "verified (its rows were not read).</p>"
        ) in text
        assert "data-decision-form" in text
        assert 'name="version" value="' in text


# -- a head or rows changed behind the store's back ----------------------------------------------


def _forge_gate(gates: Any) -> None:  # noqa: ANN401 - JSON, edited by hand
    gates[0]["summary"] = "bet a little"
    gates[0]["proposal"]["content"] = "bet a little"


def test_a_pending_gate_edited_in_the_head_is_refused_everywhere_and_nothing_is_decided(
    target: Target, keyed: bytes, tmp_path: Path
) -> None:
    run_id = paused_run(target)
    head = head_json(target, run_id)
    _forge_gate(head["record"]["pending"])
    _forge_gate(head["record"]["checkpoint"]["pending"])
    set_head(target, run_id, json.dumps(head))
    before = row_state(target, run_id)
    code, out = cli("--store", target[1], "review", run_id)
    assert code not in (0, 6)
    assert "bet a little" not in out
    with console(target, tmp_path) as (client, csrf):
        page = client.get(gate_url(run_id)).text
        assert 'data-signature="failed"' in page
        assert "the stored head has a bad signature" in page
        assert "data-decision-form" not in page
        form = {"csrf": csrf, "version": str(before[1]), f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
    code, _ = cli("--store", target[1], "resume", run_id, "--approve", GATE, "--by", "cat")
    assert code != 0
    assert row_state(target, run_id) == before  # still paused, nothing decided


def test_a_gate_edited_in_the_record_but_not_its_checkpoint_reads_as_invalid(
    target: Target, tmp_path: Path
) -> None:
    run_id = paused_run(target)
    head = head_json(target, run_id)
    _forge_gate(head["record"]["pending"])
    set_head(target, run_id, json.dumps(head))
    code, _ = cli("--store", target[1], "review", run_id)
    assert code not in (0, 6)
    with console(target, tmp_path) as (client, _):
        response = client.get(gate_url(run_id))
        assert response.status_code == 409
        assert "pending gates differ from its checkpoint" in response.text


def test_a_cited_fact_edited_in_the_head_is_refused_by_the_page_and_by_load(
    target: Target, tmp_path: Path
) -> None:
    run_id = paused_run(target)  # no key: nothing is authenticated, but nothing may disagree
    head = head_json(target, run_id)
    fact = head["cited"][1]
    fact["content"] = "the vendor never answers"
    set_head(target, run_id, json.dumps(head))
    with console(target, tmp_path) as (client, _):
        response = client.get(gate_url(run_id))
        assert response.status_code == 409
        assert "a fact its gates cite was changed" in response.text
    fact["digest"] = fact_digest(fact)
    set_head(target, run_id, json.dumps(head))
    store = open_store(*target)
    with pytest.raises(StoreError, match=f"run {run_id}: the facts its head cites differ"):
        anyio.run(reads_whole, store, run_id)
    code, _ = cli("--store", target[1], "resume", run_id, "--approve", GATE, "--by", "cat")
    assert code != 0
    assert row_state(target, run_id)[0] == "paused"


@pytest.mark.parametrize("how", ["edited", "dropped"])
def test_an_entry_edited_or_dropped_stops_the_decision_not_the_review(
    target: Target, keyed: bytes, tmp_path: Path, how: str
) -> None:
    run_id = paused_run(target)
    [(seq, entry)] = [(seq, entry) for seq, entry in entries(target, run_id) if "filler" in entry]
    if how == "edited":
        set_entry(target, run_id, seq, entry.replace("filler", "fillet", 1))
    else:
        sql(target, "DELETE FROM converge_journal WHERE run_id = ? AND seq = ?", run_id, seq)
    before = row_state(target, run_id)
    code, out = cli("--store", target[1], "review", run_id)  # the head alone: it still reads
    assert code == 6
    assert "its rows were not read" in out
    with console(target, tmp_path) as (client, csrf):
        assert client.get(gate_url(run_id)).status_code == 200
        form = {"csrf": csrf, "version": str(before[1]), f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
        assert "does not match its head" in response.text
    code, _ = cli("--store", target[1], "resume", run_id, "--approve", GATE, "--by", "cat")
    assert code != 0
    assert row_state(target, run_id) == before
    code, out = cli("--store", target[1], "verify", run_id)
    assert (code, out) == (1, "")


def test_a_head_pasted_into_another_runs_row_is_refused(target: Target, tmp_path: Path) -> None:
    first, second = paused_run(target), paused_run(target)
    set_head(target, second, head_text(target, first))
    code, _ = cli("--store", target[1], "review", second)
    assert code not in (0, 6)
    with console(target, tmp_path) as (client, _):
        response = client.get(gate_url(second))
        assert response.status_code == 409
        assert f"the row of run {second} holds the record of run {first}" in response.text
    with pytest.raises(StoreError, match=f"the row of run {second} holds the record of run"):
        anyio.run(reads_whole, open_store(*target), second)


async def test_a_pause_that_dies_between_its_last_entry_and_its_head_saves_neither(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(*target)

    def dies(record: RunRecord) -> list[tuple[object, ...]]:
        raise OSError("killed after the head was written, before the entry")

    monkeypatch.setattr("converge.stores._db.gate_rows", dies)
    engine = load_formation(FORMATION).engine(store=store)
    with pytest.raises(StoreError, match="could not be saved") as caught:
        await engine.run()
    result = caught.value.result
    assert result is not None
    run_id = result.run_id
    status, _, kept = row_state(target, run_id)
    assert (status, kept) == ("running", "rows")  # the last per-cycle save, whole
    progress = await store.load(run_id)
    assert progress.status in (RunStatus.RUNNING, RunStatus.INTERRUPTED)
    saved = {f"{f.key.value}/{f.id}" for f in progress.facts}
    assert saved <= {f"{f.key.value}/{f.id}" for f in result.context.facts()}
    assert "seeds/budget" in saved
    assert progress.checkpoint is not None
    assert progress.checkpoint.pending == ()  # never half a pause


async def test_two_deciders_at_once_one_wins_and_the_other_is_told(target: Target) -> None:
    store = open_store(*target)
    paused = await load_formation(FORMATION).engine(store=store).run()
    run_id = paused.run_id
    outcomes: list[object] = []

    async def decide(by: str) -> None:
        engine = load_formation(FORMATION).engine(store=store)
        try:
            outcomes.append(await engine.resume_run(run_id, [GateDecision.approve(GATE, by=by)]))
        except (StaleRecordError, InvalidResumeError) as error:  # lost the claim, or too late
            outcomes.append(error)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(decide, "ana")
        tasks.start_soon(decide, "bo")
    [lost] = [o for o in outcomes if isinstance(o, Exception)]
    record = await store.load(run_id)
    [decision] = record.trace.decisions
    if isinstance(lost, InvalidResumeError):
        assert f"decided by {decision.by}" in str(lost)
    assert record.status is RunStatus.FINISHED
    assert "strategies/bet" in {f"{f.key.value}/{f.id}" for f in record.facts}


# -- a store written before paused runs were stored as rows --------------------------------------

V6_FIXTURE = HERE / "fixtures" / "runs-v6.db"
"""A schema 6 store written by converge before paused runs were stored as rows, with the key
`test-signing-key`: a converged chain run stored as rows (its head has no `cited`) and a
paused one stored whole (gate `V6_GATE`)."""
V6_CONVERGED = "2d2f617a779c404182e1f999b2232e56"
V6_PAUSED = "6b078a4178c94ca3a848fbb421a71332"
V6_GATE = "gate:2:strategies/risky"
V6_KEY = "test-signing-key"


@pytest.fixture(params=["sqlite", "postgres"])
def v6_target(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[Target]:
    """The v6 fixture's file, or its rows inserted as they are into a fresh PostgreSQL schema
    of today's tables."""
    if request.param == "sqlite":
        path = tmp_path / "runs-v6.db"
        shutil.copyfile(V6_FIXTURE, path)
        yield ("sqlite", str(path))
        return
    with scoped_postgres("v6") as scoped:
        made = PostgresRunStore(scoped)
        assert anyio.run(lambda: made.list_runs()) == ()  # today's tables, empty
        made.close()
        target = ("postgres", scoped)
        copy_rows(V6_FIXTURE, scoped)
        yield target


async def test_a_schema_6_store_is_upgraded_in_place_and_resumes(v6_target: Target) -> None:
    target = v6_target
    key = V6_KEY.encode()
    store = open_store(*target)
    assert isinstance(store, SqliteRunStore | PostgresRunStore)
    head = await store.load_head(V6_CONVERGED)
    assert head is not None
    assert '"cited"' not in head_text(target, V6_CONVERGED)
    head.verify_signature(key)  # a head written before `cited` verifies as it did
    assert await rows_problem(store, head) is None
    for run_id in (V6_CONVERGED, V6_PAUSED):
        (await store.load(run_id)).verify_signature(key)
    assert layout(target, V6_PAUSED) == "whole"
    assert await store.load_head(V6_PAUSED, paused=True) is None  # read whole, as before
    decision = GateDecision.approve(V6_GATE, by="jane")
    resumed = await chain_engine(store, signing_key=V6_KEY, risky=True)[0].resume_run(
        V6_PAUSED, [decision]
    )
    assert resumed.converged
    assert layout(target, V6_PAUSED) == "rows"
    loaded = await store.load(V6_PAUSED)
    loaded.verify_signature(key)
    assert loaded.trace.decisions == (decision,)
    [(version,)] = sql(target, "SELECT value FROM converge_meta WHERE key = 'schema_version'")
    assert str(version) == str(SCHEMA_VERSION) == "8"  # upgraded in place, nothing else changed
    store.close()


def test_a_decision_raced_from_the_command_and_the_console_is_taken_once(
    target: Target, tmp_path: Path
) -> None:
    run_id = paused_run(target)
    with console(target, tmp_path) as (client, csrf):
        page = client.get(gate_url(run_id)).text  # read from the head: its version too
        seen = page.split('name="version" value="')[1].split('"')[0]
        assert seen == str(row_state(target, run_id)[1])
        code, _ = cli("--store", target[1], "resume", run_id, "--reject", GATE, "--by", "cli-cat")
        assert code == 0
        form = {"csrf": csrf, "version": seen, f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
        assert "already decided by cli-cat: rejected" in response.text
        again = client.get(gate_url(run_id))  # a finished run's head says who decided
        assert again.status_code == 409
        assert "already decided by cli-cat" in again.text
    record = anyio.run(reads_whole, open_store(*target), run_id)
    assert [(d.by, d.approved) for d in record.trace.decisions] == [("cli-cat", False)]
    assert "strategies/bet" not in {f"{f.key.value}/{f.id}" for f in record.facts}
    assert {"seeds/budget", "hypotheses/grounds-2"} <= {
        f"{f.key.value}/{f.id}" for f in record.facts
    }


def test_show_of_a_large_paused_run_reads_its_head_and_names_its_gates(
    target: Target, keyed: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = paused_run(target)
    code, whole = cli("--store", target[1], "show", run_id)
    assert code == 0
    monkeypatch.setattr(rows_read, "WHOLE_SHOW", 1)  # large: shown from its head
    no_whole_reads(monkeypatch)
    code, out = cli("--store", target[1], "show", run_id)
    assert code == 0
    summary = whole.split("\nsignature", 1)[0]
    assert out.startswith(summary)  # the same summary, its waiting gates included
    assert GATE in summary
    assert "signature    verified (the head's; the rows below are not" in out
    assert "the first " in out
