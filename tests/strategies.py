"""Shared Hypothesis strategies and small, deterministic test suggestors.

Every suggestor here is a plain class satisfying `converge.Suggestor`. What it proposes is a
function of the snapshot it is shown and nothing else, so a formation built from them must
give the same facts, order and Merkle root on every run, whatever the timing. Timing is the
one thing allowed to vary: each `execute` first sleeps for a delay drawn from a seeded
`Latency`, so two runs with different seeds finish their suggestors in different orders.
"""

from __future__ import annotations

import random
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, final

import anyio
from hypothesis import strategies as st
from pydantic import JsonValue

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    Engine,
    Fact,
    ProposedFact,
    Suggestor,
)

__all__ = [
    "AlwaysNew",
    "AlwaysNewSpec",
    "ConflictMode",
    "DeriveEach",
    "DeriveSpec",
    "FixedProposals",
    "FixedSpec",
    "FormationSpec",
    "Latency",
    "ReactOnce",
    "ReactSpec",
    "SeedOnce",
    "SeedSpec",
    "SuggestorSpec",
    "arbitrary_proposals",
    "blank_texts",
    "build_engine",
    "colliding_proposals",
    "conflict_modes",
    "contents",
    "fact_keys",
    "formations",
    "invalid_ids",
    "keys",
    "latency_seeds",
    "non_proposal_keys",
    "payloads",
    "proposals",
    "same_claim",
    "surrogate_texts",
    "unique_inputs",
    "valid_ids",
    "valid_proposals",
]

ConflictMode = Literal["stop", "reject"]

# -- keys, ids and texts ---------------------------------------------------------------------

ALL_KEYS: Final[tuple[ContextKey, ...]] = tuple(ContextKey)
keys: Final = st.sampled_from(ALL_KEYS)
"""Any context key."""
fact_keys: Final = st.one_of(st.sampled_from((ContextKey.SEEDS, ContextKey.HYPOTHESES)), keys)
"""Any key, but often one of two, so that independently drawn facts often collide."""
non_proposal_keys: Final = st.sampled_from(
    tuple(key for key in ContextKey if key is not ContextKey.PROPOSALS)
)
"""Any key but `PROPOSALS`: the keys a staged proposal may target."""

INVISIBLE_CHARACTERS: Final = (
    "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff"
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""Zero-width and bidirectional control characters: the gate refuses ids holding one."""
ID_ALPHABET: Final = string.ascii_letters + string.digits + "-_.:/@#"
"""Characters of generated ids. `~` is left out: it marks the ids of `AlwaysNew`."""
SMALL_IDS: Final = ("a", "b", "c", "d")
"""A small pool, so that independently drawn facts often share a key and id."""

_small_ids: Final = st.sampled_from(SMALL_IDS)
valid_ids: Final = st.one_of(
    *[_small_ids] * 5,
    st.text(ID_ALPHABET, min_size=1, max_size=12),
    st.text(
        st.characters(
            exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"),
            exclude_characters="~" + INVISIBLE_CHARACTERS,
        ),
        min_size=1,
        max_size=8,
    ).filter(
        lambda text: (
            not any(char.isspace() for char in text) and unicodedata.is_normalized("NFC", text)
        )
    ),
    st.text(ID_ALPHABET, min_size=256, max_size=256),
)
"""Ids the engine gate accepts: non-empty, at most 256 characters, no whitespace, controls or
invisible characters, in NFC (validation normalises ids to NFC, so others would change)."""

_BAD_ID_CHARACTERS: Final = st.sampled_from(
    (" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x00", "\x1b", "\x7f", "\x85", "\u00a0", "\u2028")
)


@st.composite
def _ids_with_a_bad_character(draw: st.DrawFn) -> str:
    head = draw(st.text(ID_ALPHABET, max_size=6))
    tail = draw(st.text(ID_ALPHABET, max_size=6))
    return head + draw(_BAD_ID_CHARACTERS) + tail


invalid_ids: Final = st.one_of(
    st.just(""),
    _ids_with_a_bad_character(),
    st.text(ID_ALPHABET, min_size=257, max_size=300),
)
"""Ids the engine gate refuses: empty, over 256 characters, or holding whitespace/controls."""

blank_texts: Final = st.text(" \t\n\r\x0b\x0c\u00a0\u2003\u3000", max_size=4)
"""Content or provenance that is empty or whitespace only."""
contents: Final = st.one_of(
    st.sampled_from(("x", "y", "z")),
    st.text(min_size=1, max_size=20).filter(lambda text: bool(text.strip())),
)
"""Non-blank texts, often from a small pool (so proposals are often identical)."""
provenances: Final = st.one_of(
    st.sampled_from(("input:crm", "gpt-4o:run-17", "rule")),
    st.text(min_size=1, max_size=12).filter(lambda text: bool(text.strip())),
)
"""Non-blank provenance."""
surrogate_texts: Final = st.tuples(
    st.text(string.ascii_letters, max_size=3),
    st.text(st.characters(categories=("Cs",)), min_size=1, max_size=2),
).map("".join)
"""Texts holding a lone surrogate: a Python `str`, but not encodable as UTF-8."""
confidences: Final = st.one_of(st.just(1.0), st.floats(min_value=0.0, max_value=1.0))
evidence: Final = st.lists(st.text(max_size=12), max_size=3).map(tuple)

_scalars: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
payloads: Final[st.SearchStrategy[JsonValue]] = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=4), children, max_size=3),
    ),
    max_leaves=8,
)
"""JSON values with finite numbers only (what `ProposedFact.payload` accepts)."""
optional_payloads: Final = st.one_of(st.none(), st.none(), payloads)

# -- proposals -------------------------------------------------------------------------------


@st.composite
def valid_proposals(
    draw: st.DrawFn, key: st.SearchStrategy[ContextKey] = fact_keys
) -> ProposedFact:
    """Proposals the engine gate accepts (from a suggestor that may write anywhere)."""
    drawn = draw(key)
    target = draw(non_proposal_keys) if drawn is ContextKey.PROPOSALS else None
    return ProposedFact(
        key=drawn,
        id=draw(valid_ids),
        content=draw(contents),
        provenance=draw(provenances),
        payload=draw(optional_payloads),
        confidence=draw(confidences),
        target=target,
        evidence=draw(evidence),
    )


@st.composite
def arbitrary_proposals(draw: st.DrawFn) -> ProposedFact:
    """Any constructible proposal: bad ids, blank content or provenance, misplaced targets."""
    return ProposedFact(
        key=draw(fact_keys),
        id=draw(st.one_of(valid_ids, invalid_ids)),
        content=draw(st.one_of(contents, blank_texts)),
        provenance=draw(st.one_of(provenances, blank_texts)),
        payload=draw(optional_payloads),
        confidence=draw(confidences),
        target=draw(st.one_of(st.none(), keys)),
        evidence=draw(evidence),
    )


colliding_proposals: Final = st.builds(
    ProposedFact,
    key=st.sampled_from((ContextKey.SEEDS, ContextKey.HYPOTHESES)),
    id=_small_ids,
    content=st.sampled_from(("x", "y")),
    provenance=st.sampled_from(("p", "q")),
)
"""Valid proposals from a pool of 8 slots and 2 contents: often identical, often in conflict."""
proposals: Final = st.one_of(valid_proposals(), arbitrary_proposals(), colliding_proposals)
"""Valid proposals, anything a caller could build (often refused by the gate), and collisions."""


def unique_inputs(
    elements: st.SearchStrategy[ProposedFact] = proposals, *, max_size: int = 12
) -> st.SearchStrategy[list[ProposedFact]]:
    """Lists of proposals no two of which share a key and id."""
    return st.lists(elements, max_size=max_size, unique_by=lambda p: (p.key, p.id))


def same_claim(fact: Fact, proposal: ProposedFact) -> bool:
    """Whether `fact` carries every field of `proposal` unchanged."""
    return (
        fact.key is proposal.key
        and fact.id == proposal.id
        and fact.content == proposal.content
        and fact.payload == proposal.payload
        and fact.confidence == proposal.confidence
        and fact.provenance == proposal.provenance
        and fact.target is proposal.target
        and fact.evidence == proposal.evidence
    )


# -- timing ----------------------------------------------------------------------------------

DELAYS: Final = (0.0, 0.0, 0.0001, 0.0003, 0.001)
"""Seconds a suggestor may sleep before it answers."""
latency_seeds: Final = st.integers(min_value=0, max_value=2**32 - 1)


@final
class Latency:
    """Seeded random delays, one per `execute`; without a seed, no delay at all."""

    __slots__ = ("_rng",)

    def __init__(self, seed: int | None = None) -> None:
        self._rng = None if seed is None else random.Random(seed)

    async def pause(self) -> None:
        """Sleep for the next delay of this run."""
        if self._rng is not None:
            await anyio.sleep(self._rng.choice(DELAYS))


# -- test suggestors -------------------------------------------------------------------------


@final
class SeedOnce:
    """Proposes one fact while it is absent; no dependencies, writes only its key."""

    def __init__(
        self, name: str, key: ContextKey, fact_id: str, content: str, latency: Latency
    ) -> None:
        self._name, self._key, self._id, self._content = name, key, fact_id, content
        self._latency = latency

    @property
    def name(self) -> str:
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        return ()

    @property
    def writes(self) -> Sequence[ContextKey]:
        return (self._key,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(self._key, self._id) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await self._latency.pause()
        return AgentEffect.with_proposal(
            ProposedFact(key=self._key, id=self._id, content=self._content, provenance=self._name)
        )


@final
class ReactOnce:
    """Once `source` holds facts, proposes one fact under `target`, citing them all."""

    def __init__(
        self,
        name: str,
        source: ContextKey,
        target: ContextKey,
        fact_id: str,
        content: str,
        latency: Latency,
    ) -> None:
        self._name, self._source, self._target = name, source, target
        self._id, self._content, self._latency = fact_id, content, latency

    @property
    def name(self) -> str:
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        return (self._source,)

    @property
    def writes(self) -> Sequence[ContextKey]:
        return (self._target,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.has(self._source) and ctx.find(self._target, self._id) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await self._latency.pause()
        cited = tuple(fact.ref for fact in ctx.get(self._source))
        return AgentEffect.with_proposal(
            ProposedFact(
                key=self._target,
                id=self._id,
                content=self._content,
                provenance=self._name,
                evidence=cited,
            )
        )


@final
class DeriveEach:
    """For every fact under `source`, proposes `"{tag}.{id}"` under `target` if it is absent."""

    def __init__(
        self, name: str, tag: str, source: ContextKey, target: ContextKey, latency: Latency
    ) -> None:
        self._name, self._tag, self._source, self._target = name, tag, source, target
        self._latency = latency

    @property
    def name(self) -> str:
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        return (self._source,)

    def _missing(self, ctx: Context) -> list[Fact]:
        return [
            fact
            for fact in ctx.get(self._source)
            if ctx.find(self._target, f"{self._tag}.{fact.id}") is None
        ]

    def accepts(self, ctx: Context, /) -> bool:
        return bool(self._missing(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await self._latency.pause()
        return AgentEffect.with_proposals(
            ProposedFact(
                key=self._target,
                id=f"{self._tag}.{fact.id}",
                content=f"{self._tag} of {fact.ref}",
                provenance=self._name,
                target=ContextKey.SEEDS if self._target is ContextKey.PROPOSALS else None,
                evidence=(fact.ref,),
            )
            for fact in self._missing(ctx)
        )


@final
class FixedProposals:
    """Always willing; proposes the same list every time, whatever the context holds."""

    def __init__(
        self,
        name: str,
        dependencies: tuple[ContextKey, ...],
        writes: tuple[ContextKey, ...] | None,
        proposals: tuple[ProposedFact, ...],
        latency: Latency,
    ) -> None:
        self._name, self._dependencies, self._proposals = name, dependencies, proposals
        self._latency = latency
        if writes is not None:
            self.writes: Sequence[ContextKey] = writes

    @property
    def name(self) -> str:
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        return self._dependencies

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await self._latency.pause()
        return AgentEffect.with_proposals(self._proposals)


@final
class AlwaysNew:
    """Never lets the run settle: every call proposes a fact with a fresh id (`~name@version`)."""

    def __init__(self, name: str, key: ContextKey, latency: Latency) -> None:
        self._name, self._key, self._latency = name, key, latency

    @property
    def name(self) -> str:
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        return ()

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await self._latency.pause()
        target = ContextKey.SEEDS if self._key is ContextKey.PROPOSALS else None
        return AgentEffect.with_proposal(
            ProposedFact(
                key=self._key,
                id=f"~{self._name}@{ctx.version}",
                content="fresh",
                provenance=self._name,
                target=target,
            )
        )


# -- formations: blueprints that build fresh suggestors for each run --------------------------


@dataclass(frozen=True)
class SeedSpec:
    key: ContextKey
    fact_id: str
    content: str

    def build(self, name: str, latency: Latency) -> Suggestor:
        return SeedOnce(name, self.key, self.fact_id, self.content, latency)


@dataclass(frozen=True)
class ReactSpec:
    source: ContextKey
    target: ContextKey
    fact_id: str
    content: str

    def build(self, name: str, latency: Latency) -> Suggestor:
        return ReactOnce(name, self.source, self.target, self.fact_id, self.content, latency)


@dataclass(frozen=True)
class DeriveSpec:
    tag: str
    source: ContextKey
    target: ContextKey

    def build(self, name: str, latency: Latency) -> Suggestor:
        return DeriveEach(name, self.tag, self.source, self.target, latency)


@dataclass(frozen=True)
class FixedSpec:
    dependencies: tuple[ContextKey, ...]
    writes: tuple[ContextKey, ...] | None
    proposals: tuple[ProposedFact, ...]

    def build(self, name: str, latency: Latency) -> Suggestor:
        return FixedProposals(name, self.dependencies, self.writes, self.proposals, latency)


@dataclass(frozen=True)
class AlwaysNewSpec:
    key: ContextKey

    def build(self, name: str, latency: Latency) -> Suggestor:
        return AlwaysNew(name, self.key, latency)


SuggestorSpec = SeedSpec | ReactSpec | DeriveSpec | FixedSpec | AlwaysNewSpec


@dataclass(frozen=True)
class FormationSpec:
    """An ordered list of suggestor blueprints; `build` makes fresh suggestors for one run."""

    specs: tuple[SuggestorSpec, ...]

    def build(self, latency: Latency) -> list[Suggestor]:
        """Fresh suggestors named `s0`, `s1`, ... in registration order."""
        return [spec.build(f"s{index}", latency) for index, spec in enumerate(self.specs)]

    @property
    def always_new(self) -> bool:
        """Whether some suggestor adds a fresh fact on every call."""
        return any(isinstance(spec, AlwaysNewSpec) for spec in self.specs)


seed_specs: Final = st.builds(SeedSpec, fact_keys, valid_ids, contents)
react_specs: Final = st.builds(ReactSpec, fact_keys, fact_keys, valid_ids, contents)
derive_specs: Final = st.builds(
    DeriveSpec, st.sampled_from(("d", "e", "f")), non_proposal_keys, keys
)
fixed_specs: Final = st.builds(
    FixedSpec,
    st.lists(keys, max_size=2, unique=True).map(tuple),
    st.one_of(st.none(), st.lists(keys, min_size=1, max_size=4, unique=True).map(tuple)),
    st.lists(st.one_of(colliding_proposals, proposals), min_size=1, max_size=4).map(tuple),
)
always_new_specs: Final = st.builds(AlwaysNewSpec, keys)

_settling_specs: Final[st.SearchStrategy[SuggestorSpec]] = st.one_of(
    seed_specs, react_specs, derive_specs, fixed_specs, fixed_specs
)


@st.composite
def formations(
    draw: st.DrawFn, *, always_new: bool | None = False, max_size: int = 6
) -> FormationSpec:
    """Small formations of the suggestors above.

    With `always_new=True` they hold at least one `AlwaysNew` (so they never settle), with
    `False` none, and with `None` Hypothesis decides.
    """
    specs: list[SuggestorSpec] = draw(st.lists(_settling_specs, max_size=max_size))
    if always_new is None:
        always_new = draw(st.booleans())
    if always_new:
        for spec in draw(st.lists(always_new_specs, min_size=1, max_size=2)):
            specs.insert(draw(st.integers(min_value=0, max_value=len(specs))), spec)
    return FormationSpec(tuple(specs))


conflict_modes: Final[st.SearchStrategy[ConflictMode]] = st.sampled_from(("stop", "reject"))

DEFAULT_BUDGET: Final = Budget(max_cycles=8, max_facts=200)


def build_engine(
    formation: FormationSpec,
    *,
    latency: Latency | None = None,
    budget: Budget = DEFAULT_BUDGET,
    max_concurrency: int | None = None,
    on_conflict: ConflictMode = "reject",
) -> Engine:
    """An engine with `formation` registered in order (suggestor ids 0, 1, 2, ...)."""
    engine = Engine(budget=budget, max_concurrency=max_concurrency, on_conflict=on_conflict)
    for suggestor in formation.build(latency or Latency()):
        engine.register_suggestor(suggestor)
    return engine
