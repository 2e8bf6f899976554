"""`converge runs` filters and pages, `converge review` as the inbox, `converge prune`."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
"""Pauses on one gate (`plan-review`)."""
CHAIN = str(HERE / "fork_formation.py")
"""Converges (`fork-chain`)."""


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def run(store: str, formation: str) -> str:
    code, out = cli("--store", store, "run", formation)
    assert code in (0, 6), out
    return run_id_of(out)


def listed(store: str, *args: str) -> list[str]:
    code, out = cli("--store", store, "runs", *args, "--json")
    assert code == 0
    return [run["run_id"] for run in json.loads(out)]


def age_rows(store: str, days: int) -> None:
    """Make every stored run look last saved `days` days earlier."""
    with closing(sqlite3.connect(store)) as connection:
        connection.execute(
            "UPDATE converge_runs SET saved_at = strftime('%Y-%m-%dT%H:%M:%S+00:00', saved_at, ?)",
            (f"-{days} days",),
        )
        connection.commit()


def test_runs_pages_and_filters_in_the_store(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paused = run(store, FORMATION)
    done = run(store, CHAIN)
    assert listed(store) == [done, paused]
    assert listed(store, "--limit", "1") == [done]
    capsys.readouterr()
    code, out = cli("--store", store, "runs", "--limit", "1")
    assert (code, out.split()[0]) == (0, done)
    assert "note: more may follow: --offset 1" in capsys.readouterr().err
    assert listed(store, "--limit", "1", "--offset", "1") == [paused]
    assert listed(store, "--offset", "2") == []
    assert listed(store, "--status", "paused") == [paused]
    assert listed(store, "--status", "converged") == [done]
    assert listed(store, "--status", "running") == []
    assert listed(store, "--pending") == [paused]
    assert listed(store, "--formation", "fork-chain") == [done]
    assert listed(store, "--search", "PLAN-rev") == [paused]
    assert listed(store, "--search", paused[3:15].upper()) == [paused]
    assert listed(store, "--since", "1h") == [done, paused]
    assert listed(store, "--since", "2999-01-01") == []
    code, out = cli("--store", store, "runs", "--status", "paused")
    assert code == 0
    assert out.rstrip("\n").endswith("plan-review  1 gate waiting")
    code, out = cli("--store", store, "runs", "--search", "nothing-like-it")
    assert (code, out) == (0, f"no such runs in {store}\n")


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--status", "done", "must be one of running, paused"),
        ("--since", "yesterday", "must be an ISO 8601 time"),
        ("--offset", "-1", "must be from 0"),
    ],
)
def test_runs_refuses_a_bad_filter_in_one_line(
    store: str, option: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("--store", store, "runs", option, value)
    assert exited.value.code == 2
    [line, _] = capsys.readouterr().err.splitlines()  # the error, then the hint
    assert said in line


def test_review_without_a_run_lists_every_waiting_gate_oldest_first(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(store, FORMATION)
    age_rows(store, 1)
    second = run(store, FORMATION)
    run(store, CHAIN)
    code, out = cli("--store", store, "review", "--json")
    assert code == 6
    gates = json.loads(out)
    assert [gate["run_id"] for gate in gates] == [first, second]
    assert gates[0]["gate_id"] == "gate:2:strategies/costly"
    assert gates[0]["command"].endswith(f"review {first} --store {store}")
    code, out = cli("--store", store, "review", "--limit", "1", "--offset", "1")
    assert code == 6
    assert out.startswith(second)
    assert "strategies/costly from recommender (cycle 2)" in out
    code, out = cli(
        "--store", store, "resume", first, "--approve", "gate:2:strategies/costly", "--by", "jo"
    )
    assert code == 0
    assert [g["run_id"] for g in json.loads(cli("--store", store, "review", "--json")[1])] == [
        second
    ]


def test_review_without_a_run_of_an_empty_store_says_nothing_waits(store: str) -> None:
    run(store, CHAIN)
    assert cli("--store", store, "review") == (0, f"no gates waiting in {store}\n")


def test_prune_deletes_old_runs_and_keeps_paused_ones_unless_named(store: str) -> None:
    paused = run(store, FORMATION)
    done = run(store, CHAIN)
    age_rows(store, 40)
    new = run(store, CHAIN)
    code, out = cli("--store", store, "prune", "--older-than", "30d", "--dry-run", "--json")
    assert (code, json.loads(out)) == (0, {"deleted": [done], "dry_run": True})
    assert set(listed(store)) == {paused, done, new}
    code, out = cli("--store", store, "prune", "--older-than", "30d")
    assert code == 0
    assert out.startswith(f"deleted {done}\ndeleted 1 run saved before ")
    assert set(listed(store)) == {paused, new}
    code, out = cli("--store", store, "show", done)
    assert code == 1  # gone from every command
    code, _ = cli(
        "--store", store, "prune", "--older-than", "30d", "--status", "paused", "--keep-paused"
    )
    assert set(listed(store)) == {paused, new}
    code, out = cli(
        "--store", store, "prune", "--older-than", "30d", "--status", "paused", "--vacuum"
    )
    assert (code, out.splitlines()[0]) == (0, f"deleted {paused}")
    assert listed(store) == [new]
    assert cli("--store", store, "review") == (0, f"no gates waiting in {store}\n")


def test_prune_refuses_a_bad_age_in_one_line(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("--store", store, "prune", "--older-than", "30 days")
    assert exited.value.code == 2
    assert "must be a number and a unit (s, m, h, d or w)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli("--store", store, "prune")  # no age: nothing is deleted by default
    assert exited.value.code == 2
    assert "--older-than" in capsys.readouterr().err


def test_a_hand_edited_inbox_row_changes_nothing_review_of_the_run_shows(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox is an index: `review RUN` shows the signed record, whatever the row says."""
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", "test-signing-key")
    paused = run(store, FORMATION)
    with closing(sqlite3.connect(store)) as connection:
        connection.execute("UPDATE converge_gates SET summary = 'Buy nothing at all.'")
        connection.commit()
    code, out = cli("--store", store, "review")
    assert code == 6
    assert "Buy nothing at all." in out  # the index, as the inbox lists it
    code, out = cli("--store", store, "review", paused)
    assert code == 6
    assert "Buy nothing at all." not in out
    assert "strategies/costly: Buy the enterprise plan" in out


def test_runs_with_a_key_shows_the_fork_parent_the_signed_record_names(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", "test-signing-key")
    paused = run(store, FORMATION)
    done = run(store, CHAIN)
    with closing(sqlite3.connect(store)) as connection:
        connection.execute(
            "UPDATE converge_runs SET parent_run_id = ?, fork_cycle = 1, pending = 7 "
            "WHERE run_id = ?",
            (paused, done),
        )
        connection.commit()
    [line] = [
        line for line in cli("--store", store, "runs")[1].splitlines() if line.startswith(done)
    ]
    assert "fork of" not in line
    assert "gate" not in line
    [document] = json.loads(cli("--store", store, "runs", "--json", "--search", done)[1])
    assert (document["parent_run_id"], document["pending"]) == (None, 0)
