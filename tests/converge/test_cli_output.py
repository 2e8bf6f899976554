"""What the `converge` command prints: `--json` on every command, a reader that goes away,
each command's `--help`, and numeric options that are usage errors when out of range."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from converge.cli import main
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"
DOCS = HERE.parent.parent / "docs" / "cli.md"
COMMANDS = ("run", "demo", "resume", "runs", "show", "review", "verify", "replay", "report")

# A run that pauses twice: once on its plan, and, after that is approved, on its check.
TWICE = """
from converge import Context, ContextKey, Formation, HitlPolicy, ProposedFact, suggestor
from converge_suggestors import SeedSuggestor

S, E = ContextKey.STRATEGIES, ContextKey.EVALUATIONS


@suggestor(name="plan", dependencies=[ContextKey.SEEDS], writes=[S])
async def plan(ctx: Context) -> list[ProposedFact]:
    return [ProposedFact(key=S, id="plan", content="Buy.", provenance="plan", confidence=0.4)]


@suggestor(name="check", dependencies=[S], writes=[E])
async def check(ctx: Context) -> list[ProposedFact]:
    return [ProposedFact(key=E, id="check", content="Sure?", provenance="check", confidence=0.4)]


formation = Formation(
    name="twice",
    suggestors=(SeedSuggestor("start", "Go."), plan, check),
    hitl=HitlPolicy(confidence_below=0.5),
)
"""

# Output far larger than a pipe holds (64 KiB): after `head -2` has gone, something is left.
LONG = 200_000
BIG = f"""
from converge import Context, ContextKey, Formation, HitlPolicy, ProposedFact, suggestor
from converge_suggestors import SeedSuggestor

LONG = "x" * {LONG}


@suggestor(name="big", dependencies=[ContextKey.SEEDS], writes=[ContextKey.STRATEGIES])
async def big(ctx: Context) -> list[ProposedFact]:
    return [
        ProposedFact(
            key=ContextKey.STRATEGIES, id="big", content=LONG, provenance="big",
            confidence=0.4, payload={{"text": LONG}},
        )
    ]


formation = Formation(
    name="big-" + LONG,
    suggestors=(SeedSuggestor("start", LONG), big),
    hitl=HitlPolicy(confidence_below=0.5),
)
"""


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


@pytest.fixture
def paused(store: str) -> str:
    """The id of a run of the CLI formation, paused on `GATE`."""
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 6
    return run_id_of(out)


def json_of(*args: str) -> tuple[int, Any]:
    """The exit status and the parsed JSON of `converge ARGS --json`."""
    code, out = cli(*args, "--json")
    return code, json.loads(out)


# --- --json ------------------------------------------------------------------------------------


def test_runs_json_is_the_list_of_run_summaries(store: str, paused: str) -> None:
    code, runs = json_of("--store", store, "runs")
    assert code == 0
    assert [run["run_id"] for run in runs] == [paused]
    assert runs[0]["status"] == "paused"
    assert runs[0]["stop_reason"] == "awaiting_human"
    assert runs[0]["name"] == "plan-review"
    assert set(runs[0]) == {
        "run_id",
        "status",
        "stop_reason",
        "detail",
        "cycles",
        "fact_count",
        "merkle_root",
        "saved_at",
        "name",
        "signature_check",
        "failures",
        "pending",
        "parent_run_id",
        "fork_cycle",
        "forks_listed",
    }
    assert runs[0]["parent_run_id"] is None
    assert runs[0]["signature_check"]["state"] == "unchecked"
    assert runs[0]["failures"] == 0
    assert runs[0]["pending"] == 1


def test_runs_json_of_an_empty_store_is_an_empty_list(store: str) -> None:
    assert json_of("--store", store, "runs") == (0, [])


def test_show_json_is_the_record_run_json_prints(store: str) -> None:
    code, out = cli("--store", store, "run", FORMATION, "--json")
    run_id = json.loads(out)["run_id"]
    shown_code, shown = cli("--store", store, "show", run_id, "--json")
    assert (code, shown_code) == (6, 0)
    document = json.loads(shown)
    assert document.pop("signature_check")["state"] == "unchecked"
    assert document == json.loads(out)
    assert shown.startswith(out.rstrip().removesuffix("}").rstrip())  # the record, as printed


def test_review_json_lists_the_pending_gates_with_status_6(store: str, paused: str) -> None:
    code, review = json_of("--store", store, "review", paused)
    assert code == 6
    assert review["run_id"] == paused
    assert review["outcome"] == "awaiting_human"
    [gate] = review["pending"]
    assert gate["gate_id"] == GATE
    assert gate["proposal"]["payload"] == {"spend": 250_000}
    assert review["decisions"] == []
    assert review["commands"] == [
        f"converge resume {paused} --approve {GATE} --by NAME --store {store}"
    ]


def test_review_json_of_a_decided_run_has_no_gates_and_status_0(store: str, paused: str) -> None:
    cli("--store", store, "resume", paused, "--approve", GATE, "--by", "jane")
    code, review = json_of("--store", store, "review", paused)
    assert code == 0
    assert review["outcome"] == "converged"
    assert review["pending"] == []
    assert review["commands"] == []
    assert review["decisions"] == [
        {"gate_id": GATE, "approved": True, "by": "jane", "reason": None}
    ]


def test_verify_json_says_verified(store: str, paused: str) -> None:
    code, verified = json_of("--store", store, "verify", paused)
    assert code == 0
    assert verified.pop("merkle_root")
    assert verified.pop("signature_check")["state"] == "unchecked"
    assert verified == {"verified": True, "run_id": paused, "clock": 2, "fact_count": 2}


def test_verify_json_of_a_tampered_record_fails_with_status_7(store: str, tmp_path: Path) -> None:
    record = json.loads(cli("--store", store, "run", FORMATION, "--json")[1])
    record["facts"][0]["content"] = "forged"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record), encoding="utf-8")
    code, verified = json_of("verify", str(bad))
    assert code == 7
    assert verified["verified"] is False
    assert verified["run_id"] == record["run_id"]
    assert "does not match its fields" in verified["error"]


def test_replay_json_says_replayed(store: str, paused: str) -> None:
    code, replayed = json_of("--store", store, "replay", paused)
    assert code == 0
    assert replayed["replayed"] is True
    assert replayed["cycles"] == 2
    assert replayed["merkle_root"] == replayed["replay_merkle_root"]
    assert "error" not in replayed


def test_replay_json_with_another_formation_fails_with_status_7(
    store: str, paused: str, tmp_path: Path
) -> None:
    other = tmp_path / "other.py"
    other.write_text(
        "from converge import Formation\nfrom converge_suggestors import SeedSuggestor\n"
        'formation = Formation(name="other", suggestors=(SeedSuggestor("budget", "x"),))\n',
        encoding="utf-8",
    )
    code, replayed = json_of("--store", store, "replay", paused, "--formation", str(other))
    assert code == 7
    assert replayed["replayed"] is False
    assert replayed["replay_merkle_root"] is None
    assert "recommender" in replayed["error"]


def test_report_json_names_the_file_written(store: str, paused: str, tmp_path: Path) -> None:
    target = tmp_path / "out" / "r.html"
    code, report = json_of("--store", store, "report", paused, "-o", str(target))
    assert code == 0
    assert report == {"report": str(target)}
    assert target.is_file()


def test_a_json_command_that_fails_writes_its_error_to_stderr_only(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli("--store", store, "show", "missing", "--json")
    assert (code, out) == (1, "")
    assert capsys.readouterr().err.splitlines()[0] == f"error: no run 'missing' in {store}"


# --- a reader that goes away ---------------------------------------------------------------------


def converge_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "converge.cli", *args]


def environment(*, buffered: bool) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A store of three runs whose output is far larger than a pipe holds; one's id."""
    folder = tmp_path_factory.mktemp("big")
    formation = folder / "big.py"
    formation.write_text(BIG, encoding="utf-8")
    store = str(folder / "runs.db")
    run_ids = [run_id_of(cli("--store", store, "run", str(formation))[1]) for _ in range(3)]
    return store, run_ids[0]


def errors(stderr: str) -> list[str]:
    """The lines of `stderr` but the one `note:` a read command writes without a signing key
    (its records are not authenticated)."""
    return [line for line in stderr.splitlines() if not line.startswith("note: ")]


def pipe_cases(store: str, run_id: str, formation: str) -> dict[str, tuple[str, ...]]:
    return {
        "show": ("--store", store, "show", run_id),
        "runs": ("--store", store, "runs"),
        "review": ("--store", store, "review", run_id),
        "run --json": ("--store", store, "run", formation, "--json"),
        "run": ("--store", store, "run", formation),
    }


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("case", ["show", "runs", "review", "export"])
def test_a_read_command_that_leaves_early_writes_all_of_its_output(
    big_store: tuple[str, str], case: str, buffered: bool
) -> None:
    """A read command ends its process without the interpreter's finalisation (`_leave`):
    through a pipe, its output is whole, its status and its notes as `main` gives them."""
    store, run_id = big_store
    args = {"export": ("--store", store, "export", run_id, "--format", "jsonl")}.get(
        case, pipe_cases(store, run_id, FORMATION).get(case, ())
    )
    expected_status, expected = cli(*args)
    process = subprocess.run(
        converge_command(*args),
        capture_output=True,
        text=True,
        check=False,
        env=environment(buffered=buffered),
    )
    assert process.returncode == expected_status
    assert len(process.stdout) > 65536  # more than a pipe holds
    program = f"{sys.executable} -m converge.cli "  # how the commands it prints call it
    assert process.stdout.replace(program, "converge ") == expected
    assert errors(process.stderr) == []


@pytest.mark.slow
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("case", ["show", "runs", "review", "run --json", "run"])
def test_head_2_of_a_long_output_exits_141_quietly(
    big_store: tuple[str, str], case: str, buffered: bool, tmp_path: Path
) -> None:
    formation = tmp_path / "big.py"
    formation.write_text(BIG, encoding="utf-8")
    args = pipe_cases(*big_store, str(formation))[case]
    command = shlex.join(converge_command(*args))
    script = f'set -o pipefail; {command} | head -2 > /dev/null; echo "${{PIPESTATUS[0]}}"'
    process = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env=environment(buffered=buffered),
    )
    assert errors(process.stderr) == []
    assert process.stdout == "141\n"


@pytest.mark.slow
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("case", ["show", "runs", "review", "run --json", "run"])
def test_a_reader_gone_before_anything_is_written_gives_141_quietly(
    store: str, paused: str, case: str, buffered: bool
) -> None:
    """Short output stays in the buffer until the end: it must not fail at interpreter exit."""
    args = pipe_cases(store, paused, FORMATION)[case]
    reading, writing = os.pipe()
    os.close(reading)
    try:
        process = subprocess.run(
            converge_command(*args),
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            env=environment(buffered=buffered),
        )
    finally:
        os.close(writing)
    assert errors(process.stderr) == []
    assert process.returncode == 141


# --- --help --------------------------------------------------------------------------------------


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as leaving:
        main([*args, "--help"])
    assert leaving.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [*COMMANDS, "batch", "ui"])
def test_every_command_help_has_a_description_the_global_options_and_exit_statuses(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = help_of(capsys, command)
    usage, description = shown.split("\n\n")[:2]
    assert usage.startswith(f"usage: converge {command} ")
    assert "[--store STORE] [--debug]" in " ".join(usage.split())
    assert not description.startswith(("positional arguments", "options"))
    assert "--store STORE  " in shown or "--store STORE\n" in shown
    statuses = shown.split("exit status:\n")[1]
    codes = [int(line.split()[0]) for line in statuses.splitlines() if line.startswith("  ")]
    assert {1, 2, 130, 141} <= set(codes)


@pytest.mark.parametrize(
    ("command", "codes"),
    [
        ("run", {0, 3, 4, 5, 6, 8, 9}),  # 8: the run was taken over while it ran
        ("resume", {0, 3, 4, 5, 6, 8, 9}),
        ("runs", {0}),
        ("review", {0, 6}),
        ("verify", {0, 7}),
        ("replay", {0, 7}),
        ("batch", {0, 9, 10}),
    ],
)
def test_command_help_lists_the_statuses_the_command_returns(
    command: str, codes: set[int], capsys: pytest.CaptureFixture[str]
) -> None:
    statuses = help_of(capsys, command).split("exit status:\n")[1]
    listed = {int(line.split()[0]) for line in statuses.splitlines() if line.startswith("  ")}
    assert listed == codes | {1, 2, 130, 141}


def test_demo_help_lists_the_demos(capsys: pytest.CaptureFixture[str]) -> None:
    from converge_suggestors.demos import DEMOS

    shown = " ".join(help_of(capsys, "demo").split())
    assert f"demos: {', '.join(DEMOS)}" in shown


def test_demo_help_says_when_the_demos_are_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "converge_suggestors.demos", None)
    shown = " ".join(help_of(capsys, "demo").split())
    assert "the demos package converge_suggestors.demos is not installed" in shown


# --- numeric options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("run", FORMATION, "--max-cycles", "0"), "--max-cycles"),
        (("run", FORMATION, "--max-cycles", "-3"), "--max-cycles"),
        (("demo", "--max-cycles", "x"), "--max-cycles"),
        (("run", FORMATION, "--lease", "0"), "--lease"),
        (("resume", "r", "--lease", "nan"), "--lease"),
        (("runs", "--limit", "0"), "--limit"),
        (("batch", FORMATION, "in.jsonl", "--workers", "0"), "--workers"),
        (("batch", FORMATION, "in.jsonl", "--runs-per-worker", "-1"), "--runs-per-worker"),
        (("batch", FORMATION, "in.jsonl", "--lease", "-1"), "--lease"),
        (("ui", "--port", "65536"), "--port"),
        (("ui", "--port", "-1"), "--port"),
        (("ui", "--poll", "0"), "--poll"),
        (("ui", "--poll", "inf"), "--poll"),
    ],
)
def test_an_out_of_range_number_is_a_usage_error(
    args: tuple[str, ...], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(list(args))
    assert leaving.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"converge {args[0]}: error: argument {option}: must ")
    assert err[1] == f"hint: `converge {args[0]} --help` shows the usage"


# --- the printed next commands -------------------------------------------------------------


def test_demo_prints_next_commands_with_a_store_that_is_not_the_default(
    store: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CONVERGE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out = cli("demo", "vendor_selection", "--store", store)
    assert code == 6
    lines = out.splitlines()
    review = next(index for index, line in enumerate(lines) if line.startswith("next "))
    assert lines[review].endswith(f"--store {store}")
    assert lines[review + 1].endswith(f"--store {store}")


def test_resume_that_pauses_again_prints_next_commands_with_the_store(
    store: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CONVERGE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    twice = tmp_path / "twice.py"
    twice.write_text(TWICE, encoding="utf-8")
    run_id = run_id_of(cli("run", str(twice), "--store", store)[1])
    code, out = cli(
        "resume", run_id, "--approve", "gate:2:strategies/plan", "--by", "jo", "--store", store
    )
    assert code == 6
    lines = out.splitlines()
    review = next(index for index, line in enumerate(lines) if line.startswith("next "))
    assert lines[review] == f"next         converge review {run_id} --store {store}"
    assert lines[review + 1].endswith(f"--by NAME --store {store}")
    assert "--approve gate:3:evaluations/check " in lines[review + 1]


# --- the page ------------------------------------------------------------------------------------

RUNS_LINE = re.compile(
    r"[0-9a-f]{32}  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00  "
    r"(running|paused|finished|interrupted) +[a-z_-]+ +\d+ cycles +\d+ facts  \S+"
    r"(  \d+ gates? waiting)?"
)


def test_runs_lines_on_the_cli_page_look_as_runs_prints_them(store: str, paused: str) -> None:
    printed = cli("--store", store, "runs")[1].splitlines()
    assert [RUNS_LINE.fullmatch(line) is not None for line in printed] == [True]
    page = DOCS.read_text(encoding="utf-8").splitlines()
    shown = [page[index + 1] for index, line in enumerate(page) if line == "$ converge runs"]
    assert shown
    for line in shown:
        assert RUNS_LINE.fullmatch(line), line
        assert len(line.split("  ")[0]) == len(printed[0].split("  ")[0])
