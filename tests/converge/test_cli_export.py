"""`converge export`: every fact of a stored run, in order, as JSON lines or CSV, and nothing
at all when the stored facts do not match the run's proof."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from converge import ContextKey, Engine, ProposedFact, RunRecord, RunStore, SqliteRunStore
from converge._cli._export import CSV_COLUMNS
from converge._core._checkpoint import FactRecord
from tests.cli_runs import cli
from tests.converge.forgery import stored_json, write_json

H = ContextKey.HYPOTHESES
ODD = '=HYPERLINK("http://x")\x1b[2J \u202etxt'


DATABASE_URL = os.environ.get("DATABASE_URL")
REQUIRE = os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
    elif DATABASE_URL:
        yield DATABASE_URL
    elif REQUIRE:
        pytest.fail("CONVERGE_REQUIRE_SERVICES=1 but DATABASE_URL is not set")
    else:
        pytest.skip("set DATABASE_URL=postgresql://... for the PostgreSQL store")


def stored_run(path: Path | str, count: int = 60) -> RunRecord:
    """A run of `count` hypotheses (one with hostile text) and a seed, saved to `path` (a
    SQLite file, or a PostgreSQL URL)."""
    inputs = [ProposedFact(key=ContextKey.SEEDS, id="goal", content="grow", provenance="input")]
    inputs += [
        ProposedFact(
            key=H,
            id=f"h{n}",
            content=ODD if n == 7 else f"claim {n}",
            provenance="input",
            evidence=("seeds/goal",) if n % 10 == 0 else (),
            payload={"n": n, "tags": ["a", "b"]} if n == 3 else None,
        )
        for n in range(count)
    ]

    async def run() -> RunRecord:
        record = RunRecord.of(await Engine().run(inputs=inputs))
        url = str(path)
        if url.startswith("postgresql://"):
            from converge.stores.postgres import PostgresRunStore  # the optional extra

            store: RunStore = PostgresRunStore(url)
        else:
            store = SqliteRunStore(path)
        try:
            await store.save(record)
        finally:
            store.close()
        return record

    return anyio.run(run)


def test_export_writes_every_fact_as_stored_one_json_line_each(store: str) -> None:
    record = stored_run(store)
    code, out = cli("--store", store, "export", record.run_id)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(record.facts) == 61
    assert [FactRecord.model_validate_json(line) for line in lines] == list(record.facts)
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "\\u001b" in lines[8]
    assert "\\u202e" in lines[8]


def test_export_csv_has_a_header_and_one_row_per_fact_with_no_formula(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    record = stored_run(tmp_path / "runs.db")
    code, out = cli("--store", store, "export", record.run_id, "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(record.facts) + 1
    by_id = {row[1]: dict(zip(CSV_COLUMNS, row, strict=True)) for row in rows[1:]}
    hostile = by_id["h7"]["content"]
    assert hostile.startswith("'=HYPERLINK")
    assert "\x1b" not in hostile
    assert "\\x1b[2J" in hostile
    assert "\\u202e" in hostile
    assert json.loads(by_id["h3"]["payload"]) == {"n": 3, "tags": ["a", "b"]}
    assert json.loads(by_id["h10"]["evidence"]) == ["seeds/goal"]
    last = record.facts[-1]
    row = by_id[last.id]
    assert (row["key"], row["clock"], row["digest"]) == ("hypotheses", "61", last.digest)
    assert [row[1] for row in rows[1:]] == [fact.id for fact in record.facts]


def test_export_to_a_file_says_how_many_facts_and_json_says_so_too(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    record = stored_run(tmp_path / "runs.db")
    target = tmp_path / "out" / "facts.jsonl"
    code, out = cli("--store", store, "export", record.run_id, "-o", str(target))
    assert (code, out) == (0, f"61 fact(s) exported to {target}\n")
    assert len(target.read_text(encoding="utf-8").splitlines()) == 61
    code, out = cli(
        "--store", store, "export", record.run_id, "--format", "csv", "-o", str(target), "--json"
    )
    assert code == 0
    assert json.loads(out) == {"exported": str(target), "format": "csv", "facts": 61}
    assert target.read_text(encoding="utf-8").startswith("key,id,content,")
    assert list(target.parent.iterdir()) == [target]


def test_export_json_without_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    record = stored_run(tmp_path / "runs.db", count=2)
    with pytest.raises(SystemExit) as exit_info:
        cli("--store", store, "export", record.run_id, "--json")
    assert exit_info.value.code == 2
    assert "export: --json needs -o FILE" in capsys.readouterr().err


@pytest.mark.parametrize("edit", ["content", "dropped"])
def test_export_writes_nothing_when_a_stored_fact_was_edited(
    store: str, tmp_path: Path, edit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record = stored_run(store)
    stored = stored_json(store, record.run_id)
    facts = stored["facts"]
    assert isinstance(facts, list)
    if edit == "content":
        facts[30]["content"] = "changed by hand"
    else:
        del facts[30]
    write_json(store, record.run_id, stored)
    target = tmp_path / "facts.jsonl"
    target.write_text("kept\n", encoding="utf-8")
    capsys.readouterr()
    code, out = cli("--store", store, "export", record.run_id)
    assert (code, out) == (7, "")
    error = capsys.readouterr().err
    assert error.startswith(f"error: not exported: run {record.run_id}")
    assert error.count("\n") == 1
    code, out = cli("--store", store, "export", record.run_id, "-o", str(target))
    assert (code, out) == (7, "")
    assert target.read_text(encoding="utf-8") == "kept\n"
    assert list(tmp_path.glob(".facts.jsonl.*")) == []


def test_export_of_an_unknown_run_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    stored_run(tmp_path / "runs.db", count=1)
    capsys.readouterr()
    code, out = cli("--store", store, "export", "nope")
    assert (code, out) == (1, "")
    assert "nope" in capsys.readouterr().err
