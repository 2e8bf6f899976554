"""`converge replay` of a finished run stored as rows: its head, then its entries' cycles.

The replay reads the run's signed head and its journal entries a page at a time, as the
replay reaches them, chaining each as `verify` does. Each test tries to break that: the
replay of the rows must be exactly the replay of the loaded whole record; an entry changed,
dropped, swapped or re-chained, or a forged head, must fail it; a run stored whole and
`--live-from` go on as before. Every test runs on SQLite and, with DATABASE_URL set, on
PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from durable_doubles import Chain, Risky, formation
from test_durable import sql
from test_store import open_store
from test_store_rows import Target, entries, head_text, layout, set_entry, set_head, target

from converge import (
    ConvergeResult,
    Engine,
    GateDecision,
    HitlPolicy,
    RecordHead,
    ReplayError,
    RowStore,
    RunStore,
    StopReason,
)
from converge.stores._journal import chain, genesis
from converge.stores._rows_replay import JournalCycles
from tests.cli_runs import cli, run_id_of

pytestmark = pytest.mark.anyio

__all__ = ["target"]  # the fixture, shared with `test_store_rows`

KEY = "replay-rows-key"
FORMATION = str(Path(__file__).resolve().parent / "durable_doubles.py")


@pytest.fixture
def store(target: Target) -> RowStore:
    opened = open_store(*target)
    assert isinstance(opened, RowStore)
    return opened


async def rows_run(store: RunStore, target: Target) -> str:
    """A signed run of the durable chain formation, recorded and stored as rows; its id."""
    result = await formation.engine(store=store, signing_key=KEY).run()
    assert result.converged
    assert layout(target, result.run_id) == "rows"
    return result.run_id


async def replay_cli(target: Target, *args: str) -> tuple[int, str]:
    """`converge --store TARGET replay ARGS`, from a thread of its own (it runs its own loop)."""
    return await anyio.to_thread.run_sync(
        lambda: cli("--store", target[1], "replay", *args, "--formation", FORMATION)
    )


async def both_ways(engine: Engine, store: RowStore, run_id: str) -> tuple[ConvergeResult, ...]:
    """The run replayed from its loaded whole record, and from its head and rows."""
    whole = await engine.replay((await store.load(run_id)).trace)
    head = await store.load_head(run_id)
    assert head is not None
    cycles = JournalCycles(store, head, page=1)
    rows = await engine._replay_cycles(head.record.trace, cycles)  # pyright: ignore[reportPrivateUsage]
    return whole, rows


def same_replay(whole: ConvergeResult, rows: ConvergeResult) -> None:
    assert rows.integrity == whole.integrity
    assert (rows.stop_reason, rows.detail, rows.cycles) == (
        whole.stop_reason,
        whole.detail,
        whole.cycles,
    )
    assert rows.context.merkle_root() == whole.context.merkle_root()
    assert [c.executions for c in rows.trace.cycles] == [c.executions for c in whole.trace.cycles]
    assert rows.trace.decisions == whole.trace.decisions


async def test_replay_of_rows_is_the_replay_of_the_whole_record(
    store: RowStore, target: Target
) -> None:
    run_id = await rows_run(store, target)
    whole, rows = await both_ways(formation.engine(), store, run_id)
    same_replay(whole, rows)
    assert rows.integrity == (await store.load(run_id)).integrity


async def test_a_resumed_run_replays_the_same_from_its_rows(
    store: RowStore, target: Target
) -> None:
    """Paused, decided, resumed, ended as rows: the decision comes from the head."""

    def engine() -> Engine:
        built = Engine(
            store=store,
            signing_key=KEY,
            record_effects=True,
            hitl=HitlPolicy(confidence_below=0.5),
        )
        built.register_suggestor(Chain(steps=4))
        built.register_suggestor(Risky())
        return built

    paused = await engine().run(inputs=formation.inputs)
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    [gate] = paused.pending
    approved = GateDecision.approve(gate.gate_id, by="jane")
    resumed = await engine().resume_run(paused.run_id, [approved])
    assert resumed.converged
    assert layout(target, paused.run_id) == "rows"
    whole, rows = await both_ways(engine(), store, paused.run_id)
    same_replay(whole, rows)
    assert rows.trace.decisions == (approved,)


async def test_a_cycle_an_entry_records_again_replaces_the_one_read_before(
    store: RowStore, target: Target
) -> None:
    """As the loaded record has it (`assemble_final`): the later entry's version of a cycle."""
    run_id = await rows_run(store, target)
    stored = entries(target, run_id)
    again = json.loads(stored[2][1])["cycles"][-1] | {"at_seconds": 99.5}

    def record_again(entry: str) -> str:
        document = json.loads(entry)
        document["cycles"] = [again, *document["cycles"]]
        return json.dumps(document)

    rechain(target, run_id, record_again, stored[3][0])
    head = await store.load_head(run_id)
    assert head is not None
    read = [cycle async for cycle in JournalCycles(store, head, page=2)]
    assert tuple(read) == (await store.load(run_id)).trace.cycles
    assert read[int(again["cycle"]) - 1].at_seconds == 99.5


async def test_the_cycles_are_read_a_page_at_a_time_as_they_are_reached(
    store: RowStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is read before it is asked for: after the first cycle, one entry was read."""
    run_id = await rows_run(store, target)
    head = await store.load_head(run_id)
    assert head is not None
    asked: list[int] = []
    original = store.journal

    async def journal(run: str, /, *, after: int = 0, limit: int = 16) -> list[tuple[int, str]]:
        asked.append(after)
        return await original(run, after=after, limit=limit)

    monkeypatch.setattr(store, "journal", journal)
    cycles = JournalCycles(store, head, page=1)
    first = await anext(cycles)
    # the seed's entry, cycle 1's, and cycle 2's (which could have recorded cycle 1 again)
    assert (first.cycle, asked) == (1, [0, 1, 2])
    rest = [cycle async for cycle in cycles]
    assert [c.cycle for c in (first, *rest)] == list(range(1, head.record.cycles + 1))
    assert asked == list(range(len(entries(target, run_id)) + 1)) != [0, 1, 2, 3]


async def test_replay_of_a_run_stored_as_rows_says_what_replaying_it_gave(
    store: RowStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await rows_run(store, target)
    record = await store.load(run_id)
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    code, out = await replay_cli(target, run_id)
    assert (code, out) == (
        0,
        f"replayed: run {run_id}, {record.cycles} cycles, no suggestor called, same root "
        f"{record.integrity.merkle_root}\n",
    )
    code, out = await replay_cli(target, run_id, "--json")
    document = json.loads(out)
    assert (code, document["replayed"], document["replay_merkle_root"]) == (
        0,
        True,
        record.integrity.merkle_root,
    )


def _changed_effect(entry: str) -> str:
    """The entry with the content of the first proposal of its recorded effects changed."""
    document = json.loads(entry)
    for cycle in document["cycles"]:
        for execution in cycle["executions"]:
            effect = execution.get("effect")
            if effect and effect["proposals"]:
                effect["proposals"][0]["content"] = "forged"
                return json.dumps(document)
    raise AssertionError("no recorded proposal in the entry")


def _changed_fact(entry: str) -> str:
    document = json.loads(entry)
    document["facts"][0]["content"] = "forged"
    return json.dumps(document)


def _truncated(entry: str) -> str:
    return entry[:-1]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_changed_effect, "does not match its head"),
        (_changed_fact, "does not match its head"),
        (_truncated, "journal entry 2 is invalid"),
    ],
)
async def test_replay_fails_an_entry_changed_by_hand(
    store: RowStore, target: Target, change: Callable[[str], str], said: str
) -> None:
    run_id = await rows_run(store, target)
    seq, entry = entries(target, run_id)[1]
    set_entry(target, run_id, seq, change(entry))
    code, out = await replay_cli(target, run_id)
    assert code == 7
    assert out.startswith("FAILED: ")
    assert said in out


async def test_replay_fails_a_dropped_or_swapped_entry(store: RowStore, target: Target) -> None:
    run_id = await rows_run(store, target)
    stored = entries(target, run_id)
    (first, one), (second, two) = stored[1], stored[2]
    set_entry(target, run_id, first, two)
    set_entry(target, run_id, second, one)
    code, out = await replay_cli(target, run_id)
    assert code == 7
    assert "records cycle" in out  # read out of order: the cycle that comes next is not there
    set_entry(target, run_id, first, one)
    set_entry(target, run_id, second, two)
    last, _ = stored[-1]
    sql(target, "DELETE FROM converge_journal WHERE run_id = ? AND seq = ?", run_id, last)
    code, out = await replay_cli(target, run_id)
    assert code == 7
    assert "does not match its head" in out


def rechain(target: Target, run_id: str, change: Callable[[str], str], seq: int) -> None:
    """Change entry `seq` and chain every entry again into the head, as an attacker without
    the key would."""
    digest = genesis(run_id)
    for number, entry in entries(target, run_id):
        if number == seq:
            entry = change(entry)
            set_entry(target, run_id, number, entry)
        digest = chain(digest, entry)
    head = json.loads(head_text(target, run_id))
    head["journal_digest"] = digest
    set_head(target, run_id, json.dumps(head))


async def test_a_changed_effect_chained_again_replays_to_another_root(
    store: RowStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a key the chain holds; the replay itself tells; with one, the head does."""
    run_id = await rows_run(store, target)
    rechain(target, run_id, _changed_effect, entries(target, run_id)[1][0])
    code, out = await replay_cli(target, run_id)
    assert code == 7
    assert "not the recorded" in out or "replay gives root" in out
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    code, out = await replay_cli(target, run_id)
    assert code == 1
    assert "replayed" not in out


async def test_replay_refuses_a_forged_head_when_a_key_is_set(
    store: RowStore,
    target: Target,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = await rows_run(store, target)
    head = json.loads(head_text(target, run_id))
    head["record"]["detail"] = "all good"
    set_head(target, run_id, json.dumps(head))
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    capsys.readouterr()
    code, out = await replay_cli(target, run_id)
    assert code == 1
    assert "replayed" not in out
    assert "stored head has a bad signature" in capsys.readouterr().err


async def test_a_forged_proof_in_the_head_fails_the_replay_without_a_key(
    store: RowStore, target: Target
) -> None:
    run_id = await rows_run(store, target)
    head = json.loads(head_text(target, run_id))
    head["record"]["integrity"]["clock"] += 1
    set_head(target, run_id, json.dumps(head))
    code, out = await replay_cli(target, run_id)
    assert code == 7
    assert out.startswith("FAILED: replay gives root")


async def test_a_run_stored_whole_replays_as_before(target: Target) -> None:
    store = open_store(*target)
    result = await formation.engine(store=store, durability="exit").run()
    assert layout(target, result.run_id) == "whole"
    assert isinstance(store, RowStore)
    assert await store.load_head(result.run_id) is None
    code, out = await replay_cli(target, result.run_id)
    assert (code, out.startswith(f"replayed: run {result.run_id}, ")) == (0, True)


async def test_live_from_still_forks_a_run_stored_as_rows(store: RowStore, target: Target) -> None:
    run_id = await rows_run(store, target)
    code, out = await replay_cli(target, run_id, "--live-from", "2")
    assert code == 0, out
    fork = await store.load(run_id_of(out))
    assert fork.lineage is not None
    assert (fork.lineage.parent_run_id, fork.lineage.at_cycle) == (run_id, 2)
    assert fork.integrity == (await store.load(run_id)).integrity


async def test_an_entry_recording_an_earlier_cycle_than_the_last_is_refused(
    store: RowStore, target: Target
) -> None:
    run_id = await rows_run(store, target)
    stored = entries(target, run_id)
    earlier = json.loads(stored[1][1])["cycles"]

    def repeat(entry: str) -> str:
        document = json.loads(entry)
        document["cycles"] = [*document["cycles"], *earlier]
        return json.dumps(document)

    rechain(target, run_id, repeat, stored[3][0])
    head = RecordHead.model_validate_json(head_text(target, run_id))
    with pytest.raises(ReplayError, match="records cycle 1 after cycle"):
        [_ async for _ in JournalCycles(store, head)]
