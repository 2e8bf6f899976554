"""A user's first minute: the wheel installed in a fresh venv runs the README's example."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
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


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_the_readme_example(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "dist")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
        env=env,
    )
    code, expected = _readme_example()
    work = tmp_path / "work"  # away from the checkout: only the installed wheel can be imported
    work.mkdir()
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
    assert Path(where.stdout.strip()).is_relative_to(env_dir)
