"""The `converge` command: run, review, resume from another process, verify, replay, errors."""

import inspect
import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from converge._cli import _main
from converge._cli._parser import parser
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"


async def converge_process(*args: str) -> tuple[int, str, str]:
    process = await anyio.run_process([sys.executable, "-m", "converge.cli", *args], check=False)
    return process.returncode, process.stdout.decode(), process.stderr.decode()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


@pytest.mark.slow
def test_run_pauses_then_review_and_resume_in_new_processes_converge(store: str) -> None:
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 6
    assert "cycle   2:" in out
    assert f"pending      1 gate(s) awaiting a human:\n  {GATE}: Buy the enterprise plan" in out
    run_id = run_id_of(out)

    async def other_processes() -> None:
        code, out, _ = await converge_process("--store", store, "review", run_id)
        assert code == 6
        assert f"gate {GATE}" in out
        assert "proposal   strategies/costly: Buy the enterprise plan" in out
        code, out, err = await converge_process(
            "--store", store, "resume", run_id, "--approve", GATE, "--by", "jane"
        )
        assert code == 0
        # without a signing key the CLI says which formation the unauthenticated record names
        assert err.startswith(f"note: importing formation {str(FORMATION)!r} named by the stored")
        assert "stop reason  converged" in out
        for command in ("verify", "replay"):
            code, out, _ = await converge_process("--store", store, command, run_id)
            assert code == 0, out

    anyio.run(other_processes)
    code, out = cli("--store", store, "show", run_id)
    assert code == 0
    assert "by recommender, confidence 0.4, cycle 2, gate human, approved by jane" in out


def test_resume_with_a_rejection_leaves_the_diagnostic(store: str) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    code, _ = cli(
        "--store", store, "resume", run_id, "--reject", GATE, "--by", "bo", "--reason", "too much"
    )
    assert code == 0
    _, out = cli("--store", store, "show", run_id)
    assert "hitl-rejected:costly: HITL gate rejected proposal 'costly' by bo: too much" in out


def test_json_output_is_the_run_record(store: str) -> None:
    code, out = cli("--store", store, "run", FORMATION, "--json")
    assert code == 6
    record = json.loads(out)
    assert record["stop_reason"] == "awaiting_human"
    assert record["name"] == "plan-review"
    assert record["pending"][0]["gate_id"] == GATE


def test_budget_stop_has_its_own_exit_code(store: str) -> None:
    code, out = cli("--store", store, "run", FORMATION, "--max-cycles", "1")
    assert code == 3
    assert "stop reason  cycle_budget_exhausted (max_cycles (1))" in out


def test_runs_lists_the_stored_runs(store: str) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    code, out = cli("--store", store, "runs")
    assert code == 0
    assert out.startswith(run_id)
    assert "awaiting_human" in out
    assert "plan-review" in out


def test_verify_detects_a_tampered_record_file(store: str, tmp_path: Path) -> None:
    code, out = cli("--store", store, "run", FORMATION, "--json")
    record = json.loads(out)
    good = tmp_path / "good.json"
    good.write_text(out, encoding="utf-8")
    assert cli("verify", str(good))[0] == 0
    record["facts"][0]["content"] = "forged"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record), encoding="utf-8")
    code, out = cli("verify", str(bad))
    assert code == 7
    assert out.startswith("FAILED:")


async def test_errors_are_one_line_and_a_hint_without_traceback(store: str) -> None:
    code, out, err = await converge_process("--store", store, "run", "no_such_module_xyz")
    assert code == 1
    assert out == ""
    assert err.splitlines()[0].startswith("error: cannot import 'no_such_module_xyz'")
    assert err.splitlines()[1].startswith("hint:")
    assert "Traceback" not in err
    code, _, err = await converge_process("--store", store, "show", "missing")
    assert code == 1
    assert err.splitlines() == [
        f"error: no run 'missing' in {store}",
        "hint: `converge runs` lists the stored runs",
    ]


def test_a_file_without_a_formation_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n", encoding="utf-8")
    code, _ = cli("--store", str(tmp_path / "r.db"), "run", str(empty))
    assert code == 1


def test_review_of_a_converged_run_says_so(store: str) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jane")
    code, out = cli("--store", store, "review", run_id)
    assert code == 0
    assert "is not waiting for anyone (converged)" in out


def test_store_and_debug_options_work_after_the_command(store: str) -> None:
    code, out = cli("run", FORMATION, "--store", store, "--debug")
    assert code == 6
    run_id = run_id_of(out)
    code, out = cli("runs", "--store", store)
    assert code == 0
    assert out.startswith(run_id)


def test_the_printed_next_commands_name_a_store_that_is_not_the_default(
    store: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import shlex

    monkeypatch.delenv("CONVERGE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)  # the default store would be tmp_path/.converge/runs.db
    code, out = cli("run", FORMATION, "--store", store)
    assert code == 6
    review = next(line for line in out.splitlines() if line.startswith("next "))
    resume = out.splitlines()[out.splitlines().index(review) + 1]
    assert review.endswith(f"--store {shlex.quote(store)}")
    code, said = cli(*shlex.split(review.removeprefix("next").strip())[1:])
    assert code == 6
    decide = next(line for line in said.splitlines() if line.startswith("decide with:"))
    assert decide.endswith(f"--store {shlex.quote(store)}")
    command = shlex.split(resume.strip().replace("NAME", "jane"))[1:]
    assert cli(*command)[0] == 0
    assert not (tmp_path / ".converge" / "runs.db").exists()


@pytest.mark.parametrize(
    ("given", "printed"),
    [
        (None, ""),
        (".converge/runs.db", ""),
        ("my runs.db", " --store 'my runs.db'"),
        ("postgresql://ana:s3cret@db:5432/runs", " --store postgresql://ana@db:5432/runs"),
        (
            "postgresql://db/runs?password=s3cret&sslmode=require",
            " --store 'postgresql://db/runs?sslmode=require'",
        ),
    ],
)
def test_store_argument_names_the_store_without_its_password(
    given: str | None, printed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from converge._cli._store import store_argument

    monkeypatch.delenv("CONVERGE_STORE", raising=False)
    assert store_argument(given) == printed


def test_every_command_of_the_parser_has_its_function_imported_when_it_runs() -> None:
    # The commands of other modules are imported only when they run (`_main._command`).
    commands = parser(_main.DEFAULT_DEMO, _main.DEMO_PACKAGE)
    names: set[str] = set()
    for action in commands._actions:
        if action.dest == "command":  # the commands' parsers, by name
            names |= {str(name) for name in action.choices or ()}
    assert names == set(_main._COMMANDS)  # pyright: ignore[reportPrivateUsage]
    for name in sorted(names):
        assert inspect.iscoroutinefunction(_main._command(name)), name  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize("command", ["runs", "review"])
def test_a_read_command_imports_no_other_command_engine_formation_or_report(
    tmp_path: Path, command: str
) -> None:
    code = (
        "import sys; from converge._cli._main import main; "
        "main([sys.argv[2], '--store', sys.argv[1]]); "
        "print(sorted(m for m in sys.modules if m.startswith('converge')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "runs.db"), command],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = done.stdout.strip().splitlines()[-1]
    assert f"'converge._cli._{command}'" in loaded
    assert "'converge.stores.sqlite'" in loaded
    for other in ("_run", "_show", "_verify", "_export", "_retain", "_ui", "_fork", "_batch"):
        assert f"'converge._cli.{other}'" not in loaded, other
    for heavy in ("_engine", "_formation", "_launch", "_kernel._run", "_report", "dask"):
        assert f"'converge.{heavy}'" not in loaded, heavy
