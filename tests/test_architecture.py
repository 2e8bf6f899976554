"""The shape of `converge/`: no import circle, no backend on import."""

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "converge"


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
    loaded = loaded_after("import converge")
    assert "converge._engine" in loaded
    assert {"sqlite3", "psycopg"} & loaded == set()


def test_a_backend_loads_when_its_store_is_used(tmp_path: Path) -> None:
    code = (
        "import anyio, converge\n"
        f"store = converge.SqliteRunStore({str(tmp_path / 'runs.db')!r})\n"
        "anyio.run(store.list_runs)"
    )
    assert "sqlite3" in loaded_after(code)
