"""The shape of `converge/`: enforced layers, no import circle, no backend on import, and a
repository that refers to nothing outside it.

The layers themselves are import-linter contracts in `pyproject.toml` (`lint-imports`, run by
`make lint`); this module checks that they hold, that they catch a break, and what
import-linter cannot say.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "converge"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """The converge modules `path` imports, under TYPE_CHECKING and in functions too."""
    name = module_name(path)
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_imports_in_a_circle() -> None:
    known = modules()
    graph = {
        name: {dep for dep in imported(path) if dep in known and dep not in (name, "converge")}
        for name, path in known.items()
    }
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_converge_loads_no_store_backend() -> None:
    assert "converge._engine" not in loaded_after("import converge")  # on first use
    loaded = loaded_after("import converge; converge.Engine")
    assert "converge._engine" in loaded
    assert {"sqlite3", "psycopg"} & loaded == set()


def test_a_backend_loads_when_its_store_is_used(tmp_path: Path) -> None:
    code = (
        "import anyio, converge\n"
        f"store = converge.SqliteRunStore({str(tmp_path / 'runs.db')!r})\n"
        "anyio.run(store.list_runs)"
    )
    assert "sqlite3" in loaded_after(code)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.skip("import-linter is not installed: pip install --group lint (or make setup)")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True
    )


def test_the_layer_contracts_hold() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_an_upward_import_breaks_the_layer_contract(tmp_path: Path) -> None:
    for name in ("converge", "converge_suggestors"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    model = tmp_path / "converge" / "_core" / "_model.py"
    model.write_text(model.read_text() + "\nimport converge._engine  # an upward import\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "converge._core._model -> converge._engine" in done.stdout


def test_the_engine_importing_a_battery_breaks_the_forbidden_contract(tmp_path: Path) -> None:
    for name in ("converge", "converge_suggestors"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    engine = tmp_path / "converge" / "_engine.py"
    engine.write_text(engine.read_text() + "\nimport converge_suggestors  # a battery\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "converge._engine -> converge_suggestors" in done.stdout


def test_the_package_top_level_stays_small() -> None:
    entries = [p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 20, sorted(entries)


# What a clone of the repository does not hold, or a log it no longer keeps: the original
# design notes outside it, a "pass" of the old performance log ("the fifteenth pass"), and the
# numbers of issues in a tracker it does not ship. This file, which spells them out as
# examples, is the one file not scanned.
_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    r"\d+(?:st|nd|rd|th)"
)
OUTSIDE_REFERENCES = re.compile(
    "|".join(
        (
            re.escape("../shared"),
            re.escape("DESIGN.md"),
            rf"\b(?:{_ORDINALS})[\s-]+pass(?:es)?\b",
            r"\bissues?\s+#?\d+\b",
        )
    ),
    re.IGNORECASE,
)
SCANNED = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "mkdocs.yml", "pyproject.toml")
SCANNED_TREES = (
    "benchmarks",
    "converge",
    "converge_suggestors",
    "docs",
    "examples",
    "tests",
    "tools",
)
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".pyi",
    ".toml",
    ".yml",
    ".yaml",
    ".txt",
    ".html",
    ".css",
    ".js",
    ".sql",
}


def outside_references(text: str) -> list[str]:
    """Each line of `text` that refers outside the repository or to the old log, numbered."""
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_REFERENCES.search(line)
    ] + [
        f"across lines: {match.group(0)!r}"
        for match in OUTSIDE_REFERENCES.finditer(text)
        if "\n" in match.group(0)
    ]


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED if (ROOT / name).is_file()]
    for tree in SCANNED_TREES:
        files += (
            path
            for path in sorted((ROOT / tree).rglob("*"))
            if path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts
        )
    return [path for path in files if path != Path(__file__).resolve()]


def test_nothing_refers_outside_the_repository_or_to_a_performance_log() -> None:
    files = scanned_files()
    assert ROOT / "README.md" in files
    assert PACKAGE / "_engine.py" in files
    found = {
        str(path.relative_to(ROOT)): hits
        for path in files
        if (hits := outside_references(path.read_text(encoding="utf-8")))
    }
    assert not found, found


@pytest.mark.parametrize(
    "text",
    [
        "see ../shared/tools/arch-check.py",
        "the performance contract (design.md)",
        'benchmarks/README.md, section "Fifteenth pass"',
        "measured in the tenth\n    pass of the log",
        "the 3rd pass",
        "the second-pass figures",
        '"""Batches on Dask (issue 14): run_batch."""',
        "(issues #17)",
    ],
)
def test_the_scan_finds_a_reference_outside_the_repository(text: str) -> None:
    assert outside_references(text), text


@pytest.mark.parametrize(
    "text",
    [
        "The proxy must pass that `Host` on.",
        "and pass to `Engine.resume`",
        "one pass over what nearly every proposal passes",
        "the first passed check",
        "a tissue 4 sample",
        "DESIGN_md = 1",
    ],
)
def test_the_scan_leaves_ordinary_prose_alone(text: str) -> None:
    assert not outside_references(text), text


def test_the_benchmark_page_and_the_unreleased_changes_stay_short() -> None:
    """Documents, not diaries: the history of the figures is in git, not in these files."""
    benchmarks = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(benchmarks) < 400, len(benchmarks)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    unreleased = changelog.split("## Unreleased", 1)[1].split("\n## ", 1)[0]
    assert "### " in unreleased  # the section was found, with its headings
    assert len(unreleased.splitlines()) < 80, len(unreleased.splitlines())
