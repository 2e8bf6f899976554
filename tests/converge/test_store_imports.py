"""Store backends load their database driver only when used, never on `import converge`."""

import json
import subprocess
import sys
from pathlib import Path


def run_python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_importing_converge_loads_no_database_driver() -> None:
    code = "import sys, converge; print(sorted({'sqlite3', 'psycopg'} & set(sys.modules)))"
    assert run_python(code).strip() == "[]"


def test_using_a_sqlite_store_loads_sqlite3(tmp_path: Path) -> None:
    code = f"""
import json, sys
import anyio
from converge import ContextKey, Engine, ProposedFact, RunRecord, SqliteRunStore

before = "sqlite3" in sys.modules
store = SqliteRunStore({str(tmp_path / "x.db")!r})
fact = ProposedFact(key=ContextKey.SEEDS, id="a", content="A.", provenance="test")
result = Engine().run_sync(inputs=[fact])
anyio.run(store.save, RunRecord.of(result))
record = anyio.run(store.load, result.run_id)
print(json.dumps({{
    "before": before,
    "after": "sqlite3" in sys.modules,
    "same": record.integrity == result.integrity,
}}))
"""
    report = json.loads(run_python(code))
    assert report == {"before": False, "after": True, "same": True}
    assert (tmp_path / "x.db").is_file()


def test_postgres_store_without_psycopg_names_the_extra() -> None:
    code = """
import json, sys
sys.modules["psycopg"] = None  # what `import psycopg` sees when it is not installed
import converge
try:
    converge.PostgresRunStore("postgresql://127.0.0.1:1/x")
except ImportError as error:
    print(json.dumps(str(error)))
else:
    print(json.dumps(None))
"""
    assert json.loads(run_python(code)) == (
        "PostgresRunStore needs psycopg: install the 'postgres' extra "
        '(pip install "converge-engine[postgres]")'
    )
