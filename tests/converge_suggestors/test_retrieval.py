"""RetrievalSuggestor: top-k similar corpus facts per query, vectors cached by fact digest."""

import itertools
import math
import sys
import threading
import time
from collections.abc import Sequence

import anyio
import pytest

from converge import ContextKey, ContextSnapshot, ConvergeResult, Engine, ProposedFact, Suggestor
from converge_suggestors import Embedder, HashingEmbedder, MiniLmEmbedder, RetrievalSuggestor
from tests.doubles import fact

SEEDS = ContextKey.SEEDS
SIGNALS = ContextKey.SIGNALS
HYPOTHESES = ContextKey.HYPOTHESES

CORPUS = {
    "password": "To change your login password, open Settings and choose Security.",
    "holidays": "Our office is closed on public holidays.",
    "revenue": "Quarterly revenue grew by twelve percent.",
    "bananas": "Bananas are rich in potassium.",
    "shipping": "Orders ship within two business days by courier.",
}


class CountingEmbedder:
    """Records every text it embeds, delegating to a hashing embedder."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._inner = HashingEmbedder()

    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        self.calls.append(list(texts))
        return self._inner.embed(texts)

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]


def corpus(**texts: str) -> list[ProposedFact]:
    return [
        fact(SIGNALS, ident, text, provenance="input") for ident, text in (texts or CORPUS).items()
    ]


def query(ident: str, content: str) -> ProposedFact:
    return fact(SEEDS, ident, content, provenance="input")


def retrieval(embedder: Embedder | None = None, **options: object) -> RetrievalSuggestor:
    return RetrievalSuggestor(
        SIGNALS,
        SEEDS,
        embedder=embedder or HashingEmbedder(),
        **options,  # pyright: ignore[reportArgumentType]
    )


async def run(
    suggestor: RetrievalSuggestor, *inputs: ProposedFact, context: ContextSnapshot | None = None
) -> ConvergeResult:
    engine = Engine()
    engine.register_suggestor(suggestor)
    result = await engine.run(inputs=list(inputs), context=context)
    assert result.converged, result.detail
    return result


def matches(result: ConvergeResult, query_id: str) -> list[str]:
    """The corpus ids proposed for one query, best first."""
    found = [
        (-f.confidence, f.id.rsplit(":", 1)[1])
        for f in result.context.get(HYPOTHESES)
        if f.id.split(":")[1] == query_id
    ]
    return [ident for _, ident in sorted(found)]


# --- HashingEmbedder ---------------------------------------------------------------------


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    texts = ["Reset the password", "Bananas are yellow", ""]
    first = HashingEmbedder(64).embed(texts)
    assert first == HashingEmbedder(64).embed(texts)
    assert [len(vector) for vector in first] == [64, 64, 64]
    assert math.isclose(math.fsum(v * v for v in first[0]), 1.0)
    assert all(value == 0.0 for value in first[2])


def test_hashing_embedder_scores_shared_words_above_unrelated_text() -> None:
    a, b, c = HashingEmbedder().embed(["reset my password", "password reset help", "ripe bananas"])

    def cosine(x: Sequence[float], y: Sequence[float]) -> float:
        return math.fsum(p * q for p, q in zip(x, y, strict=True))

    assert cosine(a, b) > 0.5 > cosine(a, c)


@pytest.mark.parametrize(
    ("options", "message"), [({"dimensions": 0}, "dimensions"), ({"ngram": -1}, "ngram")]
)
def test_hashing_embedder_refuses_bad_settings(options: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HashingEmbedder(**options)


# --- RetrievalSuggestor with the hashing embedder ----------------------------------------


def test_retrieval_suggestor_shape() -> None:
    suggestor = retrieval()
    assert isinstance(suggestor, Suggestor)
    assert isinstance(suggestor.embedder, Embedder)
    assert suggestor.name == "retrieval"
    assert tuple(suggestor.dependencies) == (SIGNALS, SEEDS)
    assert tuple(suggestor.writes) == (HYPOTHESES,)


async def test_retrieval_suggestor_proposes_the_top_k_with_similarity_as_confidence() -> None:
    result = await run(retrieval(k=2), *corpus(), query("q1", "I forgot my login password"))
    assert matches(result, "q1")[0] == "password"
    hypotheses = result.context.get(HYPOTHESES)
    assert len(hypotheses) == 2
    best = result.context.find(HYPOTHESES, "retrieval:q1:password")
    assert best is not None
    assert isinstance(best.payload, dict)
    similarity = best.payload["similarity"]
    assert isinstance(similarity, float)
    assert best.payload == {
        "query": "seeds/q1",
        "match": "signals/password",
        "similarity": similarity,
    }
    assert 0.0 < best.confidence == similarity <= 1.0
    assert round(similarity, 6) == similarity
    assert best.evidence == ("seeds/q1", "signals/password")
    assert best.provenance == "retrieval"
    assert best.content == (
        f"signals/password matches seeds/q1 (similarity {similarity:.3f}): {CORPUS['password']}"
    )


async def test_retrieval_suggestor_answers_every_query() -> None:
    result = await run(
        retrieval(k=1),
        *corpus(),
        query("q1", "password settings"),
        query("q2", "bananas potassium"),
        query("q3", "orders ship by courier"),
    )
    assert [f.id for f in result.context.get(HYPOTHESES)] == [
        "retrieval:q1:password",
        "retrieval:q2:bananas",
        "retrieval:q3:shipping",
    ]


async def test_retrieval_suggestor_keeps_matches_above_min_similarity() -> None:
    result = await run(
        retrieval(k=5, min_similarity=0.3), *corpus(), query("q", "bananas potassium")
    )
    assert matches(result, "q") == ["bananas"]


async def test_retrieval_suggestor_breaks_ties_in_corpus_order_and_clamps_confidence() -> None:
    same = corpus(b="alpha beta", a="alpha beta", c="gamma delta")
    result = await run(retrieval(k=3, min_similarity=-1.0), *same, query("q", "alpha beta"))
    ids = [f.id for f in result.context.get(HYPOTHESES)]
    assert ids[:2] == ["retrieval:q:b", "retrieval:q:a"]
    assert all(0.0 <= f.confidence <= 1.0 for f in result.context.get(HYPOTHESES))


async def test_retrieval_suggestor_embeds_each_fact_once_across_cycles_and_runs() -> None:
    embedder = CountingEmbedder()
    suggestor = retrieval(embedder, k=1)
    first = await run(suggestor, *corpus(), query("q1", "password settings"))
    assert sorted(embedder.texts) == sorted([*CORPUS.values(), "password settings"])
    assert not suggestor.accepts(first.context)

    again = await run(suggestor, query("q2", "bananas"), context=first.context)
    assert embedder.texts[len(CORPUS) + 1 :] == ["bananas"]
    assert matches(again, "q2") == ["bananas"]

    calls = len(embedder.calls)
    await run(suggestor, *corpus(), query("q1", "password settings"))  # same facts, same digests
    assert len(embedder.calls) == calls


async def test_retrieval_suggestor_adds_a_later_corpus_fact_that_ranks_in_the_top_k() -> None:
    suggestor = retrieval(k=1)
    first = await run(suggestor, *corpus(), query("q", "kiwi smoothie recipe"))
    before = {f.id for f in first.context.get(HYPOTHESES)}
    later = fact(SIGNALS, "kiwi", "A kiwi smoothie recipe with yogurt.", provenance="input")
    second = await run(suggestor, later, context=first.context)
    after = {f.id for f in second.context.get(HYPOTHESES)}
    assert after - before == {"retrieval:q:kiwi"}
    assert not suggestor.accepts(second.context)


async def test_retrieval_suggestor_without_a_cache_still_converges() -> None:
    embedder = CountingEmbedder()
    result = await run(retrieval(embedder, cache_size=0, k=1), *corpus(), query("q", "bananas"))
    assert matches(result, "q") == ["bananas"]


async def test_retrieval_suggestor_evicts_the_least_recently_used_vectors() -> None:
    embedder = CountingEmbedder()
    suggestor = retrieval(embedder, cache_size=2, k=1)
    inputs = [*corpus(), query("q", "bananas")]
    first = await run(suggestor, *inputs)
    assert matches(first, "q") == ["bananas"]
    assert len(embedder.calls) == 1
    second = await run(suggestor, *inputs)
    assert second.context.merkle_root() == first.context.merkle_root()
    kept = {CORPUS["bananas"], CORPUS["shipping"]}  # the two stored last
    assert embedder.calls[1] == ["bananas", *(t for t in CORPUS.values() if t not in kept)]


async def test_retrieval_suggestor_needs_both_keys() -> None:
    suggestor = retrieval()
    result = await run(suggestor, *corpus())
    assert not result.context.has(HYPOTHESES)
    assert not suggestor.accepts(result.context)


class WrongCount:
    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        return [[1.0]]


class Ragged:
    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        return [[1.0] * (index + 1) for index, _ in enumerate(texts)]


class NotFinite:
    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        return [[math.nan] for _ in texts]


@pytest.mark.parametrize(
    ("embedder", "error"),
    [
        (WrongCount(), "ValueError: retrieval: the embedder returned 1 vectors for 3 texts"),
        (Ragged(), "ValueError: retrieval: the embedder returned vectors of different or zero"),
        (NotFinite(), "ValueError: retrieval: the embedder returned a non-finite value"),
    ],
)
async def test_retrieval_suggestor_fails_on_a_broken_embedder(
    embedder: Embedder, error: str
) -> None:
    engine = Engine()
    engine.register_suggestor(retrieval(embedder))
    result = await engine.run(inputs=[*corpus(a="x", b="y"), query("q", "z")])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert execution.error is not None
    assert execution.error.startswith(error)


class SlowEmbedder:
    """A hashing embedder that takes `seconds` per call, holding its thread (not the loop)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.threads: list[int] = []
        self._inner = HashingEmbedder()

    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        self.threads.append(threading.get_ident())
        time.sleep(self.seconds)
        return self._inner.embed(texts)


async def test_retrieval_suggestor_embeds_in_a_worker_thread() -> None:
    embedder = SlowEmbedder(0.0)
    await run(retrieval(embedder), *corpus(), query("q", "How do I change my password?"))
    assert embedder.threads
    assert threading.get_ident() not in embedder.threads


async def test_retrieval_suggestor_leaves_the_event_loop_free_while_embedding() -> None:
    """A 300 ms embedding beside a task ticking every 5 ms: the ticks go on meanwhile."""
    embedder = SlowEmbedder(0.3)
    ticks: list[float] = []
    result = None

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await anyio.sleep(0.005)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(0.005)
        result = await run(retrieval(embedder), *corpus(), query("q", "password"))
        ticks.append(time.perf_counter())
        group.cancel_scope.cancel()
    assert result is not None
    assert matches(result, "q")
    assert max(later - earlier for earlier, later in itertools.pairwise(ticks)) < 0.1


@pytest.mark.parametrize(
    ("corpus_key", "query_key", "options", "message"),
    [
        (SEEDS, SEEDS, {}, "corpus_key and query_key must differ"),
        (HYPOTHESES, SEEDS, {}, "it writes hypotheses, so it cannot read them"),
        (SIGNALS, SEEDS, {"k": 0}, "k must be at least 1"),
        (SIGNALS, SEEDS, {"min_similarity": 1.5}, "min_similarity must be within"),
        (SIGNALS, SEEDS, {"cache_size": -1}, "cache_size must be 0 or more"),
    ],
)
def test_retrieval_suggestor_refuses_bad_settings(
    corpus_key: ContextKey, query_key: ContextKey, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RetrievalSuggestor(corpus_key, query_key, embedder=HashingEmbedder(), **options)  # pyright: ignore[reportArgumentType]


# --- the real model ------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_embedder_gives_unit_vectors_of_384_dimensions(minilm: MiniLmEmbedder) -> None:
    first = minilm.embed(["The cat sat on the mat.", "Stock prices fell sharply."])
    assert [len(vector) for vector in first] == [384, 384]
    assert math.isclose(math.fsum(v * v for v in first[0]), 1.0, rel_tol=1e-5)
    assert minilm.embed([]) == []
    assert repr(minilm) == "MiniLmEmbedder(device='cpu', batch_size=32)"


@pytest.mark.slow
async def test_retrieval_with_minilm_finds_the_obviously_closest_sentence(
    minilm: MiniLmEmbedder,
) -> None:
    suggestor = RetrievalSuggestor(SIGNALS, SEEDS, embedder=minilm, k=1)
    result = await run(
        suggestor,
        *corpus(),
        query("reset", "How can I reset my account credentials?"),
        query("fruit", "Which fruit is a good source of minerals?"),
        query("delivery", "How long until my parcel arrives?"),
        query("closed", "Are you open on Christmas day?"),
        query("growth", "How did sales do last quarter?"),
    )
    assert {f.id for f in result.context.get(HYPOTHESES)} == {
        "retrieval:reset:password",
        "retrieval:fruit:bananas",
        "retrieval:delivery:shipping",
        "retrieval:closed:holidays",
        "retrieval:growth:revenue",
    }
    assert all(f.confidence > 0.2 for f in result.context.get(HYPOTHESES))


@pytest.mark.slow
async def test_retrieval_with_minilm_ranks_by_meaning_not_shared_words(
    minilm: MiniLmEmbedder,
) -> None:
    suggestor = RetrievalSuggestor(SIGNALS, SEEDS, embedder=minilm, k=5)
    result = await run(suggestor, *corpus(), query("q", "I can't log in to my account"))
    ranked = matches(result, "q")
    assert ranked[0] == "password"
    scores = {f.id.rsplit(":", 1)[1]: f.confidence for f in result.context.get(HYPOTHESES)}
    assert scores["password"] > 0.4
    assert scores["password"] > 2 * scores.get("bananas", 0.0)


def test_minilm_embedder_names_the_extra_when_torch_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    pattern = (
        r"MiniLmEmbedder needs torch: install the 'retrieval' extra "
        r"\(pip install \"converge-engine\[retrieval\]\"\)"
    )
    with pytest.raises(ImportError, match=pattern):
        MiniLmEmbedder()
    with pytest.raises(ImportError, match=pattern):
        RetrievalSuggestor(SIGNALS, SEEDS)
    assert RetrievalSuggestor(SIGNALS, SEEDS, embedder=HashingEmbedder()).name == "retrieval"
