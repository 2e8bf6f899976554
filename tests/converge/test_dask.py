"""Batches on a real Dask cluster: `converge.dask.run_batch` and `run_batch_sync`.

Each cluster is a `distributed.LocalCluster` of two worker processes on 127.0.0.1 running the
chain formation of `durable_formation.py`, which reads its length and its sleep from the
environment when imported: the variables are set before the cluster starts, so the worker
processes inherit them, and the in-process references are fresh imports under the same values.

- 200 inputs into SQLite (and 40 into PostgreSQL when DATABASE_URL is set): every input is one
  finished, verifying stored run with the Merkle root of the same inputs run in-process;
- an asynchronous client does the same; re-running a batch id keeps every run, adds no row;
- a worker killed with SIGKILL mid-batch: the batch still ends ok, every input stored exactly
  once, and the runs the dead worker had in flight are continued after their lease ran out;
- a formation that raises on import, and an input that is not a `ProposedFact`, fail the batch
  before any task runs, with one `ConfigurationError` naming the culprit;
- a cluster with no worker raises `TimeoutError` naming its scheduler after `worker_timeout`.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import anyio
import anyio.to_thread
import dask.config
import pytest
from distributed import Client, LocalCluster
from test_store import postgres_or_skip

from converge import (
    ConfigurationError,
    ContextKey,
    Formation,
    ProposedFact,
    RunStatus,
    RunStore,
    SqliteRunStore,
    StopReason,
    verify,
)
from converge._scale._batch import BatchResult, open_store_url
from converge.dask import run_batch, run_batch_sync

HERE = Path(__file__).resolve().parent
CHAIN = str(HERE / "durable_formation.py")

pytestmark = pytest.mark.slow  # real worker processes, leases and a killed worker


@pytest.fixture
def anyio_backend() -> str:
    """The asynchronous `distributed.Client` runs on asyncio."""
    return "asyncio"


# --- clusters, formations and references ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Chain:
    """A cluster whose workers import the chain under one environment, and its reference."""

    cluster: LocalCluster
    client: Client
    formation: Formation
    """The chain imported in this process under the workers' environment."""


def local_cluster() -> LocalCluster:
    """Two worker processes on 127.0.0.1, one thread each, no dashboard.

    Without a dashboard the scheduler still serves its HTTP routes, on port 8787 by default:
    a second cluster (or another program on that port) would warn and take another port, so
    it takes a free one.
    """
    return LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,  # pyright: ignore[reportArgumentType]  # None: no dashboard
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )


def load_chain() -> Formation:
    """A fresh import of the chain under the current environment."""
    spec = importlib.util.spec_from_file_location(f"dask_chain_{uuid.uuid4().hex}", CHAIN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    formation: object = module.formation
    assert isinstance(formation, Formation)
    return formation


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    """Two worker processes running a 3-cycle chain without sleeps."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVERGE_TEST_STEPS", "3")
        patch.setenv("CONVERGE_TEST_SLEEP", "0")
        formation = load_chain()
        cluster = local_cluster()
        try:
            with Client(cluster) as client:
                yield Chain(cluster, client, formation)
        finally:
            cluster.close()


def seeds(tag: str, count: int) -> list[list[ProposedFact]]:
    """`count` input sets, each the chain's `seeds/start` with its own content."""
    return [
        [
            ProposedFact(
                key=ContextKey.SEEDS,
                id="start",
                content=f"{tag} input {index}",
                provenance="test",
            )
        ]
        for index in range(count)
    ]


def references(formation: Formation, inputs: Sequence[Sequence[ProposedFact]]) -> list[str]:
    """The Merkle root of each input set run in-process."""

    async def main() -> list[str]:
        roots: list[str] = []
        for given in inputs:
            result = await formation.engine().run(inputs=given)
            roots.append(result.integrity.merkle_root)
        return roots

    return anyio.run(main)


def count_rows(store: str, batch: str) -> int:
    """Rows of `batch` in the store (SQLite path or PostgreSQL URL)."""
    pattern = f"{batch}-%"
    if store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store) as pg:
            row = pg.execute(
                "SELECT count(*) FROM converge_runs WHERE run_id LIKE %s", (pattern,)
            ).fetchone()
    else:
        if not Path(store).exists():
            return 0
        with closing(sqlite3.connect(store)) as db, db:
            row = db.execute(
                "SELECT count(*) FROM converge_runs WHERE run_id LIKE ?", (pattern,)
            ).fetchone()
    assert row is not None
    return int(row[0])


def sqlite_store(tmp_path: Path) -> str:
    """A SQLite store created here, before the workers open it.

    Two worker processes opening a fresh file at once can fail one of them: the
    `PRAGMA journal_mode = WAL` of `SqliteRunStore` raises "database is locked" without waiting
    (reported with these tests); a store that already exists is in WAL mode.
    """
    path = str(tmp_path / "runs.db")

    async def create() -> None:
        store = SqliteRunStore(path)
        await store.list_runs(limit=1)
        store.close()

    anyio.run(create)
    return path


def running_rows(path: str, batch: str) -> set[str]:
    """The run ids of `batch` stored as running in a SQLite store (none before it exists)."""
    try:
        with closing(sqlite3.connect(path, timeout=5)) as db, db:
            rows = db.execute(
                "SELECT run_id FROM converge_runs WHERE run_id LIKE ? AND status = 'running'",
                (f"{batch}-%",),
            ).fetchall()
    except sqlite3.OperationalError:  # the workers have not created the table yet
        return set()
    return {str(row[0]) for row in rows}


def check_batch(
    result: BatchResult, batch: str, store: str, roots: Sequence[str]
) -> dict[str, int]:
    """Every input is one finished, verifying stored run with its reference root.

    Returns how many stored runs show each number of continuations in their trace.
    """
    count = len(roots)
    assert result.ok, result.failures
    assert result.batch_id == batch
    assert result.run_ids == tuple(f"{batch}-{index}" for index in range(count))
    assert [run.index for run in result.runs] == list(range(count))
    assert all(run.status is RunStatus.FINISHED for run in result.runs)
    assert [run.merkle_root for run in result.runs] == list(roots)
    assert result.counts() == {StopReason.CONVERGED.value: count}
    assert count_rows(store, batch) == count

    async def main() -> dict[str, int]:
        opened: RunStore = open_store_url(store)
        continued: dict[str, int] = {}
        try:
            for index, root in enumerate(roots):
                record = await opened.load(f"{batch}-{index}")
                assert record.status is RunStatus.FINISHED
                assert record.stop_reason is StopReason.CONVERGED
                assert record.integrity.merkle_root == root
                assert verify(record.restore_context(), record.integrity)
                continued[record.run_id] = len(record.trace.continuations)
        finally:
            close = getattr(opened, "close", None)
            if callable(close):
                close()
        return continued

    return anyio.run(main)


# --- batches -------------------------------------------------------------------------------------


def test_a_batch_of_200_stores_each_input_as_the_run_it_is_in_process(
    chain: Chain, tmp_path: Path
) -> None:
    store = sqlite_store(tmp_path)
    inputs = seeds("sqlite", 200)
    result = run_batch_sync(CHAIN, inputs, chain.client, store, batch_id="b200")
    continued = check_batch(result, "b200", store, references(chain.formation, inputs))
    assert {run.action for run in result.runs} == {"started"}
    assert not any(continued.values())

    again = run_batch_sync(CHAIN, inputs, chain.client, store, batch_id="b200")
    assert again.ok, again.failures
    assert {run.action for run in again.runs} == {"kept"}
    assert again.runs == tuple(run.model_copy(update={"action": "kept"}) for run in result.runs)
    assert count_rows(store, "b200") == 200


def test_a_batch_into_postgres_stores_each_input_once(chain: Chain) -> None:
    store = postgres_or_skip()
    batch = f"dask-{uuid.uuid4().hex[:12]}"  # the database is shared
    inputs = seeds(batch, 40)
    result = run_batch_sync(CHAIN, inputs, chain.client, store, batch_id=batch)
    check_batch(result, batch, store, references(chain.formation, inputs))

    again = run_batch_sync(CHAIN, inputs, chain.client, store, batch_id=batch)
    assert {run.action for run in again.runs} == {"kept"}
    assert count_rows(store, batch) == 40


async def test_run_batch_with_an_asynchronous_client(chain: Chain, tmp_path: Path) -> None:
    store = await anyio.to_thread.run_sync(sqlite_store, tmp_path)
    inputs = seeds("async", 30)
    done: list[tuple[int, int]] = []
    async with Client(chain.cluster.scheduler_address, asynchronous=True) as client:
        result = await run_batch(
            CHAIN,
            inputs,
            client,
            store,
            batch_id="async",
            progress=lambda finished, total: done.append((finished, total)),
        )
    roots = await anyio.to_thread.run_sync(references, chain.formation, inputs)
    await anyio.to_thread.run_sync(check_batch, result, "async", store, roots)
    assert done[-1] == (30, 30)
    assert [finished for finished, _ in done] == sorted(finished for finished, _ in done)


def test_a_batch_whose_worker_is_killed_stores_every_input_exactly_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SIGKILL one of two workers while both have runs in flight.

    The kill waits until at least 5 runs are stored as running: a task runs at most 4 at once,
    so both workers then have saved runs in flight, and the killed one leaves at least one run
    `running`. Dask reschedules its task; the retry waits for that run's lease (2 s) to run out
    and continues it, so at least one stored run's trace holds a continuation. Which runs were
    lost, and whether some of the dead task's runs had not saved a cycle yet (those are started
    afresh), depends on timing, so the test asserts only that some continuation happened.
    """
    monkeypatch.setenv("CONVERGE_TEST_STEPS", "10")
    monkeypatch.setenv("CONVERGE_TEST_SLEEP", "0.05")
    formation = load_chain()
    store = sqlite_store(tmp_path)
    inputs = seeds("killed", 40)
    outcome: list[BatchResult | BaseException] = []
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 10}),
        closing(local_cluster()) as cluster,
        Client(cluster) as client,
    ):
        pids = cast("dict[str, int]", client.run(os.getpid))  # pyright: ignore[reportUnknownMemberType]
        assert len(pids) == 2

        def batch() -> None:
            try:
                outcome.append(
                    run_batch_sync(
                        CHAIN,
                        inputs,
                        client,
                        store,
                        batch_id="killed",
                        runs_per_worker=4,
                        lease=2.0,
                    )
                )
            except BaseException as error:
                outcome.append(error)

        thread = threading.Thread(target=batch)
        thread.start()
        deadline = time.monotonic() + 30
        running: set[str] = set()
        while len(running) < 5:
            assert time.monotonic() < deadline, "the workers never had 5 runs in flight"
            assert thread.is_alive(), outcome
            time.sleep(0.02)
            running = running_rows(store, "killed")
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        thread.join(timeout=60)
        assert not thread.is_alive(), "the batch did not end"
    [result] = outcome
    assert isinstance(result, BatchResult), result
    continued = check_batch(result, "killed", store, references(formation, inputs))
    assert sum(1 for times in continued.values() if times) >= 1, continued
    assert {run.action for run in result.runs if continued[run.run_id]} == {"continued"}


# --- failing early -------------------------------------------------------------------------------


def test_a_formation_that_raises_on_import_fails_the_batch_before_any_task(
    chain: Chain, tmp_path: Path
) -> None:
    broken = tmp_path / "broken_formation.py"
    broken.write_text('raise RuntimeError("no model configured")\n', encoding="utf-8")
    store = str(tmp_path / "runs.db")
    with pytest.raises(ConfigurationError, match="broken_formation") as caught:
        run_batch_sync(str(broken), seeds("broken", 3), chain.client, store, batch_id="broken")
    assert "no model configured" in str(caught.value)
    assert count_rows(store, "broken") == 0


def test_an_input_that_is_not_a_proposed_fact_names_its_index(chain: Chain, tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    inputs = seeds("bad", 3)
    inputs[2] = [inputs[2][0], cast("ProposedFact", {"id": "not-a-fact"})]
    with pytest.raises(ConfigurationError, match=r"inputs\[2\]\[1\] must be a ProposedFact"):
        run_batch_sync(CHAIN, inputs, chain.client, store, batch_id="bad")
    assert count_rows(store, "bad") == 0


def test_run_batch_on_a_cluster_without_workers_raises_after_worker_timeout(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    with (
        closing(
            LocalCluster(
                n_workers=0,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,  # pyright: ignore[reportArgumentType]  # None: no dashboard
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            )
        ) as cluster,
        Client(cluster) as client,
    ):
        started = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            run_batch_sync(CHAIN, seeds("none", 2), client, store, worker_timeout=1.5)
        took = time.monotonic() - started
        address = cluster.scheduler_address
    assert str(caught.value) == f"scheduler {address} has no workers: none joined within 1.5 s"
    assert 1.5 <= took < 20
    assert count_rows(store, "none") == 0
