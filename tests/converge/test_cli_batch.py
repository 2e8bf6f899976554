"""`converge batch` (issue 14): one run per input line on a real Dask cluster.

The formation is the chain of `durable_formation.py`, three steps and no sleep: it reads them
from the environment when imported, so the variables are set before any cluster starts and
the worker processes inherit them (the `dask worker` processes get them explicitly).

- `--workers 2` (a `LocalCluster`), 20 inputs into SQLite: exit 0, runs `BATCH-0..19`, each
  with the Merkle root of the same inputs run in-process; the same `--batch-id` again with
  `--json` keeps every run (a `BatchResult`, every run "kept", no new row);
- `--scheduler ADDRESS` of a `dask scheduler` and two `dask worker` processes, into SQLite and
  into PostgreSQL (DATABASE_URL): exit 0, every input stored once;
- a malformed input line, and a formation that raises on import: one error line, exit 1,
  nothing stored and no cluster started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from converge import ContextKey, ProposedFact, RunRecord, RunStatus
from converge._batch import BatchResult, open_store_url
from converge._cli_support import BATCH_INCOMPLETE, load_formation
from converge._store import RunStore
from tests.cli_runs import cli
from tests.converge.batch_formation import seed as batch_seed
from tests.converge.test_store import postgres_or_skip

pytest.importorskip("distributed")

pytestmark = pytest.mark.slow

FORMATION = str(Path(__file__).resolve().parent / "durable_formation.py")
DASK = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "dask"
ENV = {"CONVERGE_TEST_STEPS": "3", "CONVERGE_TEST_SLEEP": "0"}
COUNT = 20


def seeds(index: int) -> tuple[ProposedFact, ...]:
    return (
        ProposedFact(key=ContextKey.SEEDS, id="start", content=f"case {index}", provenance="test"),
    )


def write_inputs(path: Path, count: int = COUNT) -> Path:
    lines = (
        json.dumps({"inputs": [json.loads(fact.model_dump_json()) for fact in seeds(i)]})
        for i in range(count)
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def chain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def stored_ids(target: str, prefix: str) -> list[str]:
    """The run ids in the store that start with `prefix`, one entry per stored row."""

    async def read() -> list[str]:
        store: RunStore = open_store_url(target)
        try:
            runs = await store.list_runs(limit=10_000)
        finally:
            store.close()  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
        return [run.run_id for run in runs if run.run_id.startswith(prefix)]

    return anyio.run(read)


def roots(target: str, run_ids: list[str]) -> dict[str, str]:
    async def read() -> dict[str, str]:
        store: RunStore = open_store_url(target)
        try:
            return {i: (await store.load(i)).integrity.merkle_root for i in run_ids}
        finally:
            store.close()  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]

    return anyio.run(read)


def in_process_root(index: int) -> str:
    async def run() -> str:
        result = await load_formation(FORMATION).engine().run(inputs=seeds(index))
        return result.integrity.merkle_root

    return anyio.run(run)


def test_batch_on_a_local_cluster_stores_every_input_and_a_rerun_keeps_them(
    chain_env: None, tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "inputs.jsonl")
    store = str(tmp_path / "runs.db")
    batch = f"b{uuid.uuid4().hex[:8]}"
    args = ("--store", store, "batch", FORMATION, str(inputs), "--batch-id", batch)

    code, out = cli(*args, "--workers", "2")

    assert code == 0, out
    expected = [f"{batch}-{i}" for i in range(COUNT)]
    assert sorted(stored_ids(store, f"{batch}-")) == sorted(expected)
    stored = roots(store, expected)
    assert [stored[f"{batch}-{i}"] for i in range(COUNT)] == [
        in_process_root(i) for i in range(COUNT)
    ]
    progress = [line for line in out.splitlines() if line.startswith("batch: ")]
    assert progress[-1] == f"batch: {COUNT}/{COUNT} runs stored"
    assert len(progress) <= 11
    assert f"batch        {batch}: {COUNT} of {COUNT} inputs stored as runs" in out
    assert "stop reasons converged 20" in out
    assert f"converge --store {store} runs" in out

    code, out = cli(*args, "--workers", "2", "--json")

    assert code == 0, out
    result = BatchResult.model_validate_json(out)
    assert result.ok
    assert result.batch_id == batch
    assert result.run_ids == tuple(expected)
    assert {run.action for run in result.runs} == {"kept"}
    assert result.counts() == {"converged": COUNT}
    assert sorted(stored_ids(store, f"{batch}-")) == sorted(expected)


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a `dask scheduler` with two `dask worker` processes, on 127.0.0.1."""
    from distributed import Client

    folder = tmp_path_factory.mktemp("dask")
    file = folder / "scheduler.json"
    env = {**os.environ, **ENV}
    scheduler_command = [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0"]
    worker_command = [str(DASK), "worker", "--scheduler-file", str(file), "--nworkers", "1"]
    processes = [
        subprocess.Popen(
            [*scheduler_command, "--scheduler-file", str(file), "--no-dashboard"],
            env=env,
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 30
        while not file.exists() or not file.read_text(encoding="utf-8").strip():
            assert time.monotonic() < deadline, "the scheduler wrote no scheduler file"
            assert processes[0].poll() is None, "the scheduler exited"
            time.sleep(0.1)
        for _ in range(2):
            processes.append(
                subprocess.Popen(
                    [*worker_command, "--nthreads", "1", "--no-dashboard"],
                    env=env,
                    cwd=folder,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        address: str = json.loads(file.read_text(encoding="utf-8"))["address"]
        with Client(address) as client:
            client.wait_for_workers(2, timeout=30)
        yield address
    finally:
        for process in reversed(processes):
            process.kill()
        for process in processes:
            process.wait(timeout=10)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_batch_on_an_existing_scheduler_stores_every_input_once(
    kind: str, chain_env: None, tmp_path: Path, scheduler: str
) -> None:
    target = str(tmp_path / "runs.db") if kind == "sqlite" else postgres_or_skip()
    inputs = write_inputs(tmp_path / "inputs.jsonl")
    batch = f"s{uuid.uuid4().hex[:8]}"

    code, out = cli(
        "--store", target, "batch", FORMATION, str(inputs), "--batch-id", batch,
        "--scheduler", scheduler, "--runs-per-worker", "4",
    )  # fmt: skip

    assert code == 0, out
    assert f"on scheduler {scheduler}" in out
    ids = stored_ids(target, f"{batch}-")
    assert sorted(ids) == sorted(f"{batch}-{i}" for i in range(COUNT))
    assert len(ids) == len(set(ids)) == COUNT


def test_a_malformed_line_fails_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = write_inputs(tmp_path / "inputs.jsonl", 4)
    lines = inputs.read_text(encoding="utf-8").splitlines()
    lines[2] = '{"inputs": [{"key": "seeds", "id": "x"}]}'
    inputs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = tmp_path / "runs.db"

    code, out = cli("--store", str(store), "batch", FORMATION, str(inputs))

    assert code == 1
    assert out == ""
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "line 3:" in errors[0]
    assert not store.exists()


def test_a_formation_that_raises_on_import_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text('raise RuntimeError("no formation today")\n', encoding="utf-8")
    inputs = write_inputs(tmp_path / "inputs.jsonl", 4)
    store = tmp_path / "runs.db"

    code, out = cli("--store", str(store), "batch", str(broken), str(inputs))

    assert code != 0
    assert code != BATCH_INCOMPLETE
    assert out == ""
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: formation {broken} failed to load: RuntimeError: no formation today"]
    assert not store.exists()


# --- one stored run per input, whatever the step does -------------------------------------------

STEPS_FILE = str(Path(__file__).resolve().parent / "batch_formation.py")
ROOT = Path(__file__).resolve().parents[2]


def steps_inputs(path: Path, contents: list[str]) -> Path:
    """INPUTS.jsonl for `batch_formation.py`: one input per content, in order."""
    lines = (
        json.dumps({"inputs": [json.loads(batch_seed(content).model_dump_json())]})
        for content in contents
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def converge_process(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`converge ARGS` in a child process running this worktree's package."""
    return subprocess.Popen(
        [sys.executable, "-m", "converge.cli", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def calls_of(log: Path) -> dict[str, list[str]]:
    """Each input's step calls, as the pids of the processes that made them."""
    found: dict[str, list[str]] = {}
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            content, pid = line.split("\t")
            found.setdefault(content, []).append(pid)
    return found


def records_of(target: str, run_ids: list[str]) -> dict[str, RunRecord]:
    async def read() -> dict[str, RunRecord]:
        store: RunStore = open_store_url(target)
        try:
            return {i: await store.load(i) for i in run_ids}
        finally:
            store.close()  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]

    return anyio.run(read)


def test_two_batches_whose_steps_block_the_loop_never_take_a_run_from_each_other(
    tmp_path: Path,
) -> None:
    """Two `converge batch` commands, one store, one --batch-id; each step blocks its event
    loop three times longer than --lease. Each input's steps run once, in one process."""
    log = tmp_path / "calls.log"
    contents = [f"case {index} block=3" for index in range(2)]
    inputs = steps_inputs(tmp_path / "inputs.jsonl", contents)
    store = str(tmp_path / "runs.db")
    batch = f"l{uuid.uuid4().hex[:8]}"
    env = {"CONVERGE_TEST_LOG": str(log), "CONVERGE_TEST_STEPS": "2"}
    args = (
        "--store", store, "batch", STEPS_FILE, str(inputs), "--batch-id", batch,
        "--workers", "1", "--lease", "1",
    )  # fmt: skip
    cli("--store", store, "runs")  # the store exists before the two commands race for it
    commands = [converge_process(*args, env=env) for _ in range(2)]
    try:
        ended = [command.communicate(timeout=120) for command in commands]
    finally:
        for command in commands:
            command.kill()
    codes = [command.returncode for command in commands]
    assert 0 in codes, ended
    for code, (out, err) in zip(codes, ended, strict=True):
        assert code in (0, BATCH_INCOMPLETE), (out, err)
        if code == BATCH_INCOMPLETE:  # gave up on runs the other command was running
            assert "still running elsewhere; not taken over" in out, out
    calls = calls_of(log)
    assert sorted(calls) == sorted(contents)
    for content, pids in calls.items():
        assert len(pids) == 2, (content, pids)  # two steps, each run once
        assert len(set(pids)) == 1, (content, pids)  # by one process
    expected = [f"{batch}-{index}" for index in range(2)]
    assert sorted(stored_ids(store, f"{batch}-")) == expected
    for record in records_of(store, expected).values():
        assert record.status is RunStatus.FINISHED
        assert record.trace.continuations == ()
