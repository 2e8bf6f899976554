"""`converge fork`, `diff`, `replay --live-from`, and the lineage `verify`, `runs` and `show`
report, through the command line, against a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runs import cli
from tests.converge.forgery import stored_json, write_json

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "fork_formation.py")
KEY = "fork-cli-key"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    return str(tmp_path / "runs.db")


def _run(store: str) -> str:
    code, out = cli("--store", store, "run", FORMATION, "--json")
    assert code == 0, out
    run_id: str = json.loads(out)["run_id"]
    return run_id


def _fork(store: str, *args: str) -> tuple[int, dict[str, object]]:
    code, out = cli("--store", store, "fork", *args, "--json")
    return code, json.loads(out) if code in (0, 6) else {"out": out}


def test_cli_fork_runs_from_the_cycle_and_verifies_its_lineage(store: str) -> None:
    parent = _run(store)
    code, fork = _fork(
        store,
        parent,
        "--at",
        "3",
        "--input",
        "fork_bids",
        "b1",
        "a bid",
        "--payload",
        '{"amount": 5}',
        "--retract",
        "evaluations/tally-1",
    )
    assert code == 0, fork
    lineage = fork["lineage"]
    assert isinstance(lineage, dict)
    assert lineage["parent_run_id"] == parent
    assert lineage["at_cycle"] == 3
    fork_id = str(fork["run_id"])
    code, out = cli("--store", store, "verify", fork_id)
    assert code == 0, out
    assert "the parent's record has that root there too" in out
    code, out = cli("--store", store, "runs")
    assert f"fork of {parent[:12]}@3" in out
    assert "1 fork listed" in out
    code, out = cli("--store", store, "show", fork_id)
    assert f"forked from  {parent} at cycle 3" in out


def test_cli_verify_fails_a_fork_whose_lineage_was_edited(store: str) -> None:
    parent = _run(store)
    code, fork = _fork(store, parent, "--at", "2")
    assert code == 0, fork
    fork_id = str(fork["run_id"])
    # the parent's stored record rewritten: its facts no longer give the named root
    record = stored_json(store, parent)
    facts = record["facts"]
    assert isinstance(facts, list)
    write_json(store, parent, {**record, "facts": facts[:-1]})
    code, out = cli("--store", store, "verify", fork_id)
    assert code == 7, out
    assert out.startswith("FAILED: parent run")
    # the fork's own record with its lineage changed: its signature fails
    forged = stored_json(store, fork_id)
    lineage = forged["lineage"]
    assert isinstance(lineage, dict)
    write_json(store, fork_id, {**forged, "lineage": {**lineage, "at_cycle": 1}})
    code, out = cli("--store", store, "verify", fork_id)
    assert code == 7, out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--at", "99"), "has no cycle 99: it ran cycles 0 to 8"),
        (("--at", "2", "--retract", "nope"), "--retract nope: run"),
        (("--at", "2", "--input", "nokey", "x", "y"), "inputs[0] (nokey/x): key"),
        (
            ("--at", "2", "--input", "fork_bids", "b", "c", "--payload", '{"amount": "x"}'),
            "inputs[0] (fork_bids/b): payload does not fit Bid",
        ),
    ],
)
def test_cli_fork_refuses_bad_input_with_one_line_and_writes_nothing(
    store: str, args: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = _run(store)
    capsys.readouterr()
    code, _ = cli("--store", store, "fork", parent, *args)
    err = capsys.readouterr().err
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert said in errors[0]
    code, out = cli("--store", store, "runs", "--json")
    assert len(json.loads(out)) == 1


def test_cli_fork_refuses_a_parent_whose_signature_fails(store: str) -> None:
    parent = _run(store)
    record = stored_json(store, parent)
    write_json(store, parent, {**record, "detail": "forged"})
    code, _ = cli("--store", store, "fork", parent, "--at", "2")
    assert code == 7
    code, out = cli("--store", store, "runs", "--json")
    assert len(json.loads(out)) == 1


def test_cli_fork_names_a_formation_that_no_longer_imports(store: str, tmp_path: Path) -> None:
    parent = _run(store)
    gone = tmp_path / "gone.py"
    code, out = cli("--store", store, "fork", parent, "--at", "2", "--formation", str(gone))
    assert code == 1
    code, out = cli("--store", store, "runs", "--json")
    assert len(json.loads(out)) == 1


def test_cli_diff_names_the_first_cycle_and_the_facts(store: str) -> None:
    parent = _run(store)
    code, fork = _fork(
        store, parent, "--at", "3", "--input", "fork_bids", "b1", "x", "--payload", '{"amount": 1}'
    )
    assert code == 0
    code, out = cli("--store", store, "diff", parent, str(fork["run_id"]), "--json")
    assert code == 0, out
    diff = json.loads(out)
    assert diff["first_difference"] == 3
    keys = {entry["key"]: entry for entry in diff["keys"]}
    assert [f["id"] for f in keys["fork_bids"]["only_b"]] == ["b1"]
    changed = keys["hypotheses"]["changed"]
    assert [c["id"] for c in changed] == ["step-3", "step-4", "step-5"]
    assert changed[0]["a"]["suggestor"] == "stepper"
    assert changed[0]["a"]["cycle"] == 4
    code, out = cli("--store", store, "diff", parent, str(fork["run_id"]), "--key", "fork_bids")
    assert code == 0
    assert "hypotheses" not in out
    assert "only in B: b1" in out
    code, out = cli("--store", store, "diff", parent, parent)
    assert "no fact differs" in out


def test_cli_replay_live_from_replays_then_runs_live(store: str) -> None:
    parent = _run(store)
    code, out = cli("--store", store, "replay", parent, "--live-from", "4", "--json")
    assert code == 0, out
    record = json.loads(out)
    assert record["lineage"]["kind"] == "replay"
    assert record["lineage"]["at_cycle"] == 4
    assert record["integrity"] == stored_json(store, parent)["integrity"]
