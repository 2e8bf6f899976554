"""The `converge` command says what happened, on one line, and says it right.

A human's rejection is counted and labelled a rejection; a rejection shows its reason; a
missing `--by`, a count too large for a store, a store that is a directory and a name with
control or bidirectional characters are each one line; the commands printed for next time
run as printed, however the command was started.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from converge._cli._output import program
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"

MISFIT = """
from pydantic import BaseModel

from converge import AgentEffect, Context, ContextKey, Formation, Key, ProposedFact
from converge_suggestors import SeedSuggestor


class Price(BaseModel, frozen=True):
    amount: int


PRICES = Key("test.cli-prices", payload=Price)


class Pricer:
    name = "pricer"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle == 1

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(
                key=PRICES, id="p", content="a price", provenance="pricer",
                payload={"amount": "lots"},
            )
        )


formation = Formation(name="misfit", suggestors=(SeedSuggestor("s", "go"), Pricer()))
"""


def converge(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "converge.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def test_summary_show_and_report_count_and_label_a_human_rejection(
    store: str, tmp_path: Path
) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    code, out = cli(
        "--store", store, "resume", run_id, "--reject", GATE, "--by", "ana", "--reason", "too dear"
    )
    assert code == 0
    lines = out.splitlines()
    at = lines.index("rejections   1")
    assert lines[at + 1] == f"  {GATE} rejected by ana: too dear"
    code, shown = cli("--store", store, "show", run_id)
    assert code == 0
    assert "rejections   1\n" in shown
    assert "    by human:ana, confidence 1.0, cycle 2, gate human, rejected by ana\n" in shown
    assert "approved by ana" not in shown
    report = (tmp_path / "reports" / f"{run_id}.html").read_text(encoding="utf-8")
    assert "rejected by <b>ana</b>" in report
    assert "approved by <b>ana</b>" not in report


def test_summary_shows_each_rejection_with_its_reason_and_the_invalid_ones(
    store: str, tmp_path: Path
) -> None:
    path = tmp_path / "misfit.py"
    path.write_text(MISFIT, encoding="utf-8")
    code, out = cli("--store", store, "run", str(path))
    assert code == 9
    lines = out.splitlines()
    at = lines.index("rejections   1")
    reason = "payload does not fit Price, the model of key test.cli-prices: amount: Input should"
    assert lines[at + 1].startswith(f"  test.cli-prices/p from pricer (cycle 2): {reason}")
    at = lines.index("invalid      1 proposal(s) were broken, not refused by a policy:")
    assert lines[at + 1].startswith(f"  test.cli-prices/p from pricer (cycle 2): {reason}")
    assert "converged, but with failures: exit status 9 (--allow-failures exits 0)" in out
    assert cli("--store", store, "run", str(path), "--allow-failures")[0] == 0


def one_error_line(done: subprocess.CompletedProcess[str], status: int) -> str:
    """The error line of a command that failed with `status`, checked to be alone but for a
    hint, without a traceback."""
    assert done.returncode == status, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) in (1, 2), done.stderr
    assert lines[1:] == [] or lines[1].startswith("hint: ")
    assert "Traceback" not in done.stderr
    assert "ValidationError" not in done.stderr
    return lines[0]


def test_resume_with_decisions_and_no_by_is_a_usage_error(store: str) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    line = one_error_line(converge("--store", store, "resume", run_id, "--approve", GATE), 2)
    assert line == (
        "converge: error: resume: --by is required with --approve or --reject (who decides)"
    )


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("runs", "--limit", str(10**20)), "--limit"),
        (("run", FORMATION, "--max-cycles", str(10**20)), "--max-cycles"),
    ],
)
def test_a_count_too_large_is_a_usage_error(store: str, args: tuple[str, ...], option: str) -> None:
    line = one_error_line(converge("--store", store, *args), 2)
    assert line.endswith(f"error: argument {option}: must be at most 1_000_000_000, got {10**20}")


def test_a_store_that_is_a_directory_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    for args in (("runs",), ("show", "some-run"), ("run", FORMATION)):
        line = one_error_line(converge("--store", str(folder), *args), 1)
        assert line == f"error: --store {folder} is a directory, not a store"
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("ana\x1b[2K", "U+001B"),
        ("ana\u202etxt.exe", "U+202E"),
        ("ana\nbo", "U+000A"),
        ("ana\u200b", "U+200B"),
        ("ana\x9b", "U+009B"),
    ],
)
def test_by_refuses_control_invisible_and_bidirectional_characters(
    store: str, name: str, code: str
) -> None:
    run_id = run_id_of(cli("--store", store, "run", FORMATION)[1])
    done = converge("--store", store, "resume", run_id, "--approve", GATE, "--by", name)
    line = one_error_line(done, 2)
    assert line.startswith(
        "converge resume: error: argument --by: must name who decides in visible characters, "
    )
    assert line.endswith(f"({code} is a control, invisible or bidirectional character)")
    assert "\x1b" not in done.stderr
    assert "\u202e" not in done.stderr
    assert cli("--store", store, "review", run_id)[0] == 6  # nothing was decided


def test_program_names_the_command_as_it_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "bin" / "converge"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert program(str(script)) == shlex.quote(str(script))
    assert program("bin/converge") == "converge"  # not a file from here: called from code
    monkeypatch.chdir(tmp_path)
    assert program("bin/converge") == "bin/converge"
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(script.parent))
    assert program(str(script)) == "converge"
    cli_py = str(Path(sys.modules["converge.cli"].__file__ or ""))
    assert program(cli_py) == f"{shlex.quote(sys.executable)} -m converge.cli"
    assert program("/usr/lib/python3/pytest") == "converge"


@pytest.mark.slow
def test_the_next_commands_of_a_demo_run_as_printed(tmp_path: Path) -> None:
    """As after `make demo`: `.venv/bin/converge demo` from the directory holding `.venv`."""
    venv = Path(sys.executable).parent.parent
    (tmp_path / ".venv").symlink_to(venv)
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # `converge` is not on the path
    env.pop("CONVERGE_STORE", None)
    demo = subprocess.run(
        [".venv/bin/converge", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert demo.returncode == 6, demo.stderr
    lines = demo.stdout.splitlines()
    review = next(line for line in lines if line.startswith("next "))
    resume = lines[lines.index(review) + 1]
    review = review.removeprefix("next").strip()
    resume = resume.strip().replace("NAME", "jane")
    assert review.startswith(".venv/bin/converge review ")
    assert resume.startswith(".venv/bin/converge resume ")
    for command, status in ((review, 6), (resume, 0)):
        ran = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )
        assert ran.returncode == status, (command, ran.stdout, ran.stderr)
