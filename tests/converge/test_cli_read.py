"""Every read command checks what it shows: `verify`, `show`, `review` and `runs` against a
store someone edited by hand (SQLite, and PostgreSQL when DATABASE_URL is set).

With a signing key, a record that was forged consistently (facts rehashed, a swapped
signature, a forged approver, a dropped fact, the signature removed) makes `verify` fail
with status 7 and one line, and `show`, `review` and `runs` say so on standard error and
in their JSON. Without a key, they say the record is not authenticated.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import LiteralString

import pytest

from tests.cli_runs import cli, run_id_of
from tests.converge.forgery import Record, rehash, stored_json, write_json
from tests.converge.hitl_formation import SIGNING_KEY

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"
DATABASE_URL = os.environ.get("DATABASE_URL")
REQUIRE = os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
    elif DATABASE_URL:
        yield DATABASE_URL
    elif REQUIRE:
        pytest.fail("CONVERGE_REQUIRE_SERVICES=1 but DATABASE_URL is not set")
    else:
        pytest.skip("set DATABASE_URL=postgresql://... for the PostgreSQL store")


def converged_run(store: str) -> str:
    """A run that paused, then jane approved its gate: it converged."""
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 6, out
    run_id = run_id_of(out)
    code, out = cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jane")
    assert code == 0, out
    return run_id


def _facts(record: Record) -> list[dict[str, object]]:
    facts = record["facts"]
    assert isinstance(facts, list)
    return facts  # pyright: ignore[reportUnknownVariableType]


def _rehashed_content(record: Record, _: Record) -> None:
    for fact in _facts(record):
        if fact["id"] == "cheap":
            fact["content"] = "Wire the budget to mallory"
    rehash(record)


def _swapped_signature(record: Record, other: Record) -> None:
    record["signature"] = other["signature"]


def _forged_approver(record: Record, _: Record) -> None:
    for fact in _facts(record):
        promotion = fact["promotion"]
        assert isinstance(promotion, dict)
        if promotion["approved_by"] is not None:
            promotion["approved_by"] = "mallory"
    trace = record["trace"]
    assert isinstance(trace, dict)
    for decision in trace["decisions"]:  # pyright: ignore[reportUnknownVariableType]
        decision["by"] = "mallory"
    rehash(record)


def _dropped_fact(record: Record, _: Record) -> None:
    facts = _facts(record)
    facts[:] = [fact for fact in facts if fact["id"] != "costly"]
    rehash(record)


def _unsigned(record: Record, _: Record) -> None:
    record["signature"] = None


Forgery = Callable[[Record, Record], None]

FORGERIES: dict[str, tuple[Forgery, str]] = {
    "facts-rehashed": (_rehashed_content, "bad signature"),
    "signature-swapped": (_swapped_signature, "bad signature"),
    "approver-forged": (_forged_approver, "bad signature"),
    "fact-dropped": (_dropped_fact, "bad signature"),
    "unsigned": (_unsigned, "unsigned"),
}


def forged_run(store: str, forgery: Forgery) -> str:
    """Two signed runs; the first one's record forged, consistently (digests, root, count)."""
    run_id, other = converged_run(store), converged_run(store)
    record = stored_json(store, run_id)
    forgery(record, stored_json(store, other))
    write_json(store, run_id, record)
    return run_id


@pytest.mark.parametrize("forgery", FORGERIES)
def test_verify_fails_with_status_7_when_a_signed_record_was_forged(
    store: str, forgery: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    forge, reason = FORGERIES[forgery]
    run_id = forged_run(store, forge)
    code, out = cli("--store", store, "verify", run_id)
    assert code == 7, out
    assert out.startswith(f"FAILED: run {run_id}: ")
    assert reason in out
    assert out.count("\n") == 1
    code, out = cli("--store", store, "verify", run_id, "--json")
    document = json.loads(out)
    assert (code, document["verified"]) == (7, False)
    assert reason in document["error"]
    assert document["signature_check"]["state"] == "failed"


@pytest.mark.parametrize("forgery", FORGERIES)
def test_show_warns_and_says_so_in_json_when_a_signed_record_was_forged(
    store: str, forgery: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    forge, reason = FORGERIES[forgery]
    run_id = forged_run(store, forge)
    capsys.readouterr()
    code, out = cli("--store", store, "show", run_id)
    err = capsys.readouterr().err
    assert code == 0
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert run_id in warning
    assert reason in warning
    assert "not authenticated" in warning
    assert "signature    FAILED" in out
    assert "signature    verified" not in out
    code, out = cli("--store", store, "show", run_id, "--json")
    document = json.loads(out)
    assert document["signature_check"]["state"] == "failed"
    assert reason in document["signature_check"]["message"]


def test_show_says_the_signature_verified_when_the_record_is_intact(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    run_id = converged_run(store)
    capsys.readouterr()
    code, out = cli("--store", store, "show", run_id)
    assert (code, capsys.readouterr().err) == (0, "")
    assert "signature    verified" in out
    code, out = cli("--store", store, "verify", run_id)
    assert code == 0
    assert out.startswith(f"verified: run {run_id}, 4 facts, ")
    assert out.endswith("; signature verified\n")
    document = json.loads(cli("--store", store, "show", run_id, "--json")[1])
    assert document["signature_check"]["state"] == "verified"
    assert capsys.readouterr().err == ""


def test_review_of_a_finished_run_warns_when_its_approver_was_forged(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    run_id = forged_run(store, _forged_approver)
    capsys.readouterr()
    code, out = cli("--store", store, "review", run_id)
    err = capsys.readouterr().err
    assert code == 0
    assert "decided by mallory" in out
    assert "not authenticated" in out  # on the very line that names mallory
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "bad signature" in warning
    document = json.loads(cli("--store", store, "review", run_id, "--json")[1])
    assert document["signature_check"]["state"] == "failed"


@pytest.mark.parametrize("forgery", ["facts-rehashed", "unsigned"])
def test_runs_warns_for_each_forged_record_when_a_key_is_set(
    store: str, forgery: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    forge, reason = FORGERIES[forgery]
    good = converged_run(store)
    run_id = forged_run(store, forge)
    capsys.readouterr()
    code, out = cli("--store", store, "runs", "--limit", "100")
    err = capsys.readouterr().err
    assert code == 0
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert [line for line in warnings if run_id in line]
    assert not [line for line in warnings if good in line]
    [forged_line] = [line for line in out.splitlines() if line.startswith(run_id)]
    assert forged_line.endswith("signature FAILED")
    [good_line] = [line for line in out.splitlines() if line.startswith(good)]
    assert "signature" not in good_line
    listed = {
        run["run_id"]: run
        for run in json.loads(cli("--store", store, "runs", "--json", "--limit", "100")[1])
    }
    assert listed[run_id]["signature_check"]["state"] == "failed"
    assert reason in listed[run_id]["signature_check"]["message"]
    assert listed[good]["signature_check"]["state"] == "verified"


def test_runs_shows_what_the_signed_record_says_when_a_column_was_edited(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The listing comes from columns no signature covers: with a key, lines come from the
    records that were checked."""
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    code, out = cli("--store", store, "run", FORMATION)
    run_id = run_id_of(out)
    _update_row(
        store,
        run_id,
        "UPDATE converge_runs SET stop_reason = 'converged', status = 'finished', "
        "cycles = 9, fact_count = 99, name = 'forged' WHERE run_id = ?",
    )
    capsys.readouterr()
    code, out = cli("--store", store, "runs", "--limit", "100")
    assert code == 0
    assert run_id not in capsys.readouterr().err  # other tests' runs may share a PostgreSQL store
    [line] = [line for line in out.splitlines() if line.startswith(run_id)]
    assert line.split()[2:] == [
        "paused",
        "awaiting_human",
        "2",
        "cycles",
        "2",
        "facts",
        "plan-review",
        "1",
        "gate",
        "waiting",
    ]
    [listed] = [
        run
        for run in json.loads(cli("--store", store, "runs", "--json", "--limit", "100")[1])
        if run["run_id"] == run_id
    ]
    assert (listed["status"], listed["stop_reason"], listed["name"]) == (
        "paused",
        "awaiting_human",
        "plan-review",
    )
    monkeypatch.delenv("CONVERGE_SIGNING_KEY")  # without a key: the columns, said unchecked
    [line] = [line for line in cli("--store", store, "runs")[1].splitlines() if run_id in line]
    assert "forged" in line
    assert "not authenticated" in capsys.readouterr().err


def _update_row(store: str, run_id: str, statement: LiteralString) -> None:
    if store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store) as connection:
            connection.execute(statement.replace("?", "%s"), (run_id,))
        return
    import sqlite3

    with sqlite3.connect(store) as connection:
        connection.execute(statement, (run_id,))
    connection.close()


def test_read_commands_say_the_record_is_not_authenticated_without_a_key(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = forged_run(store, _rehashed_content)  # consistent: nothing can tell without a key
    capsys.readouterr()
    code, out = cli("--store", store, "verify", run_id)
    assert code == 0
    assert out.endswith("; not authenticated (no signing key is set)\n")
    capsys.readouterr()
    for command in ("verify", "show", "review"):
        cli("--store", store, command, run_id)
        [note] = capsys.readouterr().err.splitlines()
        assert note.startswith(f"note: run {run_id}: the record is not authenticated"), command
        document = json.loads(cli("--store", store, command, run_id, "--json")[1])
        assert document["signature_check"]["state"] == "unchecked", command
        assert "not authenticated" in capsys.readouterr().err
    code, out = cli("--store", store, "runs", "--limit", "100")
    [note] = [
        line  # a shared PostgreSQL store may hold more runs than one page
        for line in capsys.readouterr().err.splitlines()
        if not line.startswith("note: more may follow")
    ]
    assert note.startswith("note: ")
    assert "not authenticated" in note
    listed = json.loads(cli("--store", store, "runs", "--json", "--limit", "100")[1])
    assert {run["signature_check"]["state"] for run in listed} == {"unchecked"}


@pytest.mark.parametrize("edit", ["content", "content-and-digest", "final-root"])
def test_verify_rederives_every_leaf_from_the_stored_fields_even_without_a_key(
    store: str, edit: str
) -> None:
    run_id = converged_run(store)
    record = stored_json(store, run_id)
    [cheap] = [fact for fact in _facts(record) if fact["id"] == "cheap"]
    if edit == "final-root":
        trace = record["trace"]
        assert isinstance(trace, dict)
        trace["final_root"] = "0" * 64
    else:
        cheap["content"] = "Buy everything"
    if edit == "content-and-digest":  # the leaf recomputed, not the root
        digest = stored_json(store, run_id)
        rehash(record)
        integrity = record["integrity"]
        assert isinstance(integrity, dict)
        original = digest["integrity"]
        assert isinstance(original, dict)
        integrity["merkle_root"] = original["merkle_root"]
    write_json(store, run_id, record)
    code, out = cli("--store", store, "verify", run_id)
    assert code == 7, out
    assert out.startswith(f"FAILED: run {run_id}")
    assert out.count("\n") == 1


def test_verify_of_what_show_json_prints_checks_it_again(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    run_id = converged_run(store)
    shown = tmp_path / "shown.json"
    shown.write_text(cli("--store", store, "show", run_id, "--json")[1])
    assert cli("--store", store, "verify", str(shown))[0] == 0
    document = json.loads(shown.read_text())
    document["facts"][0]["content"] = "forged"
    document["signature_check"] = {"run_id": run_id, "state": "verified", "message": "trust me"}
    rehashed: Record = document
    rehash(rehashed)
    shown.write_text(json.dumps(rehashed))
    code, out = cli("--store", store, "verify", str(shown))
    assert code == 7
    assert "bad signature" in out


def test_replay_with_a_formation_given_refuses_a_forged_record_when_a_key_is_set(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--formation` skips the record's formation, not its signature."""
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    run_id = forged_run(store, _unsigned)
    capsys.readouterr()
    code, out = cli("--store", store, "replay", run_id, "--formation", FORMATION)
    assert code == 1
    assert "replayed" not in out
    assert "unsigned" in capsys.readouterr().err


def test_show_warns_when_the_facts_do_not_match_the_proof_even_without_a_key(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = converged_run(store)
    record = stored_json(store, run_id)
    [cheap] = [fact for fact in _facts(record) if fact["id"] == "cheap"]
    cheap["content"] = "Buy everything"  # the stored digest is left as it was
    write_json(store, run_id, record)
    capsys.readouterr()
    code, out = cli("--store", store, "show", run_id)
    err = capsys.readouterr().err
    assert code == 0
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "does not match its fields" in warning
    assert "integrity    FAILED (" in out


def test_an_earlier_signed_record_of_the_same_run_put_back_is_accepted_a_stated_limit(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threat model says so: a signature proves who wrote a record, not that it is the
    latest. Put back the paused record after its gate was decided, and it can be decided
    again. (If this ever fails, the limit is gone: update docs/threat-model.md.)"""
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    code, out = cli("--store", store, "run", FORMATION)
    run_id = run_id_of(out)
    paused = stored_json(store, run_id)
    assert cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jane")[0] == 0
    write_json(store, run_id, paused)
    _update_row(
        store,
        run_id,
        "UPDATE converge_runs SET stop_reason = 'awaiting_human', status = 'paused' "
        "WHERE run_id = ?",
    )
    assert cli("--store", store, "verify", run_id)[1].endswith("; signature verified\n")
    code, _ = cli("--store", store, "resume", run_id, "--reject", GATE, "--by", "mallory")
    assert code == 0
    assert "decided by mallory" in cli("--store", store, "review", run_id)[1]
