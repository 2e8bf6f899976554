"""Durable execution with real processes and real stores.

Each test drives the `converge` command (or `durable_worker.py`) in child processes against
one SQLite file, and against PostgreSQL when DATABASE_URL is set:

- a run killed with SIGKILL shows as running, then (its lease run out) as interrupted, and
  `converge resume` continues it to the root and facts of an uninterrupted run;
- two `converge resume` processes deciding one paused run: one wins, the other exits with
  the conflict status naming who decided, and the store holds the winner's decision only;
- two `converge resume` processes continuing one run its caller cancelled: one wins;
- PostgreSQL: a continuation whose claim queues behind another save of the run is stale;
- 8 processes x 100 runs saved after every cycle: no "database is locked", each run once.

Racing processes are released together once each has loaded the command
(`durable_worker.py cli`), so that they race for the run rather than for the CPU. The
references are in-process runs of the same formations; the chain's sleep only delays each
call, so its reference runs with no sleep. Every async test here runs on asyncio only: the
processes do the work, the test only waits for them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import pytest
from anyio.abc import ByteReceiveStream, Process
from durable_worker import chain_seed
from test_store import postgres_or_skip

from converge import (
    Continuation,
    ConvergeResult,
    Formation,
    GateDecision,
    PostgresRunStore,
    RunRecord,
    RunStatus,
    RunSummary,
    SqliteRunStore,
    StopReason,
    verify,
)
from converge._review import STALE
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
CHAIN = str(HERE / "durable_formation.py")
PLAN = str(HERE / "cli_formation.py")
WORKER = str(HERE / "durable_worker.py")
GATE = "gate:2:strategies/costly"
STEPS = 20
SLEEP = 0.1
LEASE = 1.0
NOTE = "note: importing formation "
RUN_ID = re.compile(r"[0-9a-f]{32}")

T = TypeVar("T")

pytestmark = pytest.mark.slow  # real processes, sleeps and leases: seconds each


@pytest.fixture
def anyio_backend() -> str:
    """The processes do the work; the test only waits for them, on asyncio."""
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """`(kind, store)`: a fresh SQLite file, or the PostgreSQL server of DATABASE_URL."""
    kind: str = request.param
    if kind == "sqlite":
        return kind, str(tmp_path / "runs.db")
    return kind, postgres_or_skip()


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No signing key or default store from the environment; reports go under tmp_path."""
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    monkeypatch.delenv("CONVERGE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


# --- formations and references ------------------------------------------------------------------


@contextmanager
def environment(values: Mapping[str, str]) -> Generator[None]:
    """`os.environ` with `values` set, restored afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def chain_env(steps: int, sleep: float) -> dict[str, str]:
    """What `durable_formation.py` reads: its length and the sleep in each call."""
    return {"CONVERGE_TEST_STEPS": str(steps), "CONVERGE_TEST_SLEEP": str(sleep)}


def load_formation(path: str, env: Mapping[str, str] | None = None) -> Formation:
    """The `formation` of a fresh import of the file at `path`, under `env`."""
    spec = importlib.util.spec_from_file_location(f"durable_test_{uuid.uuid4().hex}", path)
    assert spec is not None
    loader = spec.loader
    assert loader is not None
    module = importlib.util.module_from_spec(spec)
    with environment(env or {}):
        loader.exec_module(module)
    formation: object = module.formation
    assert isinstance(formation, Formation)
    return formation


def dumps(facts: Sequence[Any]) -> list[dict[str, Any]]:
    """Facts (or fact records) as plain dicts: key, id, content, promotion, digest..."""
    return [fact.model_dump() for fact in facts]


async def chain_reference(steps: int = STEPS) -> ConvergeResult:
    """The chain run in this process, uninterrupted."""
    result = await load_formation(CHAIN, chain_env(steps, 0)).run()
    assert result.converged
    return result


# --- processes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finished:
    """A child process that ended: its exit status and what it wrote."""

    code: int
    out: str
    err: str

    def errors(self) -> list[str]:
        """Its stderr lines, less the note that an unsigned record names the formation."""
        return [line for line in self.err.splitlines() if not line.startswith(NOTE)]


def subprocess_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with `extra`, no signing key and no default store."""
    env = {**os.environ, **extra}
    env.pop("CONVERGE_SIGNING_KEY", None)
    env.pop("CONVERGE_STORE", None)
    return env


async def start(command: Sequence[str], env: Mapping[str, str], cwd: Path) -> Process:
    """Start `command` with stdout and stderr piped."""
    return await anyio.open_process(
        list(command),
        env=subprocess_env(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def finish(process: Process) -> Finished:
    """Wait for `process`, reading its output as it comes."""
    out: list[bytes] = []
    err: list[bytes] = []

    async def drain(stream: ByteReceiveStream | None, into: list[bytes]) -> None:
        assert stream is not None
        async for chunk in stream:
            into.append(chunk)

    async with anyio.create_task_group() as group:
        group.start_soon(drain, process.stdout, out)
        group.start_soon(drain, process.stderr, err)
    code = await process.wait()
    return Finished(code, b"".join(out).decode(), b"".join(err).decode())


def converge_command(*args: str) -> list[str]:
    """The `converge` command line, run by this interpreter."""
    return [sys.executable, "-m", "converge.cli", *args]


async def together(
    commands: Sequence[Sequence[str]],
    env: Mapping[str, str],
    cwd: Path,
    *,
    ready: Sequence[Path] = (),
    go: Path | None = None,
) -> list[Finished]:
    """Start every command (all of them, before waiting for any), then wait for all.

    With `go`, create that file once every file of `ready` exists (or a process ended).
    """
    processes = [await start(command, env, cwd) for command in commands]
    results: list[Finished | None] = [None] * len(processes)

    async def wait(index: int) -> None:
        results[index] = await finish(processes[index])

    async with anyio.create_task_group() as group:
        for index in range(len(processes)):
            group.start_soon(wait, index)
        if go is not None:
            deadline = time.monotonic() + 60
            while not all([await anyio.Path(path).exists() for path in ready]):
                if any(result is not None for result in results):
                    break  # one ended before it was ready: release the others anyway
                assert time.monotonic() < deadline, "the processes never got ready"
                await anyio.sleep(0.01)
            await anyio.Path(go).touch()
    done = [result for result in results if result is not None]
    assert len(done) == len(processes)
    return done


async def converge_at_once(
    arguments: Sequence[Sequence[str]], env: Mapping[str, str], cwd: Path
) -> list[Finished]:
    """Run `converge ARGS` for each of `arguments` in its own process, all started at once.

    Each process loads the command, then waits for a common go (see `durable_worker.py`):
    without it, start-up time decides the race, and the loser nearly always finds the run
    already taken instead of racing for it.
    """
    name = uuid.uuid4().hex
    go = cwd / f"go-{name}"
    ready = [cwd / f"ready-{name}-{index}" for index in range(len(arguments))]
    commands = [
        [sys.executable, WORKER, "cli", str(path), str(go), *args]
        for path, args in zip(ready, arguments, strict=True)
    ]
    return await together(commands, env, cwd, ready=ready, go=go)


# --- the store, read the way another process would ----------------------------------------------


def reader(kind: str, store: str) -> SqliteRunStore | PostgresRunStore:
    """A new store object on `store` (read-only for SQLite)."""
    if kind == "sqlite":
        return SqliteRunStore(store, read_only=True)
    return PostgresRunStore(store)


async def stored(
    kind: str, store: str, use: Callable[[SqliteRunStore | PostgresRunStore], Awaitable[T]]
) -> T:
    """`use` a fresh store object on `store`, then close it."""
    opened = reader(kind, store)
    try:
        return await use(opened)
    finally:
        opened.close()


async def summaries(kind: str, store: str, limit: int = 1_000_000) -> tuple[RunSummary, ...]:
    """The latest `limit` stored runs, the latest first."""
    return tuple(await stored(kind, store, lambda s: s.list_runs(limit=limit)))


async def load(kind: str, store: str, run_id: str) -> RunRecord:
    """The stored record of `run_id`, as it stands now."""
    return await stored(kind, store, lambda s: s.load(run_id))


async def runs_line(store: str, run_id: str) -> list[str]:
    """The fields of `run_id`'s line in `converge runs` (the command, in this process)."""
    code, out = await anyio.to_thread.run_sync(cli, "--store", store, "runs", "--limit", "100000")
    assert code == 0
    lines = [line.split() for line in out.splitlines() if line.startswith(run_id)]
    assert len(lines) == 1, out
    return lines[0]


def sql_rows(
    kind: str, store: str, query: str, values: tuple[object, ...]
) -> list[tuple[Any, ...]]:
    """The rows of `query` (`?` placeholders) run directly against the store's tables."""
    if kind == "sqlite":
        connection = sqlite3.connect(f"{Path(store).absolute().as_uri()}?mode=ro", uri=True)
        try:
            return list(connection.execute(query, values).fetchall())
        finally:
            connection.close()
    import psycopg

    with psycopg.connect(store) as pg:
        return list(pg.execute(query.replace("?", "%s"), values).fetchall())  # pyright: ignore[reportArgumentType]


async def new_run(
    kind: str, store: str, before: set[str], process: Process | None, *, cycles: int
) -> RunSummary:
    """The one run not in `before`, once it has saved `cycles` cycles; running all along."""
    deadline = time.monotonic() + 30
    while True:
        latest = await summaries(kind, store, limit=20)  # a running run was saved last
        fresh = [s for s in latest if s.run_id not in before]
        assert len(fresh) <= 1, fresh
        if fresh:
            (run,) = fresh
            assert run.status is RunStatus.RUNNING, f"a live run looks {run.status}: {run}"
            if run.cycles >= cycles:
                return run
        if process is not None and process.returncode is not None:
            pytest.fail(f"the run ended (exit {process.returncode}) before {cycles} cycles")
        if time.monotonic() > deadline:
            pytest.fail(f"no run saved {cycles} cycles within 30 s")
        await anyio.sleep(0.03)


async def until_interrupted(kind: str, store: str, run_id: str) -> tuple[RunRecord, float]:
    """The record of `run_id` once it shows as interrupted, and how long that took."""
    started = time.monotonic()
    while True:
        record = await load(kind, store, run_id)
        waited = time.monotonic() - started
        if record.status is RunStatus.INTERRUPTED:
            return record, waited
        assert record.status is RunStatus.RUNNING, record.status
        if waited > 10 * LEASE:
            pytest.fail(f"run {run_id} still shows as running {waited:.1f} s after its kill")
        await anyio.sleep(0.05)


def assert_same_run(record: RunRecord, reference: ConvergeResult) -> None:
    """`record` finished where `reference` did: same root, clock, cycles and facts, each once."""
    assert record.status is RunStatus.FINISHED
    assert record.stop_reason is reference.stop_reason
    assert record.integrity == reference.integrity
    assert record.cycles == reference.cycles
    assert [cycle.cycle for cycle in record.trace.cycles] == list(range(1, reference.cycles + 1))
    assert dumps(record.facts) == dumps(reference.context.facts())
    keys = [(fact.key, fact.id) for fact in record.facts]
    assert len(set(keys)) == len(keys)
    assert verify(record.restore_context(), record.integrity)


# --- 1, 2. a run killed with SIGKILL ------------------------------------------------------------


async def test_a_run_killed_mid_run_shows_interrupted_and_resume_ends_at_the_same_root(
    target: tuple[str, str], tmp_path: Path
) -> None:
    kind, store = target
    env = chain_env(STEPS, SLEEP)
    # The store exists before the run starts: a read-only reader that opens a SQLite file
    # while another process is still creating its tables is told it is "not a converge
    # store" (a library bug of its own, not this test's subject).
    created = SqliteRunStore(store) if kind == "sqlite" else PostgresRunStore(store)
    await created.list_runs(limit=1)
    created.close()
    before = {s.run_id for s in await summaries(kind, store)}
    command = converge_command("--store", store, "run", CHAIN, "--lease", str(LEASE))
    process = await start(command, env, tmp_path)
    try:
        run_id = (await new_run(kind, store, before, process, cycles=5)).run_id
        process.kill()
        killed = await finish(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert killed.code == -signal.SIGKILL
    assert "saved run" not in killed.out  # it never got to the end

    running = await load(kind, store, run_id)
    assert running.status is RunStatus.RUNNING  # its lease has not run out yet
    assert running.stop_reason is None
    assert running.interruption is None
    assert 5 <= running.cycles < STEPS
    assert (await runs_line(store, run_id))[2] == "running"

    lost, waited = await until_interrupted(kind, store, run_id)
    assert waited <= LEASE + 2
    assert lost.interruption == "lost"
    assert lost.cycles == running.cycles
    assert (await runs_line(store, run_id))[2] == "interrupted"
    reference = await chain_reference()
    assert len(lost.facts) == lost.cycles + 1  # the seed and one step per saved cycle
    assert dumps(lost.facts) == dumps(reference.context.facts())[: len(lost.facts)]

    (resumed,) = await together(
        [converge_command("--store", store, "resume", run_id)], env, tmp_path
    )
    assert resumed.code == 0, resumed.err
    assert f"merkle root  {reference.integrity.merkle_root}" in resumed.out
    assert resumed.errors() == []
    record = await load(kind, store, run_id)
    assert_same_run(record, reference)
    assert record.trace.continuations == (Continuation(after_cycle=lost.cycles, cause="lost"),)


# --- 3. two people deciding one paused run at once ----------------------------------------------


DECIDERS = {
    "alice": ("--approve", GATE, "--by", "alice"),
    "bob": ("--reject", GATE, "--by", "bob", "--reason", "too costly"),
}


async def decided_references() -> dict[str, ConvergeResult]:
    """The paused plan decided in this process, by alice (approve) and by bob (reject)."""
    plan = load_formation(PLAN)
    paused = await plan.run()
    assert paused.checkpoint is not None
    decisions = {
        "alice": GateDecision.approve(GATE, by="alice"),
        "bob": GateDecision.reject(GATE, by="bob", reason="too costly"),
    }
    references = {
        who: await plan.engine().resume(paused.checkpoint, [decision])
        for who, decision in decisions.items()
    }
    assert references["alice"].integrity != references["bob"].integrity
    return references


async def test_two_resumes_of_one_paused_run_one_wins_and_only_its_decision_is_stored(
    target: tuple[str, str], tmp_path: Path
) -> None:
    kind, store = target
    references = await decided_references()
    for round_ in range(3):
        paused = await together([converge_command("--store", store, "run", PLAN)], {}, tmp_path)
        assert paused[0].code == 6, paused[0].err
        run_id = run_id_of(paused[0].out)
        order = ["alice", "bob"] if round_ % 2 == 0 else ["bob", "alice"]
        arguments = [("--store", store, "resume", run_id, *DECIDERS[who]) for who in order]
        outcome = dict(zip(order, await converge_at_once(arguments, {}, tmp_path), strict=True))

        codes = sorted(done.code for done in outcome.values())
        assert codes == [0, STALE], {who: (d.code, d.err) for who, d in outcome.items()}
        (winner,) = [who for who, done in outcome.items() if done.code == 0]
        (loser,) = [who for who, done in outcome.items() if done.code == STALE]
        verb = "approved" if winner == "alice" else "rejected"
        errors = outcome[loser].errors()
        assert len(errors) == 1, outcome[loser].err
        assert errors[0].startswith(f"error: run {run_id} ")
        assert f"decided by {winner}: {verb} {GATE}" in errors[0]
        assert loser not in errors[0]
        assert outcome[loser].out.count("saved run") == 0
        assert f"saved run    {run_id}" in outcome[winner].out
        assert outcome[winner].errors() == []

        record = await load(kind, store, run_id)
        (decision,) = record.trace.decisions
        assert (decision.by, decision.gate_id, decision.approved) == (
            winner,
            GATE,
            winner == "alice",
        )
        assert record.status is RunStatus.FINISHED
        assert record.stop_reason is references[winner].stop_reason
        assert record.integrity == references[winner].integrity
        assert dumps(record.facts) == dumps(references[winner].context.facts())


# --- 4. two processes continuing one run its caller cancelled -----------------------------------


async def cancelled_run(kind: str, store: str) -> RunRecord:
    """A chain run cancelled by its caller (`move_on_after`) in this process, as stored."""
    before = {s.run_id for s in await summaries(kind, store)}
    chain = load_formation(CHAIN, chain_env(STEPS, SLEEP))
    writer = SqliteRunStore(store) if kind == "sqlite" else PostgresRunStore(store)
    try:
        with anyio.move_on_after(0.55) as scope:
            await chain.engine(store=writer, formation=CHAIN).run(inputs=chain.inputs)
    finally:
        writer.close()
    assert scope.cancelled_caught
    (summary,) = [s for s in await summaries(kind, store) if s.run_id not in before]
    assert summary.status is RunStatus.INTERRUPTED  # at once: no lease to wait for
    cancelled = await load(kind, store, summary.run_id)
    assert cancelled.status is RunStatus.INTERRUPTED
    assert cancelled.interruption == "cancelled"
    assert 2 <= cancelled.cycles <= STEPS - 10
    return cancelled


async def test_two_continuations_of_one_cancelled_run_one_wins_with_the_uninterrupted_root(
    target: tuple[str, str], tmp_path: Path
) -> None:
    kind, store = target
    env = chain_env(STEPS, SLEEP)
    reference = await chain_reference()
    for _ in range(2):
        cancelled = await cancelled_run(kind, store)
        run_id = cancelled.run_id
        assert dumps(cancelled.facts) == dumps(reference.context.facts())[: len(cancelled.facts)]

        arguments = ("--store", store, "resume", run_id)
        first, second = await converge_at_once([arguments, arguments], env, tmp_path)
        assert sorted((first.code, second.code)) == [0, STALE], (first, second)
        winner, loser = (first, second) if first.code == 0 else (second, first)
        assert f"merkle root  {reference.integrity.merkle_root}" in winner.out
        errors = loser.errors()
        assert len(errors) == 1, loser.err
        assert errors[0].startswith(f"error: run {run_id} ")
        assert "saved run" not in loser.out

        record = await load(kind, store, run_id)
        assert_same_run(record, reference)
        assert record.trace.continuations == (
            Continuation(after_cycle=cancelled.cycles, cause="cancelled"),
        )


WAITING_FOR_THE_ROW = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
    "AND query LIKE 'UPDATE converge_runs%' AND pid <> pg_backend_pid()"
)


async def test_a_continuation_whose_claim_waits_on_another_save_exits_with_the_conflict_status(
    tmp_path: Path,
) -> None:
    """PostgreSQL: the loser of a race whose save queued behind the winner's transaction.

    The test is the winner: it saves the interrupted run (its version + 1) in a transaction
    it keeps open until the `converge resume` process's claim waits on the run's row, then
    commits. The claim must fail as stale (exit 8, one line) and save nothing.
    """
    store = postgres_or_skip()
    import psycopg

    cancelled = await cancelled_run("postgres", store)
    run_id = cancelled.run_id
    command = converge_command("--store", store, "resume", run_id)
    with psycopg.connect(store) as winner, psycopg.connect(store, autocommit=True) as watch:
        winner.execute(
            "UPDATE converge_runs SET version = version + 1 WHERE run_id = %s", (run_id,)
        )
        process = await start(command, chain_env(STEPS, SLEEP), tmp_path)
        try:
            deadline = time.monotonic() + 30
            while process.returncode is None:
                row = watch.execute(WAITING_FOR_THE_ROW).fetchone()
                if row is not None and row[0] > 0:
                    break
                assert time.monotonic() < deadline, "the resume never waited on the run's row"
                await anyio.sleep(0.01)
            winner.commit()
            loser = await finish(process)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert loser.code == STALE, loser.err
    errors = loser.errors()
    assert len(errors) == 1, loser.err
    assert errors[0].startswith(f"error: run {run_id} ")
    assert f"since version {cancelled.version} " in errors[0]

    record = await load("postgres", store, run_id)
    assert record.status is RunStatus.INTERRUPTED
    assert record.version == cancelled.version + 1  # the winner's save, and nothing else
    assert record.cycles == cancelled.cycles
    assert record.trace.continuations == ()


# --- 5. eight writer processes, a hundred runs each ---------------------------------------------


WRITERS = 8
RUNS = 100
SHORT = 3


async def expected_version(tmp_path: Path) -> int:
    """The version of one short chain run saved after every cycle (one per save)."""
    store = SqliteRunStore(tmp_path / "version.db")
    try:
        chain = load_formation(CHAIN, chain_env(SHORT, 0))
        result = await chain.engine(store=store, durability="cycle").run(inputs=chain.inputs)
        version = (await store.load(result.run_id)).version
    finally:
        store.close()
    assert version > 2  # a save per cycle, not one at the end
    return version


async def test_eight_processes_saving_a_hundred_runs_each_after_every_cycle(
    target: tuple[str, str], tmp_path: Path
) -> None:
    kind, store = target
    tag = f"durable-{uuid.uuid4().hex[:12]}"
    env = chain_env(SHORT, 0)
    commands = [
        [sys.executable, WORKER, kind, store, tag, str(worker), str(RUNS)]
        for worker in range(WRITERS)
    ]
    done = await together(commands, env, tmp_path)

    printed: dict[str, tuple[int, int]] = {}
    for worker, finished in enumerate(done):
        assert "database is locked" not in finished.out + finished.err
        assert finished.code == 0, finished.err
        assert finished.err == ""
        lines = finished.out.splitlines()
        assert len(lines) == RUNS, finished.out
        assert all(RUN_ID.fullmatch(line) for line in lines), finished.out
        printed.update({run_id: (worker, index) for index, run_id in enumerate(lines)})
    assert len(printed) == WRITERS * RUNS

    chain = load_formation(CHAIN, env)
    roots = {
        run_id: (await chain.engine().run(inputs=[chain_seed(tag, *at)])).integrity.merkle_root
        for run_id, at in printed.items()
    }
    assert len(set(roots.values())) == WRITERS * RUNS  # every run's facts are its own
    version = await expected_version(tmp_path)

    rows = await anyio.to_thread.run_sync(
        sql_rows,
        kind,
        store,
        "SELECT run_id, status, stop_reason, merkle_root, version, fact_count "
        "FROM converge_runs WHERE name = ?",
        (tag,),
    )
    assert len(rows) == WRITERS * RUNS
    assert {row[0] for row in rows} == set(printed)
    for run_id, status, stop_reason, root, saved_version, fact_count in rows:
        assert (status, stop_reason, root) == ("finished", "converged", roots[run_id])
        assert (saved_version, fact_count) == (version, SHORT + 1)
    layouts = await anyio.to_thread.run_sync(
        sql_rows,
        kind,
        store,
        "SELECT layout, count(*) FROM converge_runs WHERE name = ? GROUP BY layout",
        (tag,),
    )
    assert layouts == [("rows", WRITERS * RUNS)]  # each keeps its journal under its head

    listed = [s for s in await summaries(kind, store) if s.name == tag]
    assert len(listed) == WRITERS * RUNS
    assert all(s.status is RunStatus.FINISHED for s in listed)
    assert all(s.stop_reason is StopReason.CONVERGED for s in listed)
