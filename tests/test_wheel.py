"""A user's first minute: the wheel, installed without extras in a fresh venv, runs the
README's example and the default demo, whose printed next commands run as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SOURCES = ("converge", "converge_suggestors", "pyproject.toml", "README.md")


def _version() -> str:
    text = (ROOT / "converge" / "_version.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert match is not None
    return match.group(1)


def _newest_source() -> float:
    """When a file the wheel is built from last changed."""
    paths = [ROOT / name for name in SOURCES]
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    return max(f.stat().st_mtime for f in files if "__pycache__" not in f.parts)


def _wheel(into: Path) -> Path:
    """The wheel `tools/check_wheel.sh` left in dist/ if it is newer than the sources, else a
    new one built into `into`."""
    name = f"converge_engine-{_version()}-py3-none-any.whl"
    built = ROOT / "dist" / name
    if built.is_file() and built.stat().st_mtime > _newest_source():
        return built
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(into), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return into / name


def _readme_example() -> tuple[str, list[str]]:
    """The README's example program (its first Python block) and the output it documents."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Example\n.*?```python\n(.*?)```", text, re.DOTALL | re.MULTILINE)
    assert match is not None, "README.md has no ```python block under ## Example"
    code = match.group(1)
    expected = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# ")]
    assert expected, "the README's example documents no output"
    return code, expected


@dataclass(frozen=True)
class Installed:
    """The wheel installed, without extras, in a fresh venv outside the checkout."""

    venv: Path
    env: dict[str, str]
    work: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    wheel = _wheel(root / "dist")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [
            str(env_dir / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    work = root / "work"  # away from the checkout: only the installed wheel can be imported
    work.mkdir()
    return Installed(env_dir, env, work)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_the_readme_example(installed: Installed) -> None:
    code, expected = _readme_example()
    work, env, python = installed.work, installed.env, installed.python
    (work / "example.py").write_text(code, encoding="utf-8")

    ran = subprocess.run(
        [str(python), "example.py"], cwd=work, env=env, capture_output=True, text=True, check=False
    )
    where = subprocess.run(
        [str(python), "-c", "import converge, converge_suggestors as s; print(converge.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == expected
    assert Path(where.stdout.strip()).is_relative_to(installed.venv)


@pytest.mark.slow
def test_wheel_without_extras_runs_the_default_demo_and_its_next_commands(
    installed: Installed,
) -> None:
    demo_dir = installed.work / "demo"
    demo_dir.mkdir()
    converge = installed.venv / "bin" / "converge"
    env = {**installed.env, "PATH": "/usr/bin:/bin"}  # as after `pip install` into a venv
    env.pop("CONVERGE_STORE", None)
    missing = subprocess.run(
        [str(installed.python), "-c", "import cedarpy"], env=env, capture_output=True, check=False
    )
    assert missing.returncode != 0  # the `policy` extra is not installed
    demo = subprocess.run(
        [str(converge), "demo"], cwd=demo_dir, env=env, capture_output=True, text=True, check=False
    )
    assert demo.returncode == 6, demo.stdout + demo.stderr
    lines = demo.stdout.splitlines()
    assert "Cedar, the 'policy' extra, is not installed" in lines[0]
    review = next(line for line in lines if line.startswith("next "))
    resume = lines[lines.index(review) + 1]
    review = review.removeprefix("next").strip()
    assert review.startswith(f"{converge} review ")
    for command, status in ((review, 6), (resume.strip().replace("NAME", "jane"), 0)):
        ran = subprocess.run(
            command, shell=True, cwd=demo_dir, env=env, capture_output=True, text=True, check=False
        )
        assert ran.returncode == status, (command, ran.stdout, ran.stderr)
