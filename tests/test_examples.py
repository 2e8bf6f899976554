"""The examples run and end as their docs say."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from converge import ContextKey, StopReason

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_hello_convergence_converges_in_three_cycles(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = runpy.run_path(str(EXAMPLES / "hello_convergence.py"))
    result = namespace["main"]()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 3
    answer = result.context.find(ContextKey.HYPOTHESES, "answer")
    assert answer is not None
    assert answer.evidence == ("seeds/question",)
    out = capsys.readouterr().out
    assert "stop reason : converged" in out
    assert "verified    : True" in out


def test_hello_convergence_runs_as_a_script() -> None:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "hello_convergence.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "cycle 2: ran react:hypotheses/answer; promoted hypotheses/answer" in completed.stdout
    assert completed.stderr == ""
