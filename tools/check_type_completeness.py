"""Check that both packages are 100% type-complete and documented, as pyright sees them.

pyright's `--verifytypes` needs an installed, non-editable copy: in `make setup`'s editable
install it finds no `py.typed` and reports 0%. So this installs the project into a temporary
folder first; with `--python PATH` it checks the copy already installed for that interpreter
instead (`tools/check_wheel.sh` passes the fresh venv where it installed the wheel). Exits
non-zero on any missing type or docstring.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("converge", "converge_suggestors")


def check(package: str, target: str, python: str = sys.executable) -> list[str]:
    """Run pyright --verifytypes on `package` installed under `target`; return problems.

    `python` is the interpreter whose installed packages pyright reads besides `target`.
    """
    # pyright finds the environment's packages only with its bin folder on PATH; `--pythonpath`
    # alone reads the packages of the interpreter the venv was made from.
    path = f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PYTHONPATH": target, "PATH": path}
    pyright = str(Path(python).with_name("pyright"))
    completed = subprocess.run(
        [
            pyright,
            "--pythonpath",
            python,
            "--verifytypes",
            package,
            "--ignoreexternal",
            "--outputjson",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=target,
        check=False,
    )
    report = json.loads(completed.stdout)
    completeness = report["typeCompleteness"]
    problems = [
        f"{diagnostic.get('file', '?')}: {diagnostic['message']}"
        for diagnostic in report["generalDiagnostics"]
        if diagnostic["severity"] == "error"
    ]
    for symbol in completeness["symbols"]:
        for diagnostic in symbol.get("diagnostics", []):
            if diagnostic["severity"] == "error":
                problems.append(f"{symbol['name']}: {diagnostic['message']}")
    for field in ("missingFunctionDocStringCount", "missingClassDocStringCount"):
        if completeness.get(field, 0):
            problems.append(f"{field} = {completeness[field]}")
    score = completeness["completenessScore"]
    print(f"{package}: type completeness {score:.1%}, {len(problems)} problem(s)")
    if score < 1.0 and not problems:
        problems.append(f"completeness score is {score:.1%}")
    return problems


def main(argv: list[str]) -> int:
    """Install into a temporary folder, check both packages, print the verdict."""
    if argv[:1] == ["--python"] and len(argv) == 2:
        with tempfile.TemporaryDirectory() as empty:
            problems = [
                problem for package in PACKAGES for problem in check(package, empty, argv[1])
            ]
        return _verdict(problems)
    if argv:
        print("usage: check_type_completeness.py [--python PATH]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as target:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                target,
                str(ROOT),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        problems = [problem for package in PACKAGES for problem in check(package, target)]
    return _verdict(problems)


def _verdict(problems: list[str]) -> int:
    """Print each problem; 1 if there is any, else 0."""
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
