"""Attacks on what a reviewer sees and on which checkpoint a resume applies.

Each test edits the store the way someone with write access to it would, then checks that
`review`, `report`, `resume` and `replay` refuse, or show exactly what resume applies.
"""

import sys
from pathlib import Path

import anyio
import pytest

from converge import (
    Engine,
    GateDecision,
    InvalidResumeError,
    RunRecord,
    SqliteRunStore,
    StaleRecordError,
    StopReason,
)
from converge._review import STALE
from tests.cli_runs import cli, run_id_of
from tests.converge.forgery import stored_json, write_json
from tests.converge.hitl_formation import SIGNING_KEY, build_engine
from tests.doubles import seed

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"


def paused_run(store: str) -> str:
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 6
    return run_id_of(out)


def forge_pending(record: dict[str, object], *, also_checkpoint: bool) -> None:
    """Make the gate read "Buy the small plan", spend 500 (the checkpoint still says 250,000)."""
    places: list[object] = [record["pending"]]
    if also_checkpoint:
        checkpoint = record["checkpoint"]
        assert isinstance(checkpoint, dict)
        places.append(checkpoint["pending"])  # pyright: ignore[reportUnknownArgumentType]
    for pending in places:
        assert isinstance(pending, list)
        gate = pending[0]  # pyright: ignore[reportUnknownVariableType]
        gate["summary"] = "Buy the small plan"
        gate["proposal"]["content"] = "Buy the small plan"
        gate["proposal"]["payload"] = {"spend": 500}


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def test_a_pending_proposal_edited_in_the_record_only_is_refused_everywhere(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = paused_run(store)
    record = stored_json(store, run_id)
    forge_pending(record, also_checkpoint=False)
    write_json(store, run_id, record)
    for command in ("review", "report", "show", "resume"):
        extra = ("--approve", GATE, "--by", "ceo") if command == "resume" else ()
        code, out = cli("--store", store, command, run_id, *extra)
        assert code == 1, (command, out)
        assert "small plan" not in out
        assert "pending gates differ from its checkpoint" in capsys.readouterr().err


def test_with_a_key_a_consistently_forged_record_is_refused(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    run_id = paused_run(store)
    record = stored_json(store, run_id)
    forge_pending(record, also_checkpoint=True)
    write_json(store, run_id, record)
    for command in ("review", "report", "resume"):
        extra = ("--approve", GATE, "--by", "ceo") if command == "resume" else ()
        code, out = cli("--store", store, command, run_id, *extra)
        assert code == 1, (command, out)
        assert "small plan" not in out
        assert "bad signature" in capsys.readouterr().err


def test_without_a_key_review_shows_exactly_what_resume_applies(store: str) -> None:
    run_id = paused_run(store)
    record = stored_json(store, run_id)
    forge_pending(record, also_checkpoint=True)
    write_json(store, run_id, record)
    code, out = cli("--store", store, "review", run_id)
    assert code == 6
    assert "Buy the small plan" in out
    assert "{'spend': 500}" in out
    # The checkpoint's own facts are unchanged, so resume runs; it applies what was shown.
    code, _ = cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jo")
    loaded = anyio.run(SqliteRunStore(store).load, run_id)
    approved = next(f for f in loaded.facts if f.id == "costly")
    assert (code, approved.content, approved.payload) == (0, "Buy the small plan", {"spend": 500})


def test_a_checkpoint_pasted_into_another_runs_row_is_refused(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = paused_run(store), paused_run(store)
    pasted = stored_json(store, second)
    pasted["checkpoint"] = stored_json(store, first)["checkpoint"]
    pasted["pending"] = stored_json(store, first)["pending"]
    write_json(store, second, pasted)
    code, out = cli("--store", store, "resume", second, "--approve", GATE, "--by", "ceo")
    assert code == 1
    assert f"saved run {first}" not in out
    assert f"its checkpoint belongs to run {first}" in capsys.readouterr().err
    whole = stored_json(store, first)
    write_json(store, second, whole)
    code, _ = cli("--store", store, "resume", second, "--approve", GATE, "--by", "ceo")
    assert code == 1
    assert f"the row of run {second} holds the record of run {first}" in capsys.readouterr().err


def test_an_old_checkpoint_written_back_into_a_decided_run_is_refused(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = paused_run(store)
    old = stored_json(store, run_id)
    assert cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jane")[0] == 0
    decided = stored_json(store, run_id)
    decided["checkpoint"], decided["pending"] = old["checkpoint"], old["pending"]
    write_json(store, run_id, decided)
    code, _ = cli("--store", store, "resume", run_id, "--reject", GATE, "--by", "mallory")
    assert code == STALE
    assert "already resumed (now converged) (decided by jane" in capsys.readouterr().err


def test_two_resumes_of_one_paused_run_one_wins_the_other_names_the_winner(store: str) -> None:
    run_id = paused_run(store)

    async def both() -> list[tuple[int, str, str]]:
        results: list[tuple[int, str, str]] = []

        async def resume(by: str) -> None:
            command = [sys.executable, "-m", "converge.cli", "--store", store, "resume", run_id]
            process = await anyio.run_process(
                [*command, "--approve", GATE, "--by", by], check=False
            )
            results.append((process.returncode, by, process.stderr.decode()))

        async with anyio.create_task_group() as group:
            group.start_soon(resume, "ann")
            group.start_soon(resume, "bob")
        return results

    results = sorted(anyio.run(both))
    codes = [code for code, _, _ in results]
    assert sorted(codes) in ([0, 8], [0, 1])  # the loser lost the save race (8) or came later (1)
    [(_, winner, _)] = [r for r in results if r[0] == 0]
    [(_, _, loser_err)] = [r for r in results if r[0] != 0]
    assert f"decided by {winner}: approved {GATE}" in loser_err
    loaded = anyio.run(SqliteRunStore(store).load, run_id)
    assert [d.by for d in loaded.trace.decisions] == [winner]


def test_an_engine_with_a_store_uses_a_checkpoint_once(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.db")
    engine = build_engine(store=store)

    async def scenario() -> None:
        paused = await engine.run(inputs=[seed("goal")])
        assert paused.checkpoint is not None
        approve = [GateDecision.approve(paused.pending[0].gate_id, by="ann")]
        assert (await engine.resume(paused.checkpoint, approve)).converged
        decided = await store.load(paused.run_id)
        with pytest.raises(InvalidResumeError, match="decided by ann"):
            await engine.resume(paused.checkpoint, approve)
        stored = await store.load(paused.run_id)
        assert stored.stop_reason is StopReason.CONVERGED
        assert stored.version == decided.version
        with pytest.raises(InvalidResumeError, match="is of run"):
            await engine.resume(paused.checkpoint, approve, run_id="someone-else")

    anyio.run(scenario)


def test_two_concurrent_engine_resumes_one_saves_the_other_is_stale(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.db")

    async def scenario() -> None:
        paused = await build_engine(store=store).run(inputs=[seed("goal")])
        assert paused.checkpoint is not None
        gate = paused.pending[0].gate_id
        outcomes: list[str] = []

        async def resume(by: str) -> None:
            try:
                await build_engine(store=store).resume(
                    paused.checkpoint,  # pyright: ignore[reportArgumentType]
                    [GateDecision.approve(gate, by=by)],
                )
                outcomes.append(f"saved:{by}")
            except (StaleRecordError, InvalidResumeError) as error:
                outcomes.append(type(error).__name__)

        async with anyio.create_task_group() as group:
            group.start_soon(resume, "ann")
            group.start_soon(resume, "bob")
        [saved] = [o.removeprefix("saved:") for o in outcomes if o.startswith("saved:")]
        assert len(outcomes) == 2
        record = await store.load(paused.run_id)
        assert [d.by for d in record.trace.decisions] == [saved]

    anyio.run(scenario)


def test_a_record_naming_a_hostile_formation_is_not_imported_with_a_key(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    hostile = tmp_path / "hostile.py"
    hostile.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", SIGNING_KEY)
    run_id = paused_run(store)
    record = stored_json(store, run_id)
    record["formation"] = str(hostile)
    write_json(store, run_id, record)
    for command in ("replay", "resume"):
        extra = ("--approve", GATE, "--by", "ceo") if command == "resume" else ()
        code, _ = cli("--store", store, command, run_id, *extra)
        assert code == 1
        assert "bad signature" in capsys.readouterr().err
    assert not marker.exists()


def test_without_a_key_the_cli_says_which_module_it_imports_or_takes_yours(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    hostile = tmp_path / "hostile.py"
    hostile.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    run_id = paused_run(store)
    record = stored_json(store, run_id)
    record["formation"] = str(hostile)
    write_json(store, run_id, record)
    code, _ = cli("--store", store, "replay", run_id, "--formation", FORMATION)
    assert code == 0  # replayed with the formation named on the command line
    assert "note:" not in capsys.readouterr().err
    assert not marker.exists()
    cli("--store", store, "replay", run_id)
    assert f"note: importing formation {str(hostile)!r}" in capsys.readouterr().err


def test_records_saved_by_an_engine_with_a_key_are_signed(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.db")
    result = anyio.run(lambda: Engine(store=store, signing_key="k").run(inputs=[seed("a")]))
    record = anyio.run(store.load, result.run_id)
    record.verify_signature(b"k")
    forged = RunRecord.model_validate(record.model_dump() | {"detail": "forged"})
    with pytest.raises(Exception, match="bad signature"):
        forged.verify_signature(b"k")
    with pytest.raises(Exception, match="bad signature"):
        record.model_copy(update={"signature": "é" * 64}).verify_signature(b"k")
