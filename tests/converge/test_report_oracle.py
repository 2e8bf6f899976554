"""The report and the summary read only the facts they show, and say exactly what they said
when they read every fact: the implementations that read every fact are kept here as the
oracle, and both are run on records with several keys, interleaved cycles, inputs, held
proposals, decisions, repeated references, and records altered out of their order."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from converge import AgentEffect, Context, ContextKey, Engine, Key, ProposedFact, RunRecord
from converge._cli import _output
from converge._cli._output import summary_lines
from converge._core._checkpoint import FactRecord, key_spans
from converge._core._key import AnyKey, key_rank
from converge._report import _render
from converge._report._facts import FACT_ENDS, FactTable, KeyGroup, fact_table, pinned_refs
from converge._report._parts import section
from converge._report._render import report_body
from converge._report._svg import LINEAGE_LIMIT, latest_facts, lineage_svg
from tests.converge.test_report import rich_records


class Note(BaseModel):
    model_config = ConfigDict(frozen=True)


NOTES = Key("oracle-notes", payload=Note)
KEYS: tuple[AnyKey, ...] = (
    ContextKey.SEEDS,
    ContextKey.HYPOTHESES,
    ContextKey.STRATEGIES,
    ContextKey.DIAGNOSTIC,
    NOTES,
)


# --- the oracle: what the report and the summary did when they read every fact -------------


def _ref(fact: FactRecord) -> str:
    return f"{fact.key.value}/{fact.id}"


def _sorted_latest(facts: Sequence[FactRecord]) -> list[int]:
    return sorted(range(len(facts)), key=lambda i: facts[i].promotion.clock)[-LINEAGE_LIMIT:]


def old_pinned_refs(record: RunRecord) -> set[str]:
    """The latest facts by a sort of them all, and what the rest of the report names."""
    facts = record.facts
    latest = facts if len(facts) <= LINEAGE_LIMIT else [facts[i] for i in _sorted_latest(facts)]
    return {_ref(fact) for fact in latest} | pinned_refs(record, record.facts, ())


def old_fact_table(facts: Sequence[FactRecord], pinned: set[str]) -> FactTable:
    anchors: dict[str, str] = {}
    groups: list[KeyGroup] = []
    start = 0
    while start < len(facts):
        key = facts[start].key
        end = start
        while end < len(facts) and facts[end].key == key:
            end += 1
        listed: list[int] = []
        for index in range(start, end):
            ref = _ref(facts[index])
            if index < start + FACT_ENDS or index >= end - FACT_ENDS or ref in pinned:
                anchors[ref] = f"fact-{index}"
                listed.append(index)
        groups.append(KeyGroup(key, start, end - start, tuple(listed)))
        start = end
    cited = {
        ref
        for group in groups
        for index in group.listed
        for ref in facts[index].evidence
        if ref not in anchors
    }
    for fact in facts:
        if _ref(fact) in cited:
            anchors[_ref(fact)] = ""
    every = {_ref(fact): index for index, fact in enumerate(facts)}  # the summary's contents
    return FactTable(tuple(groups), every, anchors)


def old_lineage_svg(facts: Sequence[FactRecord], anchors: dict[str, str]) -> str:
    """The graph of the latest facts by a sort of them all, their evidence looked up among
    every fact's reference (the graph's drawing itself did not change)."""
    every = {_ref(fact): "" for fact in facts} | anchors
    return lineage_svg(facts, _sorted_latest(facts), every)


def old_lineage(facts: Sequence[FactRecord], latest: Sequence[int], anchors: dict[str, str]) -> str:
    del latest
    edges = sum(len(fact.evidence) for fact in facts)
    intro = (
        f'<p class="note">Columns are promotion cycles; an arrow runs from each piece of evidence '
        f"to the fact derived from it ({edges} evidence link(s) in all). Hover a node to "
        "highlight its links; click it to jump to its row. Dashed outline: approved by a human.</p>"
    )
    return section("lineage", "Lineage", intro + old_lineage_svg(facts, anchors))


def old_pinned(record: RunRecord, facts: Sequence[FactRecord], latest: Sequence[int]) -> set[str]:
    del facts, latest
    return old_pinned_refs(record)


def one_span_per_fact(facts: Sequence[FactRecord]) -> list[tuple[AnyKey, int, int]]:
    """The summary counted each fact's key one by one."""
    return [(fact.key, index, index + 1) for index, fact in enumerate(facts)]


def the_oracle() -> ExitStack:
    """While entered, the report and the summary read every fact, as they did."""
    stack = ExitStack()
    stack.enter_context(mock.patch.object(_render, "pinned_refs", old_pinned))
    stack.enter_context(mock.patch.object(_render, "fact_table", old_fact_table))
    stack.enter_context(mock.patch.object(_render, "_lineage", old_lineage))
    stack.enter_context(mock.patch.object(_output, "key_spans", one_span_per_fact))
    return stack


# --- records --------------------------------------------------------------------------------


def _named_refs(record: RunRecord) -> Iterator[str]:
    """What the record's held proposals cite and its decisions made or rejected."""
    for gate in record.pending:
        yield from gate.proposal.evidence
    for decision in record.trace.decisions:
        ref = decision.gate_id.split(":", 2)[-1]
        yield ref
        yield f"diagnostic/hitl-rejected:{ref.partition('/')[2]}"


def _fact(template: FactRecord, key: AnyKey, ident: str, cycle: int, clock: int) -> FactRecord:
    promotion = template.promotion.model_copy(update={"cycle": cycle, "clock": clock})
    return template.model_copy(
        update={
            "key": key,
            "id": ident,
            "content": f"content of {key}/{ident}",
            "evidence": (),
            "promotion": promotion,
        }
    )


@st.composite
def records(draw: st.DrawFn) -> RunRecord:
    """A record of up to 400 facts under up to five keys, promoted over interleaved cycles,
    citing each other, facts that do not exist and the base's held and decided proposals;
    sometimes repeating references, with unordered clocks or out of key order."""
    base = draw(st.sampled_from(rich_records()))
    count = draw(
        st.sampled_from([0, 1, 3, FACT_ENDS * 2, LINEAGE_LIMIT, LINEAGE_LIMIT + 1])
        | st.integers(0, 400)
    )
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=len(KEYS), unique=True))
    cycles = draw(st.integers(0, 12))
    repeated = draw(st.booleans())
    altered = draw(st.sampled_from(["no", "clocks", "order", "both"]))
    rnd = draw(st.randoms(use_true_random=False))
    named = [ref.partition("/") for ref in _named_refs(base)]
    template = base.facts[0]
    facts: list[FactRecord] = []
    for clock in range(1, count + 1):
        cycle = min(cycles, clock * (cycles + 1) // (count + 1))
        if named and rnd.random() < 0.05:
            name, _, ident = rnd.choice(named)
            key: AnyKey = ContextKey(name)
        else:
            key = rnd.choice(keys)
            ident = f"f{rnd.randrange(count)}" if repeated else f"f{clock}"
        facts.append(_fact(template, key, ident, cycle, clock))
    refs = [_ref(fact) for fact in facts]
    for index, fact in enumerate(facts):
        pool = [*refs[: index + 1 + rnd.randrange(3)], "hypotheses/ghost", "nokey", "x/y/z"]
        evidence = tuple(rnd.choice(pool) for _ in range(rnd.choice((0, 0, 1, 1, 2, 3))))
        facts[index] = fact.model_copy(update={"evidence": evidence})
    promoted: dict[int, list[str]] = {}
    for fact in facts:
        promoted.setdefault(fact.promotion.cycle, []).append(_ref(fact))
    if rnd.random() < 0.2:  # a trace naming a fact the record does not hold
        promoted.setdefault(cycles, []).insert(0, "hypotheses/never-promoted")
    if altered in ("clocks", "both"):
        facts = [
            fact.model_copy(
                update={
                    "promotion": fact.promotion.model_copy(
                        update={"clock": rnd.randrange(count // 2 + 1)}
                    )
                }
            )
            for fact in facts
        ]
    if altered in ("order", "both"):
        rnd.shuffle(facts)
    else:
        facts.sort(key=lambda fact: key_rank(fact.key))  # key order, as a record holds them
    shape = base.trace.cycles[0]
    trace = base.trace.model_copy(
        update={
            "cycles": tuple(
                shape.model_copy(
                    update={"cycle": cycle, "promoted": tuple(promoted.get(cycle, ()))}
                )
                for cycle in range(1, cycles + 1 + rnd.randrange(2))
            )
        }
    )
    return base.model_copy(update={"facts": tuple(facts), "trace": trace})


# --- the tests ------------------------------------------------------------------------------


@given(records())
def test_report_and_summary_say_what_they_said_reading_every_fact(record: RunRecord) -> None:
    html = report_body(record, built=True)
    lines = summary_lines(record)
    with the_oracle():
        assert report_body(record, built=True) == html
        assert summary_lines(record) == lines


@given(records())
def test_fact_table_lists_and_anchors_what_it_did(record: RunRecord) -> None:
    latest = latest_facts(record.facts)
    pinned = pinned_refs(record, record.facts, latest)
    assert pinned == old_pinned_refs(record)
    table = fact_table(record.facts, pinned)
    oracle = old_fact_table(record.facts, pinned)
    assert table.groups == oracle.groups
    assert list(table.anchors.items()) == list(oracle.anchors.items())
    assert all(_ref(record.facts[index]) == ref for ref, index in table.rows.items())
    assert lineage_svg(record.facts, latest, table.anchors) == old_lineage_svg(
        record.facts, table.anchors
    )


@given(st.lists(st.integers(0, 30), max_size=3 * LINEAGE_LIMIT), st.randoms())
def test_latest_facts_are_the_tail_of_a_stable_sort_by_clock(
    clocks: list[int], rnd: random.Random
) -> None:
    template = rich_records()[0].facts[0]
    if rnd.random() < 0.5:  # runs that never drop, as each key's facts are
        clocks = sorted(clocks[: len(clocks) // 2]) + sorted(clocks[len(clocks) // 2 :])
    facts = [_fact(template, ContextKey.SEEDS, f"f{i}", 1, clock) for i, clock in enumerate(clocks)]
    assert latest_facts(facts) == _sorted_latest(facts)


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ((), "facts        0"),
        ((NOTES,), "facts        1 (oracle-notes 1)"),
        ((ContextKey.SEEDS, ContextKey.SEEDS, NOTES), "facts        3 (seeds 2, oracle-notes 1)"),
        (
            (ContextKey.SEEDS, ContextKey.HYPOTHESES, ContextKey.SEEDS),  # altered: split
            "facts        3 (seeds 2, hypotheses 1)",
        ),
        (
            (NOTES, ContextKey.HYPOTHESES, ContextKey.HYPOTHESES, NOTES, ContextKey.SEEDS),
            "facts        5 (oracle-notes 2, hypotheses 2, seeds 1)",
        ),
    ],
)
def test_summary_counts_each_keys_facts_in_the_order_keys_first_appear(
    keys: tuple[AnyKey, ...], said: str
) -> None:
    base = rich_records()[1]
    facts = tuple(_fact(base.facts[0], key, f"f{i}", 1, i + 1) for i, key in enumerate(keys))
    lines = summary_lines(base.model_copy(update={"facts": facts}))
    assert [line for line in lines if line.startswith("facts ")] == [said]


class Spread:
    """Four cycles of 40 facts under three keys in turn, each citing one of the last cycle's."""

    name = "spread"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle < 4

    async def execute(self, ctx: Context, /) -> AgentEffect:
        keys = (ContextKey.HYPOTHESES, ContextKey.STRATEGIES, ContextKey.SIGNALS)
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=keys[n % 3],
                    id=f"c{ctx.cycle}-{n}",
                    content=f"fact {n} of cycle {ctx.cycle}",
                    provenance=self.name,
                    evidence=(f"{keys[n % 3].value}/c{ctx.cycle - 1}-{n}",) if ctx.cycle else (),
                )
                for n in range(40)
            ]
        )


async def test_runs_and_their_forks_render_as_the_oracle_and_hold_each_key_in_clock_order() -> None:
    engine = Engine()
    engine.register_suggestor(Spread())
    seeds = [
        ProposedFact(key=ContextKey.SEEDS, id=f"s{n}", content="in", provenance="in")
        for n in range(30)
    ]
    parent = RunRecord.of(await engine.run(inputs=seeds))
    fork = RunRecord.of(
        await engine.fork(
            parent,
            at_cycle=2,
            retract=["strategies/c1-1"],
            cascade=True,
            inputs=[ProposedFact(key=ContextKey.SIGNALS, id="late", content="x", provenance="in")],
        )
    )
    assert fork.lineage is not None
    assert len(parent.facts) > LINEAGE_LIMIT
    for record in (parent, fork):
        for _, start, end in key_spans(record.facts):
            clocks = [fact.promotion.clock for fact in record.facts[start:end]]
            assert clocks == sorted(clocks)
        html, lines = report_body(record, built=True), summary_lines(record)
        with the_oracle():
            assert (report_body(record, built=True), summary_lines(record)) == (html, lines)
