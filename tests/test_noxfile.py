"""The Pythons the project says it supports are the ones CI tests.

`make test` runs the full suite on the Python the Makefile picks (3.11); `noxfile.py` runs the
core suite on the others (`tools/test_versions.sh`, called by `.ci/run`). The classifiers,
`requires-python`, the lowest version the type checker and linter target, the README and the
docs' first page must all say the same.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, cast

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOX = Path(sys.executable).parent / "nox"


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def core_pythons() -> list[str]:
    """`CORE_PYTHONS` of `noxfile.py`, read without importing nox (the core session lacks it)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "CORE_PYTHONS":
            found: object = ast.literal_eval(value)
            assert isinstance(found, list)
            return [str(item) for item in cast("list[object]", found)]
    raise AssertionError("noxfile.py has no CORE_PYTHONS")


def full_suite_python() -> str:
    """The Python `make test` runs on: the first the Makefile's `PYTHON` looks for."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^PYTHON \?= \$\(shell command -v python(3\.\d+)", makefile, re.M)
    assert found is not None, "the Makefile's PYTHON no longer names a python3.X first"
    return found.group(1)


def classified() -> list[str]:
    prefix = "Programming Language :: Python :: 3."
    return [
        c.removeprefix("Programming Language :: Python :: ")
        for c in pyproject()["project"]["classifiers"]
        if c.startswith(prefix)
    ]


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_classifiers_are_the_pythons_ci_tests() -> None:
    tested = sorted({full_suite_python(), *core_pythons()}, key=as_tuple)
    assert classified() == tested
    assert full_suite_python() not in core_pythons()


def test_requires_python_and_the_checkers_start_at_the_lowest_tested_python() -> None:
    lowest = min(classified(), key=as_tuple)
    config = pyproject()
    assert config["project"]["requires-python"] == f">={lowest}"
    assert config["tool"]["pyright"]["pythonVersion"] == lowest
    assert config["tool"]["ruff"]["target-version"] == "py" + lowest.replace(".", "")


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_docs_name_every_tested_python(page: str) -> None:
    versions = sorted(classified(), key=as_tuple)
    said = f"CPython {', '.join(versions[:-1])} and {versions[-1]}"
    text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
    assert said in text, f"{page} does not say {said!r}"
    assert "not tested yet" not in text


def test_ci_runs_the_core_sessions_and_fails_on_a_missing_interpreter() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^tools/test_versions\.sh$", ci, re.M)
    script = (ROOT / "tools" / "test_versions.sh").read_text(encoding="utf-8")
    assert "--error-on-missing-interpreters" in script
    groups = pyproject()["dependency-groups"]
    assert any(item.startswith("nox") for item in groups["ci"])
    assert {"include-group": "test-core"} in groups["test"]


@pytest.mark.skipif(not NOX.exists(), reason="nox is not installed here (the ci group)")
def test_nox_lists_a_core_session_for_each_core_python() -> None:
    listed = subprocess.run(
        [str(NOX), "--list", "--json", "--noxfile", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    sessions = json.loads(listed.stdout)
    assert [(s["name"], s["python"]) for s in sessions] == [
        ("core", version) for version in core_pythons()
    ]
