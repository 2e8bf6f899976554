"""The engine: registration, cycle counts, concurrency, merge order, identity, conflicts, packs."""

import uuid
from collections.abc import Sequence

import anyio
import pytest

from converge import (
    AgentEffect,
    Budget,
    ConfigurationError,
    ConflictError,
    Context,
    ContextKey,
    Engine,
    ProposedFact,
    StopReason,
    SuggestorId,
    suggestor,
)
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor
from tests.doubles import fact

SEEDS = ContextKey.SEEDS
HYPOTHESES = ContextKey.HYPOTHESES


class Proposer:
    """Proposes a fixed list every time it runs; optionally sleeps first."""

    def __init__(
        self,
        name: str,
        proposals: Sequence[ProposedFact],
        *,
        dependencies: Sequence[ContextKey] = (),
        delay: float = 0.0,
        once: bool = True,
    ) -> None:
        self.name = name
        self.dependencies = tuple(dependencies)
        self.proposals = tuple(proposals)
        self.delay = delay
        self.once = once
        self.accepts_calls = 0
        self.seen_versions: list[int] = []

    def accepts(self, ctx: Context, /) -> bool:
        self.accepts_calls += 1
        if not self.once:
            return True
        return any(ctx.find(p.key, p.id) is None for p in self.proposals)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.seen_versions.append(ctx.version)
        if self.delay:
            await anyio.sleep(self.delay)
        return AgentEffect.with_proposals(self.proposals)


# -- cycle counts --------------------------------------------------------------------------


async def test_engine_with_no_suggestors_converges_in_one_cycle() -> None:
    result = await Engine().run()
    assert result.converged
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 1


async def test_engine_with_one_seed_converges_in_two_cycles() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    result = await engine.run()
    assert result.converged
    assert result.cycles == 2
    assert result.context.find(SEEDS, "s1") is not None


async def test_engine_with_seed_and_reaction_converges_in_three_cycles() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    engine.register_suggestor(ReactOnceSuggestor("h1", "world"))
    result = await engine.run()
    assert result.converged
    assert result.cycles == 3
    reaction = result.context.find(HYPOTHESES, "h1")
    assert reaction is not None
    assert reaction.evidence == ("seeds/s1",)
    assert reaction.promotion.cycle == 2


async def test_max_cycles_two_is_enough_for_one_seed() -> None:
    engine = Engine(budget=Budget(max_cycles=2))
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    assert (await engine.run()).converged


async def test_max_cycles_one_is_not_enough_for_one_seed() -> None:
    engine = Engine(budget=Budget(max_cycles=1))
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    result = await engine.run()
    assert result.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert result.detail == "max_cycles (1)"
    assert result.cycles == 1
    assert result.context.find(SEEDS, "s1") is not None


# -- registration ----------------------------------------------------------------------------


def test_register_suggestor_returns_ids_in_order() -> None:
    engine = Engine()
    ids = [engine.register_suggestor(SeedSuggestor(f"s{i}", "x")) for i in range(3)]
    assert ids == [0, 1, 2]
    assert all(isinstance(sid, SuggestorId) for sid in ids)
    assert repr(ids[1]) == "SuggestorId(1)"
    assert engine.suggestor_names == ("seed:seeds/s0", "seed:seeds/s1", "seed:seeds/s2")


def test_register_suggestor_refuses_a_duplicate_name() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s1", "x"))
    with pytest.raises(ConfigurationError, match="'seed:seeds/s1' is already registered"):
        engine.register_suggestor(SeedSuggestor("s1", "y"))


@pytest.mark.parametrize("missing", ["name", "dependencies", "accepts", "execute"])
def test_register_suggestor_names_the_missing_member(missing: str) -> None:
    members: dict[str, object] = {
        "name": "x",
        "dependencies": (),
        "accepts": lambda self, ctx: True,  # pyright: ignore[reportUnknownLambdaType]
        "execute": Proposer.execute,
    }
    del members[missing]
    incomplete = type("Incomplete", (), members)()
    with pytest.raises(ConfigurationError, match=f"missing member '{missing}'"):
        Engine().register_suggestor(incomplete)  # pyright: ignore[reportArgumentType]


def test_register_suggestor_refuses_a_sync_execute() -> None:
    class Sync:
        name = "sync"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return True

        def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.empty()

    with pytest.raises(ConfigurationError, match="'execute' must be an async method"):
        Engine().register_suggestor(Sync())  # pyright: ignore[reportArgumentType]


def test_register_suggestor_refuses_an_unknown_dependency() -> None:
    proposer = Proposer("p", [])
    proposer.dependencies = ("beliefs",)  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ConfigurationError, match="'beliefs', which is not a ContextKey"):
        Engine().register_suggestor(proposer)


def test_register_suggestor_refuses_a_blank_name() -> None:
    with pytest.raises(ConfigurationError, match="'name' must be a non-blank str"):
        Engine().register_suggestor(Proposer("  ", []))


def test_register_suggestor_accepts_dependency_strings() -> None:
    proposer = Proposer("p", [])
    proposer.dependencies = ("seeds",)  # pyright: ignore[reportAttributeAccessIssue]
    assert Engine().register_suggestor(proposer) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be at least 1"),
        ({"suggestor_timeout": 0}, "suggestor_timeout must be positive"),
        ({"on_conflict": "merge"}, "on_conflict must be 'stop' or 'reject'"),
        ({"on_suggestor_error": "ignore"}, "on_suggestor_error must be 'isolate' or 'raise'"),
    ],
)
def test_engine_refuses_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Engine(**kwargs)  # pyright: ignore[reportArgumentType]


async def test_run_refuses_an_input_that_is_not_a_proposal() -> None:
    with pytest.raises(ConfigurationError, match=r"inputs\[1\] must be a ProposedFact, got dict"):
        await Engine().run(inputs=[fact(SEEDS, "a"), {"id": "b"}])  # pyright: ignore[reportArgumentType]


# -- execution -----------------------------------------------------------------------------


async def test_eligible_suggestors_run_concurrently() -> None:
    """Each waits for the other to start: only concurrent execution can finish."""
    started = {"a": anyio.Event(), "b": anyio.Event()}

    def waiter(me: str, other: str) -> object:
        @suggestor(name=me, accepts=lambda ctx: ctx.find(HYPOTHESES, me) is None)
        async def run(ctx: Context) -> list[ProposedFact]:
            started[me].set()
            await started[other].wait()
            return [fact(HYPOTHESES, me)]

        return run

    engine = Engine()
    engine.register_suggestor(waiter("a", "b"))  # pyright: ignore[reportArgumentType]
    engine.register_suggestor(waiter("b", "a"))  # pyright: ignore[reportArgumentType]
    with anyio.fail_after(5):
        result = await engine.run()
    assert result.converged
    assert result.trace.cycles[0].eligible == ("a", "b")


async def test_max_concurrency_one_runs_suggestors_one_at_a_time() -> None:
    running = 0
    peak = 0

    def counter(name: str) -> object:
        @suggestor(name=name, accepts=lambda ctx: ctx.find(HYPOTHESES, name) is None)
        async def run(ctx: Context) -> list[ProposedFact]:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await anyio.sleep(0.01)
            running -= 1
            return [fact(HYPOTHESES, name)]

        return run

    engine = Engine(max_concurrency=1)
    for name in ("a", "b", "c"):
        engine.register_suggestor(counter(name))  # pyright: ignore[reportArgumentType]
    result = await engine.run()
    assert result.converged
    assert peak == 1


async def test_suggestors_of_a_cycle_see_the_same_snapshot() -> None:
    first = Proposer("first", [fact(HYPOTHESES, "a")])
    second = Proposer("second", [fact(HYPOTHESES, "b")])
    engine = Engine()
    engine.register_suggestor(first)
    engine.register_suggestor(second)
    await engine.run(inputs=[fact(SEEDS, "s")])
    assert first.seen_versions == second.seen_versions == [1]


async def test_merge_follows_registration_order_not_completion_order() -> None:
    slow = Proposer("slow", [fact(HYPOTHESES, "slow")], delay=0.05)
    fast = Proposer("fast", [fact(HYPOTHESES, "fast")])
    engine = Engine()
    engine.register_suggestor(slow)
    engine.register_suggestor(fast)
    result = await engine.run()
    facts = result.context.get(HYPOTHESES)
    assert [f.id for f in facts] == ["slow", "fast"]
    assert [f.promotion.clock for f in facts] == [1, 2]
    assert [e.suggestor for e in result.trace.cycles[0].executions] == ["slow", "fast"]


# -- identity and conflicts ------------------------------------------------------------------


async def test_identical_reproposal_is_an_idempotent_no_op() -> None:
    always = Proposer("always", [fact(HYPOTHESES, "h", "same")], once=False)
    engine = Engine()
    engine.register_suggestor(always)
    result = await engine.run()
    assert result.converged
    assert result.cycles == 2
    assert result.context.count(HYPOTHESES) == 1
    assert result.rejections == ()
    assert result.trace.cycles[1].promoted == ()


async def test_identical_proposal_from_another_suggestor_keeps_the_first_fact() -> None:
    engine = Engine()
    engine.register_suggestor(Proposer("a", [fact(HYPOTHESES, "h", "same", provenance="a")]))
    engine.register_suggestor(Proposer("b", [fact(HYPOTHESES, "h", "same", provenance="b")]))
    result = await engine.run()
    found = result.context.find(HYPOTHESES, "h")
    assert found is not None
    assert found.provenance == "a"
    assert result.context.count(HYPOTHESES) == 1


async def test_conflict_stops_the_run_and_rolls_back_the_whole_effect() -> None:
    engine = Engine()
    engine.register_suggestor(Proposer("a", [fact(HYPOTHESES, "h", "yes")]))
    engine.register_suggestor(
        Proposer("b", [fact(HYPOTHESES, "b-first", "ok"), fact(HYPOTHESES, "h", "no")])
    )
    result = await engine.run(inputs=[fact(SEEDS, "s")])
    assert result.stop_reason is StopReason.CONFLICT
    assert result.cycles == 1
    assert result.context.find(SEEDS, "s") is not None
    kept = result.context.find(HYPOTHESES, "h")
    assert kept is not None
    assert kept.content == "yes"
    assert result.context.find(HYPOTHESES, "b-first") is None
    assert result.conflict is not None
    assert result.conflict.suggestor == "b"
    assert "hypotheses/h" in result.detail
    assert "'b'" in result.detail
    assert result.trace.cycles[0].promoted == ("hypotheses/h",)
    with pytest.raises(ConflictError) as caught:
        result.raise_for_status()
    assert caught.value.existing is kept
    assert caught.value.proposed == fact(HYPOTHESES, "h", "no")


async def test_conflict_with_reject_records_a_rejection_and_goes_on() -> None:
    engine = Engine(on_conflict="reject")
    engine.register_suggestor(Proposer("a", [fact(HYPOTHESES, "h", "yes")]))
    engine.register_suggestor(
        Proposer("b", [fact(HYPOTHESES, "h", "no"), fact(HYPOTHESES, "b-after", "ok")])
    )
    result = await engine.run()
    assert result.converged
    assert result.context.find(HYPOTHESES, "b-after") is not None
    [rejection] = result.rejections
    assert rejection.suggestor == "b"
    assert rejection.cycle == 1
    assert rejection.reason == "conflicts with existing fact hypotheses/h from 't'"


async def test_payload_difference_is_a_conflict() -> None:
    engine = Engine()
    first = ProposedFact(key=SEEDS, id="x", content="c", provenance="t", payload={"n": 1})
    second = ProposedFact(key=SEEDS, id="x", content="c", provenance="t", payload={"n": True})
    result = await engine.run(inputs=[first, second])
    assert result.stop_reason is StopReason.CONFLICT


async def test_conflict_among_inputs_stops_at_cycle_zero() -> None:
    result = await Engine().run(inputs=[fact(SEEDS, "x", "one"), fact(SEEDS, "x", "two")])
    assert result.stop_reason is StopReason.CONFLICT
    assert result.cycles == 0
    assert len(result.context) == 0
    assert result.trace.cycles == ()


# -- inputs and the dirty set ------------------------------------------------------------------


async def test_inputs_are_promoted_at_cycle_zero_by_the_input_pseudo_suggestor() -> None:
    result = await Engine().run(inputs=[fact(SEEDS, "s")])
    promoted = result.context.find(SEEDS, "s")
    assert promoted is not None
    record = promoted.promotion
    assert (record.cycle, record.suggestor, record.suggestor_id, record.gate) == (
        0,
        "input",
        -1,
        "input",
    )
    assert record.clock == 1
    assert result.trace.inputs == (fact(SEEDS, "s"),)


async def test_rejected_input_is_never_seen_by_suggestors() -> None:
    watcher = Proposer("watcher", [fact(HYPOTHESES, "h")], dependencies=[SEEDS])
    engine = Engine()
    engine.register_suggestor(watcher)
    result = await engine.run(inputs=[fact(SEEDS, "bad id")])
    assert watcher.accepts_calls == 0
    [rejection] = result.rejections
    assert (rejection.suggestor, rejection.cycle) == ("input", 0)
    assert result.context.find(SEEDS, "bad id") is None


async def test_only_suggestors_depending_on_dirty_keys_are_candidates() -> None:
    on_seeds = Proposer("on-seeds", [fact(HYPOTHESES, "h")], dependencies=[SEEDS])
    on_signals = Proposer("on-signals", [fact(HYPOTHESES, "x")], dependencies=[ContextKey.SIGNALS])
    engine = Engine()
    engine.register_suggestor(on_seeds)
    engine.register_suggestor(on_signals)
    result = await engine.run(inputs=[fact(SEEDS, "s")])
    assert result.trace.cycles[0].dirty == (SEEDS,)
    assert result.trace.cycles[0].eligible == ("on-seeds",)
    assert on_signals.accepts_calls == 0


async def test_without_new_inputs_every_key_holding_facts_is_dirty() -> None:
    first = await Engine().run(inputs=[fact(SEEDS, "s"), fact(ContextKey.SIGNALS, "g")])
    engine = Engine()
    engine.register_suggestor(Proposer("on-signals", [], dependencies=[ContextKey.SIGNALS]))
    result = await engine.run(first.context)
    assert result.trace.cycles[0].dirty == (SEEDS, ContextKey.SIGNALS)


async def test_run_continues_from_a_given_context() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    engine.register_suggestor(ReactOnceSuggestor("h1", "world"))
    first = await engine.run()
    again = await engine.run(first.context)
    assert again.converged
    assert again.cycles == 1
    assert again.integrity == first.integrity


# -- write authority and packs ---------------------------------------------------------------


async def test_writes_restricts_the_keys_a_suggestor_may_write() -> None:
    @suggestor(name="narrow", writes=[HYPOTHESES], accepts=lambda ctx: not ctx.has(HYPOTHESES))
    async def narrow(ctx: Context) -> list[ProposedFact]:
        return [fact(SEEDS, "s"), fact(HYPOTHESES, "h")]

    engine = Engine()
    engine.register_suggestor(narrow)
    result = await engine.run()
    assert result.context.find(HYPOTHESES, "h") is not None
    [rejection] = result.rejections
    assert rejection.reason == "not authorised to write seeds"


async def test_inactive_pack_suggestors_do_not_run() -> None:
    engine = Engine()
    engine.register_suggestor_in_pack("a", Proposer("in-a", [fact(HYPOTHESES, "a")]))
    engine.register_suggestor_in_pack("b", Proposer("in-b", [fact(HYPOTHESES, "b")]))
    engine.register_suggestor(Proposer("free", [fact(HYPOTHESES, "free")]))
    engine.set_active_packs(["a"])
    result = await engine.run()
    assert [f.id for f in result.context.get(HYPOTHESES)] == ["a", "free"]
    engine.set_active_packs(None)
    again = await engine.run()
    assert [f.id for f in again.context.get(HYPOTHESES)] == ["a", "b", "free"]


def test_all_packs_are_active_until_set_active_packs() -> None:
    engine = Engine()
    engine.register_suggestor_in_pack("a", Proposer("in-a", [fact(HYPOTHESES, "a")]))
    assert engine.run_sync().context.find(HYPOTHESES, "a") is not None


def test_set_active_packs_refuses_an_unknown_pack() -> None:
    engine = Engine()
    engine.register_suggestor_in_pack("a", Proposer("in-a", []))
    with pytest.raises(ConfigurationError, match=r"unknown pack ids \['c'\]; registered packs: a"):
        engine.set_active_packs(["a", "c"])


# -- results -----------------------------------------------------------------------------------


def test_run_sync_runs_on_trio() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    assert engine.run_sync(backend="trio").cycles == 2


async def test_result_repr_is_short_and_raise_for_status_returns_it() -> None:
    result = await Engine().run()
    assert repr(result) == (
        f"ConvergeResult(stop_reason='converged', cycles=1, facts=0, run_id={result.run_id[:12]!r})"
    )
    assert result.raise_for_status() is result
    assert len(result.run_id) == 32
    assert result.trace.run_id == result.run_id


async def test_a_run_is_named_by_a_new_random_uuid() -> None:
    engine = Engine()
    ids = [(await engine.run()).run_id for _ in range(3)]
    assert len(set(ids)) == 3
    for run_id in ids:
        parsed = uuid.UUID(hex=run_id)
        assert parsed.hex == run_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
