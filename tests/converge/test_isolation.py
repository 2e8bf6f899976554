"""Isolated suggestors: built and called in worker processes (`converge.isolated`).

The suggestors live in `isolated_suggestors.py`, imported by the workers only (by locator).
A run with isolated suggestors promotes what the same run in process promotes, with the same
root; what a worker cannot do (find the signing key, change the engine's facts, outlive its
timeout, take the run down by crashing) is shown by suggestors that try.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import anyio
import pytest
from hitl_formation import SIGNING_KEY, build_engine
from isolated_suggestors import Counter, Declining, Echo, Spinner

from converge import (
    Budget,
    ConfigurationError,
    ContextKey,
    ConvergeResult,
    CycleFinished,
    Engine,
    EngineEvent,
    Execution,
    GateDecision,
    HitlPolicy,
    RetryPolicy,
    RunRecord,
    StopReason,
    Suggestor,
    SuggestorFailed,
    SuggestorFinished,
    WorkerError,
    WorkerPool,
    isolated,
    render_report,
    verify,
)
from converge._isolation._guard import scrubbed_environment
from converge._isolation._pool import ProcessPool
from converge._isolation._suggestor import CANCELLED
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor

H = ContextKey.HYPOTHESES
GATE = "gate:2:strategies/costly"
MODULE = "isolated_suggestors"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """Two workers shared by the module's tests, as a process shares its default pool."""
    shared = WorkerPool(2)
    yield shared
    shared.close()


def _seeds() -> list[Suggestor]:
    return [SeedSuggestor("a", "alpha"), SeedSuggestor("b", "beta")]


async def _run(*suggestors: Suggestor, **options: object) -> ConvergeResult:
    engine = Engine(**options)  # pyright: ignore[reportArgumentType]
    for suggestor in (*_seeds(), *suggestors):
        engine.register_suggestor(suggestor)
    return await engine.run()


def _calls(result: ConvergeResult, name: str) -> list[Execution]:
    return [e for c in result.trace.cycles for e in c.executions if e.suggestor == name]


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# -- the same run, in process and isolated ---------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 3])
async def test_an_isolated_run_promotes_what_the_same_run_in_process_does(workers: int) -> None:
    pool = WorkerPool(workers)
    try:
        isolated_run = await _run(
            pool.isolated(f"{MODULE}:Echo", name="echo"),
            pool.isolated(f"{MODULE}:Counter", name="counter", until=4),
            pool.isolated(f"{MODULE}:Declining"),
            pool.isolated(f"{MODULE}:make_echo", name="shout"),
        )
    finally:
        pool.close()
    in_process = await _run(
        Echo(name="echo"), Counter(name="counter", until=4), Declining(), Echo("shout", "shout")
    )
    assert isolated_run.stop_reason is StopReason.CONVERGED
    assert isolated_run.failures == ()
    assert isolated_run.integrity.merkle_root == in_process.integrity.merkle_root
    assert isolated_run.cycles == in_process.cycles
    assert [f.ref for f in isolated_run.context.facts()] == [
        f.ref for f in in_process.context.facts()
    ]
    assert [c.promoted for c in isolated_run.trace.cycles] == [
        c.promoted for c in in_process.trace.cycles
    ]
    # what the counter saw in its worker is what it saw in process, cycle by cycle
    assert [f.content for f in isolated_run.context.get(H) if f.provenance == "counter"] == [
        f.content for f in in_process.context.get(H) if f.provenance == "counter"
    ]
    assert verify(isolated_run.context, isolated_run.integrity)


async def test_each_call_records_the_pid_of_its_worker(pool: WorkerPool) -> None:
    result = await _run(pool.isolated(f"{MODULE}:Echo"))
    [call] = _calls(result, "echo")
    assert call.outcome == "ok"
    assert isinstance(call.metadata, dict)
    assert call.metadata["worker_pid"] in pool.pids
    assert call.metadata["worker_pid"] != os.getpid()


async def test_events_and_the_report_show_the_worker_of_each_call(pool: WorkerPool) -> None:
    seen: list[EngineEvent] = []

    class Keep:
        def on_event(self, event: EngineEvent, /) -> None:
            seen.append(event)

    result = await _run(
        pool.isolated(f"{MODULE}:Echo"),
        pool.isolated(f"{MODULE}:Misbehaver", how="os-exit"),
        observers=[Keep()],
    )
    finished = [e for e in seen if isinstance(e, SuggestorFinished) and e.suggestor == "echo"]
    failed = [e for e in seen if isinstance(e, SuggestorFailed)]
    assert [e.suggestor for e in failed] == ["misbehaver"]
    [call] = finished
    assert isinstance(call.metadata, dict)
    assert call.metadata["worker_pid"] not in (None, os.getpid())
    assert isinstance(failed[0].metadata, dict)
    assert failed[0].metadata["worker_pid"] not in pool.pids  # killed (and not lent again)
    killed = failed[0].metadata["kill_reason"]
    assert killed == "exited with status 7"
    assert '"kill_reason":"exited with status 7"' in failed[0].model_dump_json()
    page = render_report(RunRecord.of(result))
    assert f"in worker process {call.metadata['worker_pid']}" in page
    assert "killed: exited with status 7" in page


async def test_a_suggestor_that_never_accepts_runs_no_execute_and_promotes_nothing(
    pool: WorkerPool,
) -> None:
    result = await _run(pool.isolated(f"{MODULE}:Declining"))
    assert result.failures == ()
    assert [call.proposals for call in _calls(result, "declining")] == [0]


async def test_workers_are_reused_across_runs(pool: WorkerPool) -> None:
    before = set(pool.pids)
    for _ in range(3):
        result = await _run(pool.isolated(f"{MODULE}:Echo"))
        assert result.failures == ()
    assert set(pool.pids) == before


async def test_isolated_calls_of_one_cycle_run_at_once_in_separate_workers() -> None:
    pool = WorkerPool(2)
    try:
        result = await _run(
            pool.isolated(f"{MODULE}:Spinner", name="one", seconds=0.3),
            pool.isolated(f"{MODULE}:Spinner", name="two", seconds=0.3),
        )
    finally:
        pool.close()
    calls = _calls(result, "one") + _calls(result, "two")
    walls: list[tuple[float, float]] = []
    pids: set[object] = set()
    for call in calls:
        assert isinstance(call.metadata, dict)
        start, end = cast("list[float]", call.metadata["wall"])
        walls.append((start, end))
        pids.add(call.metadata["worker_pid"])
    assert len(pids) == 2
    (first_start, first_end), (second_start, second_end) = sorted(walls)
    assert second_start < first_end, "the second call started only after the first ended"
    assert (
        result.integrity.merkle_root
        == (await _run(Spinner("one", 0.0), Spinner("two", 0.0))).integrity.merkle_root
    )
    assert first_start < second_end


async def test_a_paused_run_of_isolated_suggestors_resumes_as_in_process(
    pool: WorkerPool,
) -> None:
    """The resume may meet other workers (another pool here): they get the whole context."""
    in_process = build_engine()
    paused = await in_process.run()
    assert paused.checkpoint is not None
    expected = await in_process.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])

    def engine_of(workers: WorkerPool) -> Engine:
        engine = Engine(
            hitl=HitlPolicy(confidence_below=0.5), signing_key=SIGNING_KEY, record_effects=True
        )
        engine.register_suggestor(SeedSuggestor("budget", "Pick a plan within budget"))
        engine.register_suggestor(workers.isolated("hitl_formation:Recommender"))
        engine.register_suggestor(
            ReactOnceSuggestor(
                "plan-noted",
                "A plan is on the table",
                source=ContextKey.STRATEGIES,
                target=ContextKey.EVALUATIONS,
            )
        )
        return engine

    isolated_paused = await engine_of(pool).run()
    assert isolated_paused.checkpoint is not None
    assert isolated_paused.pending == paused.pending
    other = WorkerPool(1)
    try:
        resumed = await engine_of(other).resume(
            isolated_paused.checkpoint, [GateDecision.approve(GATE, by="jane")]
        )
    finally:
        other.close()
    assert resumed.converged
    assert resumed.failures == ()
    assert resumed.integrity.merkle_root == expected.integrity.merkle_root
    assert [f.ref for f in resumed.context.facts()] == [f.ref for f in expected.context.facts()]
    # and the recorded run replays without any worker
    replayed = await engine_of(pool).replay(resumed.trace)
    assert replayed.integrity.merkle_root == resumed.integrity.merkle_root


async def test_a_resumed_run_keeps_the_killed_worker_of_a_call_before_the_pause(
    pool: WorkerPool,
) -> None:
    engine = Engine(
        hitl=HitlPolicy(confidence_below=0.5),
        signing_key=SIGNING_KEY,
        record_effects=True,
        suggestor_timeout=1.0,
    )
    engine.register_suggestor(SeedSuggestor("budget", "Pick a plan within budget"))
    engine.register_suggestor(pool.isolated("hitl_formation:Recommender"))
    engine.register_suggestor(pool.isolated(f"{MODULE}:Misbehaver", how="hang", seconds=60.0))
    paused = await engine.run()
    assert paused.checkpoint is not None
    [before] = _calls(paused, "misbehaver")
    assert before.outcome == "timed_out"
    assert isinstance(before.metadata, dict)
    assert before.metadata["kill_reason"] == CANCELLED
    resumed = await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    assert resumed.converged
    assert _calls(resumed, "misbehaver")[0] == before


async def test_a_fork_of_an_isolated_run_reaches_the_parent_root(pool: WorkerPool) -> None:
    """The fork's context is rebuilt from the record: new objects, so each worker is sent it
    whole before the fork's first call, and goes on from there."""

    def engine() -> Engine:
        forked = Engine()
        for suggestor in (
            *_seeds(),
            pool.isolated(f"{MODULE}:Echo"),
            pool.isolated(f"{MODULE}:Counter", until=4),
        ):
            forked.register_suggestor(suggestor)
        return forked

    parent = await engine().run()
    assert parent.failures == ()
    fork = await engine().fork(RunRecord.of(parent), at_cycle=2)
    assert fork.failures == ()
    ran = [
        c.cycle for c in fork.trace.cycles if any(e.suggestor == "counter" for e in c.executions)
    ]
    assert ran
    assert min(ran) == 3  # the fork's own calls, in workers
    assert all(call.outcome == "ok" for call in _calls(fork, "counter"))
    assert fork.integrity.merkle_root == parent.integrity.merkle_root
    assert fork.lineage is not None
    assert (fork.lineage.parent_run_id, fork.lineage.at_cycle) == (parent.run_id, 2)


# -- the context goes as a delta -------------------------------------------------------------


async def test_a_worker_is_sent_only_the_facts_it_has_not_seen() -> None:
    first = await _run(Echo())
    worker = ProcessPool(1).spawn()
    try:
        reset, facts, problem = worker.delta(first.context)
        assert (reset, len(facts), problem) == (False, 4, None)  # a new copy: all of it
        assert worker.delta(first.context) == (False, [], None)
        engine = Engine()
        engine.register_suggestor(Echo("more", "more"))
        grown = (await engine.run(context=first.context)).context
        reset, facts, _ = worker.delta(grown)
        assert (reset, [cast("dict[str, object]", f)["id"] for f in facts]) == (
            False,
            ["more-a", "more-b"],
        )
        # a context of another line (another run) starts the copy again
        reset, facts, _ = worker.delta((await _run(Echo())).context)
        assert (reset, len(facts)) == (True, 4)
    finally:
        worker.kill()


# -- what a worker cannot do ----------------------------------------------------------------


async def test_a_worker_finds_no_signing_key_anywhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The key is in the engine's environment, in its memory and in a file the engine holds
    open as an inheritable descriptor: the worker reads none of them."""
    secret = "k3y-" + os.urandom(8).hex()
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    key_file = tmp_path / "key"
    key_file.write_text(secret)
    with key_file.open("rb") as held:
        os.set_inheritable(held.fileno(), True)
        fresh = WorkerPool(1)  # started while the key is in the environment and open
        try:
            suggestor = fresh.isolated(f"{MODULE}:KeyHunter", secret=secret)
            result = await _run(suggestor, signing_key=secret)
        finally:
            fresh.close()
    hunt = result.context.find(H, "hunt")
    assert hunt is not None
    assert hunt.content == "nothing; files []"


@pytest.mark.parametrize(("guard", "dumpable"), [(True, "0"), (False, "1")])
def test_a_guarded_pool_makes_the_engine_non_dumpable(guard: bool, dumpable: str) -> None:
    """Non-dumpable, the engine's memory and starting environment are closed to processes
    of its user that lack `CAP_SYS_PTRACE`, which a worker gives up."""
    here = Path(__file__).resolve().parent
    script = (
        "import ctypes, sys; from converge import WorkerPool; "
        f"pool = WorkerPool(1, guard={guard}); pool.isolated('isolated_suggestors:Echo'); "
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)); pool.close()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])},
        timeout=60,
    )
    assert done.stdout.strip() == dumpable


def test_a_worker_environment_holds_no_secret_variable() -> None:
    environ = {
        "PATH": "/usr/bin",
        "CONVERGE_SIGNING_KEY": "secret",
        "CONVERGE_SIGNING_KEY_FILE": "/k",
        "DATABASE_URL": "postgresql://u:p@h/d",
        "LANG": "C.UTF-8",
    }
    kept = scrubbed_environment(environ)
    assert set(kept) == {"PATH", "LANG", "PYTHONPATH"}


async def test_a_suggestor_that_changes_its_copy_of_a_fact_changes_no_fact_of_the_engine(
    pool: WorkerPool,
) -> None:
    result = await _run(pool.isolated(f"{MODULE}:Misbehaver", how="mutate"))
    assert result.stop_reason is StopReason.CONVERGED
    assert result.failures == ()
    seed = result.context.find(ContextKey.SEEDS, "a")
    assert seed is not None
    assert seed.content == "alpha"
    assert verify(result.context, result.integrity)


@pytest.mark.parametrize(
    ("how", "said", "reason"),
    [
        ("raise", "ValueError: no answer today", "raised"),
        ("system-exit", "SystemExit: 3", "raised"),
        ("os-exit", "exited with status 7", "died"),
        ("segfault", "was killed by SIGSEGV", "died"),
        ("impostor", "answered for 'someone-else', not for this suggestor", "garbage"),
        ("garbage", "not a JSON message", "died"),
        ("invalid-effect", "answered an invalid effect: tokens: Input should be", "garbage"),
        ("not-an-effect", "answered an invalid effect: effect: Input should be", "garbage"),
        ("no-ok", "answered {'name': 'misbehaver', 'effect': None}", "garbage"),
    ],
)
async def test_a_failing_worker_is_a_recorded_failure_of_that_suggestor(
    pool: WorkerPool, how: str, said: str, reason: str
) -> None:
    result = await _run(
        pool.isolated(f"{MODULE}:Misbehaver", how=how), pool.isolated(f"{MODULE}:Echo")
    )
    assert result.stop_reason is StopReason.CONVERGED
    [failed] = result.failures
    assert failed.suggestor == "misbehaver"
    assert failed.outcome == "failed"
    assert failed.error is not None
    assert failed.error.startswith("WorkerError: isolated suggestor 'misbehaver', cycle 2: ")
    assert said in failed.error
    assert isinstance(failed.metadata, dict)
    pid = failed.metadata["worker_pid"]
    assert isinstance(pid, int)
    if reason == "raised":
        assert "kill_reason" not in failed.metadata
    else:
        assert "kill_reason" in failed.metadata
        assert pid not in pool.pids
        assert _gone(pid)
    # the rest of the run went on, and the pool serves the next run
    assert result.context.find(H, "echo-a") is not None
    assert (await _run(pool.isolated(f"{MODULE}:Echo"))).failures == ()


async def test_a_worker_cannot_claim_another_pid_or_a_kill(pool: WorkerPool) -> None:
    """`worker_pid` and `kill_reason` are the engine's: what the suggestor puts there is not
    recorded, the rest of its metadata is."""
    result = await _run(pool.isolated(f"{MODULE}:Misbehaver", how="spoof"))
    [call] = _calls(result, "misbehaver")
    assert call.outcome == "ok"
    assert isinstance(call.metadata, dict)
    assert call.metadata["worker_pid"] in pool.pids
    assert call.metadata["worker_pid"] != 1
    assert "kill_reason" not in call.metadata
    assert call.metadata["own"] == "kept"
    assert "killed:" not in render_report(RunRecord.of(result))


async def test_a_failing_worker_raises_worker_error_in_raise_mode(pool: WorkerPool) -> None:
    with pytest.raises(WorkerError) as caught:
        await _run(pool.isolated(f"{MODULE}:Misbehaver", how="os-exit"), on_suggestor_error="raise")
    assert (caught.value.suggestor, caught.value.cycle, caught.value.reason) == (
        "misbehaver",
        2,
        "died",
    )


async def test_a_timeout_kills_the_worker_and_records_the_call_as_timed_out(
    pool: WorkerPool,
) -> None:
    started = time.monotonic()
    result = await _run(
        pool.isolated(f"{MODULE}:Misbehaver", how="hang", seconds=60.0),
        pool.isolated(f"{MODULE}:Echo"),
        suggestor_timeout=1.0,
    )
    assert time.monotonic() - started < 15.0
    [failed] = result.failures
    assert (failed.suggestor, failed.outcome) == ("misbehaver", "timed_out")
    assert failed.error == "TimeoutError: no effect within 1.0 s"
    assert isinstance(failed.metadata, dict)
    assert failed.metadata["kill_reason"] == CANCELLED
    pid = failed.metadata["worker_pid"]
    assert isinstance(pid, int)
    assert pid not in pool.pids
    assert _gone(pid)
    assert result.context.find(H, "echo-b") is not None
    assert (await _run(pool.isolated(f"{MODULE}:Echo"))).failures == ()


@pytest.mark.parametrize("alone", [True, False], ids=["lone call", "calls of a group"])
async def test_a_call_the_time_budget_cuts_records_its_killed_worker(
    pool: WorkerPool, alone: bool
) -> None:
    """The run's time budget cancels the call from outside the executor's own scope: the
    `timed_out` record, its event and the report still name the worker and why it died."""
    seen: list[EngineEvent] = []

    class Keep:
        def on_event(self, event: EngineEvent, /) -> None:
            seen.append(event)

    others = () if alone else (pool.isolated(f"{MODULE}:Echo"),)
    result = await _run(
        pool.isolated(f"{MODULE}:Misbehaver", how="hang", seconds=60.0),
        *others,
        budget=Budget(max_seconds=1.5),
        observers=[Keep()],
    )
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    [cut] = _calls(result, "misbehaver")
    assert (cut.outcome, cut.error) == ("timed_out", "cancelled: time budget exhausted")
    assert isinstance(cut.metadata, dict)
    assert cut.metadata["kill_reason"] == CANCELLED
    pid = cut.metadata["worker_pid"]
    assert isinstance(pid, int)
    assert _gone(pid)
    [event] = [e for e in seen if isinstance(e, SuggestorFailed)]
    assert (event.suggestor, event.outcome, event.metadata) == (
        "misbehaver",
        "timed_out",
        cut.metadata,
    )
    page = render_report(RunRecord.of(result))
    assert html.escape(f"in worker process {pid}, killed: {CANCELLED}") in page
    # the record travels: stored and read back, and replayed without any worker
    again = RunRecord.model_validate_json(RunRecord.of(result).model_dump_json())
    [kept] = [e for c in again.trace.cycles for e in c.executions if e.suggestor == "misbehaver"]
    assert kept.metadata == cut.metadata


async def test_a_replayed_run_shows_the_killed_worker_of_a_timed_out_call(
    pool: WorkerPool,
) -> None:
    def engine() -> Engine:
        made = Engine(suggestor_timeout=1.0, record_effects=True)
        for suggestor in (
            *_seeds(),
            pool.isolated(f"{MODULE}:Misbehaver", how="hang", seconds=60.0),
            pool.isolated(f"{MODULE}:Echo"),
        ):
            made.register_suggestor(suggestor)
        return made

    result = await engine().run()
    [failed] = result.failures
    replayed = await engine().replay(result.trace)
    assert replayed.integrity.merkle_root == result.integrity.merkle_root
    assert replayed.failures == (failed,)
    forked = await engine().fork(RunRecord.of(result), at_cycle=2, replay=True)
    assert forked.integrity.merkle_root == result.integrity.merkle_root


async def test_a_worker_that_hangs_in_a_run_without_timeouts_fails_at_the_pool_timeout() -> None:
    patient = WorkerPool(1, timeout=1.0)
    started = time.monotonic()
    try:
        result = await _run(patient.isolated(f"{MODULE}:Misbehaver", how="hang", seconds=60.0))
    finally:
        patient.close()
    assert time.monotonic() - started < 15.0
    [failed] = result.failures
    assert failed.outcome == "failed"
    assert failed.error is not None
    assert "did not answer within the pool's timeout (1 s) and was killed" in failed.error
    assert isinstance(failed.metadata, dict)
    assert failed.metadata["kill_reason"] == "no answer within 1 s"
    assert _gone(cast("int", failed.metadata["worker_pid"]))


async def test_a_worker_over_its_memory_limit_is_a_recorded_failure() -> None:
    small = WorkerPool(1, memory_limit=1 << 30)
    try:
        result = await _run(small.isolated(f"{MODULE}:Misbehaver", how="memory"))
    finally:
        small.close()
    [failed] = result.failures
    assert failed.error is not None
    assert "MemoryError" in failed.error or "was killed by" in failed.error
    assert result.context.find(H, "misbehaver") is None


async def test_a_worker_killed_between_two_runs_is_replaced_and_no_call_fails(
    pool: WorkerPool,
) -> None:
    await _run(pool.isolated(f"{MODULE}:Echo"))
    victims = pool.pids
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    await anyio.sleep(0.2)  # dead, a zombie until the pool reaps it
    result = await _run(pool.isolated(f"{MODULE}:Echo", name="echo2", prefix="e2"))
    assert result.failures == ()
    assert result.context.find(H, "e2-a") is not None
    assert not set(victims) & set(pool.pids)


class _Between:
    """Sends `signal` to the pool's idle workers when cycle `after` finishes (between two
    calls of a suggestor that runs every cycle), waiting until a killed one is a zombie."""

    def __init__(self, pool: WorkerPool, after: int, sent: signal.Signals) -> None:
        self.pool = pool
        self.after = after
        self.sent = sent
        self.pids: tuple[int, ...] = ()

    def on_event(self, event: EngineEvent, /) -> None:
        if not isinstance(event, CycleFinished) or event.cycle != self.after:
            return
        self.pids = self.pool.pids
        for pid in self.pids:
            os.kill(pid, self.sent)
            while self.sent is signal.SIGKILL and not _zombie(pid):
                time.sleep(0.01)


def _zombie(pid: int) -> bool:
    """Whether the whole process has ended (left for its parent to reap, which this leaves
    to it). `/proc/PID/stat` says "Z" as soon as the main thread ends, while the worker's
    other threads may still hold its socket open."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


async def _counted(pool: WorkerPool, **options: object) -> ConvergeResult:
    return await _run(pool.isolated(f"{MODULE}:Counter", until=4), **options)


async def test_a_worker_killed_between_two_cycles_is_replaced_and_no_call_fails() -> None:
    """The next call finds the worker dead before it sends anything: it starts another, which
    is sent the whole context, and the run is the one it would have been."""
    expected = await _run(Counter(until=4))
    own = WorkerPool(1)
    killer = _Between(own, after=3, sent=signal.SIGKILL)
    try:
        result = await _counted(own, observers=[killer])
    finally:
        own.close()
    assert result.failures == ()
    [victim] = killer.pids
    pids = {
        cast("dict[str, int]", call.metadata)["worker_pid"] for call in _calls(result, "counter")
    }
    assert victim in pids
    assert len(pids) == 2  # a fresh worker from cycle 4 on
    assert result.integrity.merkle_root == expected.integrity.merkle_root


async def test_a_worker_frozen_between_two_cycles_is_a_recorded_failure_and_the_run_goes_on() -> (
    None
):
    """A worker stopped (SIGSTOP) between two calls still runs, so it is lent again and never
    answers: that call fails at the pool's timeout, the worker is killed, the retry gets a
    fresh worker, and the run still reaches what it would have."""
    expected = await _run(Counter(until=4))
    own = WorkerPool(1, timeout=1.0)
    stopper = _Between(own, after=3, sent=signal.SIGSTOP)
    try:
        result = await _counted(own, observers=[stopper], retry=RetryPolicy(attempts=2))
    finally:
        own.close()
    [victim] = stopper.pids
    [failed] = [call for call in _calls(result, "counter") if call.outcome != "ok"]
    assert (failed.suggestor, failed.outcome) == ("counter", "failed")
    assert failed.metadata == {"worker_pid": victim, "kill_reason": "no answer within 1 s"}
    assert _gone(victim)
    assert result.converged
    assert [f.ref for f in result.context.facts()] == [f.ref for f in expected.context.facts()]


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("locator", "said"),
    [
        ("no_such_module_anywhere:Thing", "cannot import 'no_such_module_anywhere'"),
        (f"{MODULE}:Nothing", "has no 'Nothing'"),
        (f"{MODULE}:NOT_CALLABLE", "is not callable"),
        (f"{MODULE}:make_nothing", "does not satisfy Suggestor"),
        ("isolated_suggestors", "the locator must read 'package.module:Attribute'"),
    ],
)
def test_a_locator_that_does_not_build_a_suggestor_is_refused_at_once(
    pool: WorkerPool, locator: str, said: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"isolated {locator!r}") as caught:
        pool.isolated(locator)
    assert said in str(caught.value)


def test_arguments_that_do_not_serialise_are_refused_naming_the_argument(pool: WorkerPool) -> None:
    with pytest.raises(ConfigurationError, match="argument 'prefix' cannot be sent to a worker"):
        pool.isolated(f"{MODULE}:Echo", prefix={1, 2})  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigurationError, match="argument 'name'"):
        pool.isolated(f"{MODULE}:Echo", name=float("nan"))


def test_arguments_the_class_refuses_are_refused_at_once(pool: WorkerPool) -> None:
    with pytest.raises(ConfigurationError, match="unexpected keyword argument 'colour'"):
        pool.isolated(f"{MODULE}:Echo", colour="red")


@pytest.mark.parametrize(
    ("python", "said"),
    [("/no/such/python", "the worker pool cannot start"), ("/bin/false", "exited with status 1")],
)
def test_a_pool_that_cannot_start_is_a_configuration_error(python: str, said: str) -> None:
    broken = WorkerPool(1, python=python)
    with pytest.raises(ConfigurationError, match="the worker pool cannot start") as caught:
        broken.isolated(f"{MODULE}:Echo")
    assert said in str(caught.value)


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_a_pool_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    with pytest.raises(ConfigurationError, match="timeout must be positive or None"):
        WorkerPool(1, timeout=timeout)


@pytest.mark.parametrize("workers", [0, -1, True, 1.5])
def test_a_pool_of_no_workers_is_refused(workers: object) -> None:
    with pytest.raises(ConfigurationError, match="workers must be a positive int"):
        WorkerPool(workers)  # pyright: ignore[reportArgumentType]


def test_the_default_pool_serves_isolated() -> None:
    suggestor = isolated(f"{MODULE}:Echo", name="default")
    assert suggestor.name == "default"
    assert suggestor.dependencies == (ContextKey.SEEDS,)
    assert suggestor.locator == f"{MODULE}:Echo"
    assert suggestor.arguments == {"name": "default"}


# -- workers die with the engine ------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["main", "thread"])
def test_killing_the_engine_with_sigkill_leaves_no_worker_behind(where: str) -> None:
    """From the main thread the kernel's parent-death signal ends the workers; from another
    thread (where that signal would follow the thread) their watchdog does, busy or not."""
    here = Path(__file__).resolve().parent
    with subprocess.Popen(
        [sys.executable, str(here / "isolation_engine.py"), where],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])},
    ) as engine:
        try:
            assert engine.stdout is not None
            pids = cast("list[int]", json.loads(engine.stdout.readline()))
            assert len(pids) == 2
            assert all(_alive(pid) for pid in pids)
        finally:
            engine.kill()
            engine.wait()
    deadline = time.monotonic() + 5.0
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if _alive(pid)]
