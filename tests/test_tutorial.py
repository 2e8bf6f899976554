"""The tutorial's command-line steps, run as a reader runs them.

`tests/test_docs.py` runs the tutorial's Python blocks; this test takes the `vendor_choice.py`
block, saves it as the page says (without its last part), and runs `converge run`, `review`,
`resume`, a second `resume`, `show`, `report`, `verify` and `replay` on it in new processes,
comparing what they print with the page.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
GATE = "gate:4:purchases/order"
# the second `next` line starts with the command as it was started (`python -m converge.cli`)
_VOLATILE = re.compile(
    r"^\s*cycle\s+\d+:|^saved run|^report |^next |^\s+\S.* resume \w+ --approve "
)


def formation_file(tmp_path: Path) -> Path:
    text = PAGE.read_text(encoding="utf-8")
    block = text.split('```python title="vendor_choice.py"\n', 1)[1].split("\n```", 1)[0]
    kept = block.split("# --- run it", 1)[0]
    assert "formation = Formation(" in kept
    path = tmp_path / "vendor_choice.py"
    path.write_text(kept, encoding="utf-8")
    return path


def page_output() -> list[str]:
    """The lines the page shows for `converge run vendor_choice.py`, volatile ones left out."""
    text = PAGE.read_text(encoding="utf-8")
    shown = text.split("$ converge run vendor_choice.py\n", 1)[1].split("$ echo $?", 1)[0]
    return [line for line in shown.splitlines() if line and not _VOLATILE.match(line)]


def converge(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "converge.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_tutorials_command_line_steps_do_what_the_page_says(tmp_path: Path) -> None:
    formation_file(tmp_path)
    run = converge(tmp_path, "run", "vendor_choice.py")
    assert run.returncode == 6, run.stderr
    printed = [line for line in run.stdout.splitlines() if not _VOLATILE.match(line)]
    assert printed == page_output()
    run_id = run.stdout.split("saved run    ", 1)[1].split()[0]

    review = converge(tmp_path, "review", run_id)
    assert review.returncode == 6, review.stderr
    assert f"gate {GATE}" in review.stdout
    assert "'annual_cost': 180000" in review.stdout

    resume = converge(tmp_path, "resume", run_id, "--approve", GATE, "--by", "ana")
    assert resume.returncode == 0, resume.stderr
    again = converge(tmp_path, "resume", run_id, "--approve", GATE, "--by", "bo")
    assert again.returncode == 8
    assert "decided by ana" in again.stderr

    show = converge(tmp_path, "show", run_id)
    assert "gate human, approved by ana" in show.stdout
    report = converge(tmp_path, "report", run_id)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / ".converge" / "reports" / f"{run_id}.html").is_file()
    for command in ("verify", "replay"):
        done = converge(tmp_path, command, run_id)
        assert done.returncode == 0, done.stdout + done.stderr
