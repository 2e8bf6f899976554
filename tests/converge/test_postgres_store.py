"""`PostgresRunStore(read_only=True)`: what the read commands open, for a role that may only
read (against a real server when DATABASE_URL is set)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from converge import Engine, PostgresRunStore, RunNotFoundError, RunRecord, StoreError
from tests.cli_runs import cli, run_id_of
from tests.converge.test_store import postgres_or_skip
from tests.doubles import seed

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"


def as_role(url: str, role: str, **query: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    extra = "&".join(f"{name}={value}" for name, value in query.items())
    joined = "&".join(part for part in (parts.query, extra) if part)
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, joined, parts.fragment))


@pytest.fixture
def reader() -> Iterator[tuple[str, str]]:
    """The database's URL, and a URL of a new role that may only SELECT its tables."""
    import psycopg
    from psycopg import sql

    url = postgres_or_skip()
    role = f"converge_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        yield url, as_role(url, role)
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def grant_select(url: str, role_url: str) -> None:
    import psycopg
    from psycopg import sql

    role = urlsplit(role_url).username or ""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(role)
            )
        )


def test_read_commands_read_a_postgres_store_with_a_role_that_may_only_select(
    reader: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `InsufficientPrivilege: permission denied for schema public` (CREATE TABLE)."""
    url, role_url = reader
    paused = run_id_of(cli("--store", url, "run", FORMATION)[1])
    done = run_id_of(cli("--store", url, "run", FORMATION)[1])
    assert cli("--store", url, "resume", done, "--approve", GATE, "--by", "jane")[0] == 0
    grant_select(url, role_url)
    capsys.readouterr()
    code, out = cli("--store", role_url, "runs", "--limit", "500")
    assert code == 0
    assert paused in out
    assert done in out
    assert cli("--store", role_url, "show", done)[0] == 0
    assert cli("--store", role_url, "verify", done)[0] == 0
    assert cli("--store", role_url, "review", paused)[0] == 6
    assert cli("--store", role_url, "replay", done)[0] == 0
    assert "error" not in capsys.readouterr().err
    code, _ = cli("--store", role_url, "resume", paused, "--approve", GATE, "--by", "mallory")
    assert code == 1  # the role may not write: nothing was decided
    assert "permission denied" in capsys.readouterr().err
    assert cli("--store", url, "review", paused)[0] == 6


async def test_postgres_read_only_store_refuses_to_save_and_writes_nothing() -> None:
    url = postgres_or_skip()
    record = RunRecord.of(await Engine().run(inputs=[seed("a")]))
    store = PostgresRunStore(url, read_only=True)
    assert store.read_only
    with pytest.raises(StoreError, match=f"open read-only; run {record.run_id} not saved"):
        await store.save(record)
    with pytest.raises(RunNotFoundError):
        await store.load(record.run_id)
    store.close()


async def test_postgres_read_only_store_of_a_database_without_tables_has_no_runs() -> None:
    import psycopg
    from psycopg import sql

    url = postgres_or_skip()
    schema = f"converge_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        empty = as_role(
            url, urlsplit(url).username or "postgres", options=f"-csearch_path%3D{schema}"
        )
        store = PostgresRunStore(empty, read_only=True)
        assert await store.list_runs() == ()
        with pytest.raises(RunNotFoundError, match="no run 'x'"):
            await store.load("x")
        store.close()
        with psycopg.connect(empty) as connection:
            tables = connection.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchone()
        assert tables == (0,)
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
