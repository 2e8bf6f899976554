"""`converge batch`: one run per input line on a real Dask cluster.

The formation is the chain of `durable_formation.py`, three steps and no sleep: it reads them
from the environment when imported, so the variables are set before any cluster starts and
the worker processes inherit them (the `dask worker` processes get them explicitly).

- `--workers 2` (a `LocalCluster`), 20 inputs into SQLite: exit 0, runs `BATCH-0..19`, each
  with the Merkle root of the same inputs run in-process; the same `--batch-id` again with
  `--json` keeps every run (a `BatchResult`, every run "kept", no new row);
- `--scheduler ADDRESS` of a `dask scheduler` and two `dask worker` processes, into SQLite and
  into PostgreSQL (DATABASE_URL): exit 0, every input stored once;
- a malformed input line, and a formation that raises on import: one error line, exit 1,
  nothing stored and no cluster started;
- with `batch_formation.py` (each input says what its step does): two commands on one
  --batch-id whose steps block the event loop past --lease never take a run from each other;
  runs that converged with failures are counted, listed and exit 9 (`runs` shows them); a
  changed line is refused, or run as a new run with --rerun-changed; a scheduler without
  workers (or unreachable) fails after --connect-timeout; after Ctrl-C no progress line
  counts more runs than the store holds; an input that kills its worker is left interrupted
  and reported, its shard-mates stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from converge import ContextKey, ProposedFact, RunRecord, RunStatus
from converge._cli._output import BATCH_INCOMPLETE, FAILURES
from converge._core._store import RunStore
from converge._formation import load_formation
from converge._scale._batch import BatchResult, open_store_url
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


def test_batch_reports_runs_that_converged_with_failures_and_exits_9(tmp_path: Path) -> None:
    """Every call of input 1 fails and the first of input 2: `converge run` exits 9 on such
    a run; the batch says so, lists them with their first failure, and exits 9."""
    contents = ["case 0", "case 1 fail", "case 2 fail-once", "case 3"]
    inputs = steps_inputs(tmp_path / "inputs.jsonl", contents)
    store = str(tmp_path / "runs.db")
    batch = f"f{uuid.uuid4().hex[:8]}"
    args = ("--store", store, "batch", STEPS_FILE, str(inputs), "--batch-id", batch)

    code, out = cli(*args, "--workers", "1")

    assert code == FAILURES, out
    assert "stop reasons converged 2, converged with failures 2" in out
    assert "with failures 2 run(s) converged with failed calls or rolled-back effects:" in out
    first = "RuntimeError: model unreachable at step 0: connection refused"
    assert f"  line 2 ({batch}-1): 1 failure(s), first step (execute, cycle 1, failed): " in out
    assert f"  line 3 ({batch}-2): 1 failure(s), first step (execute, cycle 1, failed): " in out
    assert out.count(first) == 2
    assert "converged, but with failures: exit status 9 (--allow-failures exits 0)" in out

    code, out = cli(*args, "--workers", "1", "--json")

    assert code == FAILURES
    result = BatchResult.model_validate_json(out)
    assert result.complete
    assert not result.ok
    assert [run.failures for run in result.runs] == [0, 1, 1, 0]
    assert [run.index for run in result.with_failures] == [1, 2]
    assert result.runs[1].first_failure is not None
    assert first in result.runs[1].first_failure
    assert result.counts() == {"converged": 2, "converged_with_failures": 2}

    code, out = cli(*args, "--workers", "1", "--allow-failures")
    assert code == 0, out
    assert "converged, but with failures" not in out

    code, listing = cli("--store", store, "runs")
    assert code == 0
    rows = {line.split()[0]: line for line in listing.splitlines()}
    assert "converged, 1 failure " in rows[f"{batch}-1"]
    assert "converged " in rows[f"{batch}-0"]
    assert "failure" not in rows[f"{batch}-0"]
    code, listing = cli("--store", store, "runs", "--json")
    counts = {run["run_id"]: run["failures"] for run in json.loads(listing)}
    assert [counts[f"{batch}-{index}"] for index in range(4)] == [0, 1, 1, 0]

    # the same run on its own: `converge run` calls it converged with failures too
    code, _ = cli("--store", store, "run", STEPS_FILE, "--json")
    assert code == 0  # its default input does not fail
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVERGE_TEST_INPUT", "case 1 fail")
        code, _ = cli("--store", store, "run", STEPS_FILE, "--json")
    assert code == FAILURES


def test_batch_refuses_a_changed_input_line_or_reruns_it_as_a_new_run(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    contents = ["case 0", "case 1", "case 2"]
    inputs = steps_inputs(tmp_path / "inputs.jsonl", contents)
    store = str(tmp_path / "runs.db")
    batch = f"c{uuid.uuid4().hex[:8]}"
    args = ("--store", store, "batch", STEPS_FILE, str(inputs), "--batch-id", batch)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVERGE_TEST_LOG", str(log))
        code, out = cli(*args, "--workers", "1")
        assert code == 0, out
        steps_inputs(inputs, ["case 0", "case 1 changed", "case 2"])

        code, out = cli(*args, "--workers", "1")

        assert code == BATCH_INCOMPLETE, out
        assert "batch        " + f"{batch}: 2 of 3 inputs stored as runs" in out
        refused = [line for line in out.splitlines() if line.startswith("  line 2 ")]
        assert refused == [
            f"  line 2 ({batch}-1): InputChangedError: input 1 is not the one run {batch}-1 "
            "was stored with (changed since); kept as stored, not run (--rerun-changed runs "
            "it as a new run)"
        ]
        assert "case 1 changed" not in calls_of(log)
        stored = records_of(store, [f"{batch}-1"])[f"{batch}-1"]
        assert stored.trace.inputs[0].content == "case 1"

        code, out = cli(*args, "--workers", "1", "--rerun-changed", "--json")

        assert code == 0, out
        result = BatchResult.model_validate_json(out)
        new_id = result.runs[1].run_id
        assert new_id.startswith(f"{batch}-1-")
        assert result.runs[1].action == "started"
        assert [run.action for run in (result.runs[0], result.runs[2])] == ["kept", "kept"]
        assert calls_of(log)["case 1 changed"]  # it ran, once, as the new run
        records = records_of(store, [f"{batch}-1", new_id])
        assert records[f"{batch}-1"].trace.inputs[0].content == "case 1"  # the old one kept
        assert records[new_id].trace.inputs[0].content == "case 1 changed"

        code, out = cli(*args, "--workers", "1", "--rerun-changed")

        assert code == 0, out
        assert f"  line 2: {new_id}" in out  # listed under "changed", and kept
        assert len(calls_of(log)["case 1 changed"]) == 2  # two steps, once: not run again
    assert sorted(stored_ids(store, f"{batch}-")) == sorted(
        [f"{batch}-0", f"{batch}-1", f"{batch}-2", new_id]
    )


def dask_scheduler(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A `dask scheduler` on 127.0.0.1 with no worker, and its address."""
    file = folder / "scheduler.json"
    process = subprocess.Popen(
        [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(file)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not file.exists() or not file.read_text(encoding="utf-8").strip():
        assert time.monotonic() < deadline, "the scheduler wrote no scheduler file"
        assert process.poll() is None, "the scheduler exited"
        time.sleep(0.1)
    return process, json.loads(file.read_text(encoding="utf-8"))["address"]


def test_batch_on_a_scheduler_without_workers_fails_after_the_connect_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = steps_inputs(tmp_path / "inputs.jsonl", ["case 0"])
    store = str(tmp_path / "runs.db")
    process, address = dask_scheduler(tmp_path)
    try:
        started = time.monotonic()
        code, _ = cli(
            "--store", store, "batch", STEPS_FILE, str(inputs), "--scheduler", address,
            "--connect-timeout", "3",
        )  # fmt: skip
        took = time.monotonic() - started
    finally:
        process.kill()
        process.wait(timeout=10)
    assert code == 1
    assert 3 <= took < 30
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: scheduler {address} has no workers: none joined within 3 s"]

    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        nowhere = f"tcp://127.0.0.1:{free.getsockname()[1]}"
    started = time.monotonic()
    code, _ = cli(
        "--store", store, "batch", STEPS_FILE, str(inputs), "--scheduler", nowhere,
        "--connect-timeout", "2",
    )  # fmt: skip
    assert code == 1
    assert time.monotonic() - started < 30
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"error: cannot reach the scheduler at {nowhere} within 2 s: ")


def finished_rows(store: str, batch: str) -> int:
    try:
        with closing(sqlite3.connect(store, timeout=5)) as db, db:
            row = db.execute(
                "SELECT count(*) FROM converge_runs WHERE run_id LIKE ? AND status = 'finished'",
                (f"{batch}-%",),
            ).fetchone()
    except sqlite3.OperationalError:  # no table yet
        return 0
    return int(row[0])


def test_batch_interrupted_by_sigint_counts_only_the_runs_stored(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the command's process group) mid-batch: exit 130, and no progress
    line counts more runs than the store holds."""
    count = 30
    inputs = steps_inputs(tmp_path / "inputs.jsonl", [f"case {i} block=0.2" for i in range(count)])
    store = str(tmp_path / "runs.db")
    cli("--store", store, "runs")
    batch = f"i{uuid.uuid4().hex[:8]}"
    command = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "batch", STEPS_FILE,
         str(inputs), "--batch-id", batch, "--workers", "2", "--runs-per-worker", "1"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while finished_rows(store, batch) < 6:
            assert time.monotonic() < deadline, "no run was stored"
            assert command.poll() is None, command.communicate()
            time.sleep(0.05)
        os.killpg(command.pid, signal.SIGINT)
        out, err = command.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    assert command.returncode == 130, err
    stored = finished_rows(store, batch)
    assert stored < count
    shown = [
        int(line.split()[1].split("/")[0])
        for line in out.splitlines()
        if line.startswith("batch: ")
    ]
    assert shown
    assert max(shown) <= stored, (shown, stored)


def test_batch_stores_a_poisoned_input_as_failed_and_its_shard_mates_as_stored(
    tmp_path: Path,
) -> None:
    """An input whose step ends its worker process (`os._exit`): it runs as many times as
    Dask lets a task's worker die (3), is left interrupted (never `running`), and is the only
    input reported failed; the inputs of its shard are stored and counted so."""
    log = tmp_path / "calls.log"
    contents = ["case 0", "case 1", "case 2 exit", "case 3", "case 4", "case 5"]
    inputs = steps_inputs(tmp_path / "inputs.jsonl", contents)
    store = str(tmp_path / "runs.db")
    batch = f"p{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVERGE_TEST_LOG", str(log))
        code, out = cli(
            "--store", store, "batch", STEPS_FILE, str(inputs), "--batch-id", batch,
            "--workers", "2", "--runs-per-worker", "2", "--lease", "1",
        )  # fmt: skip
    assert code == BATCH_INCOMPLETE, out
    assert f"batch        {batch}: 5 of 6 inputs stored as runs" in out
    failed = [line for line in out.splitlines() if line.startswith("  line ")]
    assert failed == [
        f"  line 3 ({batch}-2): RuntimeError: run {batch}-2 was lost 3 times: its process died "
        "each time it ran (a poisoned input?); left interrupted after cycle 0, not continued "
        "again"
    ]
    progress = [line for line in out.splitlines() if line.startswith("batch: ")]
    assert progress[-1] == "batch: 5/6 runs stored"
    calls = calls_of(log)
    assert len(calls["case 2 exit"]) == 3
    records = records_of(store, [f"{batch}-{index}" for index in range(6)])
    assert records[f"{batch}-2"].status is RunStatus.INTERRUPTED
    assert [c.cause for c in records[f"{batch}-2"].trace.continuations] == ["lost", "lost"]
    for index in (0, 1, 3, 4, 5):
        assert records[f"{batch}-{index}"].status is RunStatus.FINISHED
        # at most lost once, in flight beside it before anything was suspect: never again
        assert len(records[f"{batch}-{index}"].trace.continuations) <= 1
    code, listing = cli("--store", store, "runs")
    assert f"{batch}-2 " in listing
    row = next(line for line in listing.splitlines() if line.startswith(f"{batch}-2 "))
    assert " interrupted " in row


def test_a_batch_with_a_signing_key_stores_signed_runs_and_refuses_a_forged_one(
    chain_env: None, tmp_path: Path
) -> None:
    """The key read from --key-file reaches the workers: every run is signed and verifies,
    and a stored run forged in the store is not reported as kept on a rerun."""
    inputs = write_inputs(tmp_path / "inputs.jsonl", count=4)
    store = str(tmp_path / "runs.db")
    key_file = tmp_path / "key"
    key_file.write_text("batch-secret\n")
    batch = f"b{uuid.uuid4().hex[:8]}"
    args = ("--store", store, "--key-file", str(key_file), "batch", FORMATION, str(inputs))
    args += ("--batch-id", batch, "--workers", "1")

    code, out = cli(*args)

    assert code == 0, out
    for index in range(4):
        reader = ("--store", store, "--key-file", str(key_file))
        code, said = cli(*reader, "verify", f"{batch}-{index}")
        assert code == 0, said
        assert said.endswith("; signature verified\n"), said
    with closing(sqlite3.connect(store)) as connection, connection:
        (text,) = connection.execute(
            "SELECT record FROM converge_runs WHERE run_id = ?", (f"{batch}-1",)
        ).fetchone()
        connection.execute(
            "UPDATE converge_runs SET record = ? WHERE run_id = ?",
            (text.replace('"fixed point reached"', '"forged"'), f"{batch}-1"),
        )

    code, out = cli(*args, "--json")

    assert code == 10, out
    result = BatchResult.model_validate_json(out)
    [failure] = result.failures
    assert failure.index == 1
    assert "bad signature" in failure.error
    assert {run.action for run in result.runs} == {"kept"}
