"""A batch on Dask whose formation isolates its suggestors: each Dask worker process runs them
in worker processes of its own, and every run stores the root of the same run in process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import anyio
import pytest
from distributed import Client, LocalCluster
from isolated_suggestors import Counter, Echo

from converge import ContextKey, Engine, ProposedFact, SqliteRunStore, StopReason, verify
from converge.dask import run_batch_sync

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.slow  # a Dask cluster, and worker processes in its worker


def _inputs(count: int) -> list[list[ProposedFact]]:
    return [
        [ProposedFact(key=ContextKey.SEEDS, id="a", content=f"input {i}", provenance="test")]
        for i in range(count)
    ]


async def _reference(inputs: list[ProposedFact]) -> str:
    engine = Engine()
    engine.register_suggestor(Echo())
    engine.register_suggestor(Counter(until=3))
    return (await engine.run(inputs=inputs)).integrity.merkle_root


def test_a_batch_of_isolated_suggestors_on_dask_stores_the_roots_of_in_process_runs(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    inputs = _inputs(4)
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,  # pyright: ignore[reportArgumentType]  # None: no dashboard
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    try:
        with Client(cluster) as client:
            ran = cast("dict[str, int]", client.run(os.getpid))  # pyright: ignore[reportUnknownMemberType]
            [dask_worker_pid] = ran.values()
            result = run_batch_sync(
                str(HERE / "isolated_formation.py"), inputs, client, store, batch_id="iso"
            )
    finally:
        cluster.close()
    assert result.ok, result.failures
    assert result.counts() == {StopReason.CONVERGED.value: 4}
    roots = [anyio.run(_reference, given) for given in inputs]
    assert [run.merkle_root for run in result.runs] == roots

    async def stored_pids() -> set[object]:
        opened = SqliteRunStore(store)
        pids: set[object] = set()
        try:
            for run_id in result.run_ids:
                record = await opened.load(run_id)
                assert verify(record.restore_context(), record.integrity)
                for cycle in record.trace.cycles:
                    for call in cycle.executions:
                        assert isinstance(call.metadata, dict)
                        pids.add(call.metadata["worker_pid"])
        finally:
            opened.close()
        return pids

    pids = anyio.run(stored_pids)
    assert pids
    assert not pids & {os.getpid(), dask_worker_pid}
