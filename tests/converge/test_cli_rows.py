"""`show` and `review` of a large run stored as rows read its head and a few of its rows.

A run of more than `WHOLE_SHOW` facts is shown from its head (its signature checked), with
its first and last facts; `--json` still prints the whole record; a forged head warns.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from converge import SqliteRunStore
from converge._cli._export import CSV_COLUMNS
from converge.stores._rows_read import SHOWN_FACTS, WHOLE_SHOW
from converge.ui import Reviewers
from tests.cli_runs import cli, run_id_of
from tests.converge.test_ui_console import client_for

FORMATION = str(Path(__file__).resolve().parents[2] / "benchmarks" / "scale_formation.py")
FACTS = WHOLE_SHOW + 1_500
KEY = "rows-cli-key"


@pytest.fixture
def large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A store holding one signed run of `FACTS` facts (and its seed), stored as rows."""
    monkeypatch.setenv("CONVERGE_W8_FACTS", str(FACTS))
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 0, out
    run_id = run_id_of(out)
    with closing(sqlite3.connect(store)) as connection:
        [(layout,)] = connection.execute(
            "SELECT layout FROM converge_runs WHERE run_id = ?", (run_id,)
        ).fetchall()
    assert layout == "rows"
    return store, run_id


def forge_last_fact(store: str, run_id: str) -> None:
    """Change the content of the run's last fact in its row, as a store writer could (its
    digest, the chain and the head left as they were)."""
    with closing(sqlite3.connect(store)) as connection, connection:
        [(seq, entry)] = connection.execute(
            "SELECT seq, entry FROM converge_journal WHERE run_id = ? AND entry LIKE ?",
            (run_id, f'%"content":"fact {FACTS - 1}"%'),
        ).fetchall()
        connection.execute(
            "UPDATE converge_journal SET entry = ? WHERE run_id = ? AND seq = ?",
            (entry.replace(f'"content":"fact {FACTS - 1}"', '"content":"forged"'), run_id, seq),
        )


def test_show_of_a_large_run_stored_as_rows_prints_its_head_and_its_ends(
    large: tuple[str, str],
) -> None:
    store, run_id = large
    code, out = cli("--store", store, "show", run_id)
    assert code == 0, out
    assert f"facts        {FACTS + 1} (seeds 1, hypotheses {FACTS})" in out
    assert "signature    verified" in out
    assert "journal entries, not read by show" in out
    assert f"the first {SHOWN_FACTS} facts, in promotion order:" in out
    assert f"the last {SHOWN_FACTS} facts, in promotion order:" in out
    first, last = out.index("  start: go"), out.index(f"  h-{FACTS - 1}: fact {FACTS - 1}")
    assert first < out.index("  h-18: fact 18") < out.index(f"  h-{FACTS - 20}:") < last
    assert "  h-19: fact 19\n" not in out  # the seed and h-0 to h-18 are the first 20
    assert f"... {FACTS + 1 - 2 * SHOWN_FACTS} facts not shown" in out


def test_show_json_of_a_large_run_is_still_the_whole_record(large: tuple[str, str]) -> None:
    store, run_id = large
    code, out = cli("--store", store, "show", run_id, "--json")
    assert code == 0
    document = json.loads(out)
    assert len(document["facts"]) == FACTS + 1
    assert document["signature_check"]["state"] == "verified"


def test_show_and_review_of_a_large_run_warn_when_its_head_was_forged(
    large: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store, run_id = large
    with closing(sqlite3.connect(store)) as connection, connection:
        [(text,)] = connection.execute(
            "SELECT record FROM converge_runs WHERE run_id = ?", (run_id,)
        ).fetchall()
        head = json.loads(text)
        head["record"]["detail"] = "all good"
        connection.execute(
            "UPDATE converge_runs SET record = ? WHERE run_id = ?", (json.dumps(head), run_id)
        )
    capsys.readouterr()
    code, out = cli("--store", store, "show", run_id)
    assert code == 0
    assert "signature    FAILED" in out
    assert "stored head has a bad signature" in capsys.readouterr().err
    code, out = cli("--store", store, "review", run_id)
    assert code == 0
    assert out == (
        f"run {run_id} is not waiting for anyone (converged) "
        "(not authenticated: its signature check failed)\n"
    )
    code, out = cli("--store", store, "verify", run_id)
    assert code == 7
    assert "stored head has a bad signature" in out


def test_review_of_a_large_finished_run_reads_its_head(large: tuple[str, str]) -> None:
    store, run_id = large
    code, out = cli("--store", store, "review", run_id)
    assert (code, out) == (0, f"run {run_id} is not waiting for anyone (converged)\n")


def test_the_report_of_a_run_says_how_its_facts_were_checked(
    large: tuple[str, str], tmp_path: Path
) -> None:
    """`converge run` checked each fact as it built the record; `converge report` of the stored
    run restores them all."""
    store, run_id = large
    [written] = (tmp_path / "reports").glob(f"{run_id}*.html")
    assert 'data-verified="true"' in written.read_text(encoding="utf-8")
    assert "each fact was checked against the leaf the engine kept" in written.read_text()
    code, out = cli("--store", store, "report", run_id, "--output", str(tmp_path / "again.html"))
    assert code == 0, out
    again = (tmp_path / "again.html").read_text(encoding="utf-8")
    assert 'data-verified="true"' in again
    assert "the stored facts reproduce the root and clock" in again


def test_runs_checks_the_head_of_a_run_stored_as_rows(
    large: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store, run_id = large
    code, out = cli("--store", store, "runs")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith(run_id)]
    assert f"{FACTS + 1} facts" in line
    assert "signature FAILED" not in line
    with closing(sqlite3.connect(store)) as connection, connection:
        [(text,)] = connection.execute(
            "SELECT record FROM converge_runs WHERE run_id = ?", (run_id,)
        ).fetchall()
        head = json.loads(text)
        head["record"]["cycles"] = 1
        connection.execute(
            "UPDATE converge_runs SET record = ? WHERE run_id = ?", (json.dumps(head), run_id)
        )
    capsys.readouterr()
    code, out = cli("--store", store, "runs")
    [line] = [line for line in out.splitlines() if line.startswith(run_id)]
    assert "signature FAILED" in line
    assert "  1 cycles" in line  # what the head says is shown, flagged
    assert "stored head has a bad signature" in capsys.readouterr().err


def test_the_console_lists_a_large_run_stored_as_rows_from_its_head(
    large: tuple[str, str],
) -> None:
    store, run_id = large
    reviewers, token = Reviewers.single("ana")
    with client_for(store, reviewers, token=token) as client:
        listing = client.get("/").text
    [row] = [row for row in listing.split('<tr data-run="')[1:] if row.startswith(run_id)]
    assert 'data-outcome="converged">converged</span>' in row
    assert f'<td class="num">{FACTS + 1}</td>' in row
    assert "UTC</td>" in row  # its start, from the head's times
    assert 'data-signature="failed"' not in row


def test_export_of_a_run_stored_as_rows_writes_what_the_whole_record_holds(
    large: tuple[str, str], tmp_path: Path
) -> None:
    store, run_id = large
    record = anyio.run(SqliteRunStore(store, read_only=True).load, run_id)
    code, out = cli("--store", store, "export", run_id, "--format", "jsonl")
    assert code == 0
    assert out.splitlines() == [fact.model_dump_json() for fact in record.facts]
    target = tmp_path / "facts.csv"
    code, out = cli("--store", store, "export", run_id, "--format", "csv", "-o", str(target))
    assert (code, out) == (0, f"{FACTS + 1} fact(s) exported to {target}\n")
    rows = list(csv.reader(io.StringIO(target.read_text(encoding="utf-8"))))
    assert rows[0] == list(CSV_COLUMNS)
    assert [row[1] for row in rows[1:]] == [fact.id for fact in record.facts]


def test_export_of_a_run_whose_rows_were_changed_writes_nothing(
    large: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, run_id = large
    forge_last_fact(store, run_id)
    target = tmp_path / "facts.jsonl"
    capsys.readouterr()
    code, out = cli("--store", store, "export", run_id, "-o", str(target))
    assert (code, out) == (7, "")
    assert "error: not exported: " in capsys.readouterr().err
    assert not target.exists()
    assert list(tmp_path.glob(".facts.jsonl.*")) == []


def test_show_of_a_large_run_checks_the_facts_it_shows(
    large: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The head is signed, the rows are not read: a fact shown that no longer matches its own
    digest is said to fail, never shown as if verified."""
    store, run_id = large
    forge_last_fact(store, run_id)
    capsys.readouterr()
    code, out = cli("--store", store, "show", run_id)
    assert code == 0
    assert "signature    verified (the head's; the rows below are not: `verify` checks them)" in out
    assert f"integrity    FAILED (run {run_id}: fact hypotheses/h-{FACTS - 1}: digest" in out
    assert "does not match its fields" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('"clock":', '"clock":"1",', "journal entry 5"),  # a clock that is no number
        ('"facts":[', '"facts":[7,', "journal entry 5"),  # a fact that is no object
        ('"cycles":[', '"cycles":[{"no":1},', "journal entry 5"),  # a cycle without its number
        (f'"content":"fact {FACTS - 1}"', '"content":7', f"stored fact hypotheses/h-{FACTS - 1}"),
    ],
)
def test_show_of_a_large_run_refuses_a_malformed_entry_it_reads(
    large: tuple[str, str], old: str, new: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` parses the entries it reads and validates only what it prints: an entry broken
    anywhere it reads is an error naming the run, never a page of what could be read."""
    store, run_id = large
    with closing(sqlite3.connect(store)) as connection, connection:
        [(seq, entry)] = connection.execute(  # the entry of the last facts, which show reads
            "SELECT seq, entry FROM converge_journal WHERE run_id = ? AND entry LIKE ?",
            (run_id, f'%"content":"fact {FACTS - 1}"%'),
        ).fetchall()
        assert old in entry
        connection.execute(
            "UPDATE converge_journal SET entry = ? WHERE run_id = ? AND seq = ?",
            (entry.replace(old, new, 1), run_id, seq),
        )
    capsys.readouterr()
    code, _ = cli("--store", store, "show", run_id)
    assert code == 1
    error = capsys.readouterr().err
    assert error == f"error: StoreError: run {run_id}: {said} is invalid\n"
