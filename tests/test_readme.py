"""The README's example runs and prints what the README says it prints."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_prints_its_documented_output() -> None:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match is not None
    code = match.group(1)
    expected = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# ")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert out.getvalue().splitlines() == expected


def test_readme_names_the_two_commands_near_the_top() -> None:
    head = README.read_text(encoding="utf-8").splitlines()[:12]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)
