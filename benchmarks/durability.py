"""W5 durability: what saving a run after every cycle costs, in time and in bytes.

The journal workload: one suggestor with no dependencies proposes 10 new facts (a short
claim and a small JSON payload each) per cycle while fewer than 2,000 exist: 200 productive
cycles and a final one that finds nothing to do. It runs with `durability="cycle"` on
SQLite (`synchronous="normal"` and `"full"`) and, when `DATABASE_URL` is set, on PostgreSQL;
beside it the same run without a store and with `durability="exit"`. The configurations
alternate round by round in one process, so drift in the machine hits all of them alike.

The store is wrapped in `TimedStore`, which times every `save_progress` (one per cycle,
plus the save that claims the run before cycle 1) and `save` (the finished record) and
forwards everything else. The time inside `save_progress` is the store's: building the
progress (the journal delta, its JSON and digest, the signed head) happens in the engine
before the call; the difference of whole-run times against the run without a store shows
all of it.

Bytes are measured once, untimed, on a fresh SQLite file (and on PostgreSQL): right after
the save of cycle 200 (the run in progress: its head and journal), and after the run
finished (its record; the journal is dropped), each against the facts' own JSON.

W1 (the chain workload of `chain.py`, the same links and start fact) also runs without a
store and with a SQLite store in each mode.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Final, Literal, final

import anyio
import anyio.to_thread

from converge import (
    AgentEffect,
    Budget,
    Checkpoint,
    Context,
    ContextKey,
    ConvergeResult,
    Durability,
    Engine,
    FactRecord,
    PostgresRunStore,
    ProposedFact,
    RunProgress,
    RunRecord,
    RunStatus,
    RunStore,
    RunSummary,
    SqliteRunStore,
    StopReason,
)
from converge.stores._sqlite_wal import truncate

from . import chain
from ._common import Figures, Settings, median, prepare, progress, quartiles, rounded

__all__ = ["TimedStore", "Writer", "measure"]

PER_CYCLE: Final = 10
TOTAL: Final = 2_000
CYCLES: Final = TOTAL // PER_CYCLE
WINDOW: Final = 20
_KEY: Final = ContextKey.HYPOTHESES
_BUDGET: Final = Budget(max_cycles=1_000, max_facts=5_000)
_CHAIN_BUDGET: Final = Budget(max_cycles=1_000)  # as `chain.py`'s
_CHAIN_START: Final = ProposedFact(
    key=ContextKey.SEEDS, id="start", content="start the chain", provenance="bench"
)  # the same input fact as `chain.py`'s


@final
class Writer:
    """Proposes the next 10 facts every cycle while fewer than 2,000 exist."""

    __slots__ = ("_effects",)

    def __init__(self) -> None:
        self._effects = [
            AgentEffect.with_proposals(
                ProposedFact(
                    key=_KEY,
                    id=f"obs-{n:04d}",
                    content=f"observation {n}: the reading of sensor {n % 13} is within band",
                    provenance="writer",
                    payload={"n": n, "score": round(n / 7, 4), "sensor": f"s-{n % 13}"},
                    confidence=0.9,
                )
                for n in range(first, first + PER_CYCLE)
            )
            for first in range(0, TOTAL, PER_CYCLE)
        ]

    @property
    def name(self) -> str:
        """`writer`."""
        return "writer"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """None: a candidate in every cycle."""
        return ()

    def accepts(self, ctx: Context, /) -> bool:
        """True while fewer than 2,000 facts exist."""
        return ctx.count(_KEY) < TOTAL

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the next 10 facts (built once, up front)."""
        return self._effects[ctx.count(_KEY) // PER_CYCLE]


@final
class TimedStore:
    """A `RunStore` that times `save_progress` and `save` on the store it wraps.

    `progress_times` holds `(cycle, seconds)` per `save_progress`, `save_times` the seconds
    of each `save`; `after_progress`, if set, is called (untimed) after each `save_progress`.
    """

    __slots__ = ("_inner", "after_progress", "progress_times", "save_times")

    def __init__(self, inner: RunStore) -> None:
        self._inner = inner
        self.progress_times: list[tuple[int, float]] = []
        self.save_times: list[float] = []
        self.after_progress: Callable[[RunProgress], None] | None = None

    def reset(self) -> None:
        """Forget the timings of the previous run."""
        self.progress_times.clear()
        self.save_times.clear()

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Forward, timed."""
        started = perf_counter()
        version = await self._inner.save(record, expected_version=expected_version)
        self.save_times.append(perf_counter() - started)
        return version

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        """Forward, timed."""
        started = perf_counter()
        version = await self._inner.save_progress(progress, expected_version=expected_version)
        self.progress_times.append((progress.head.cycle, perf_counter() - started))
        if self.after_progress is not None:
            self.after_progress(progress)
        return version

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        """Forward."""
        await self._inner.renew_lease(run_id, version=version, lease_seconds=lease_seconds)

    async def load(self, run_id: str, /) -> RunRecord:
        """Forward."""
        return await self._inner.load(run_id)

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        """Forward."""
        return await self._inner.list_runs(limit=limit)

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """Forward."""
        return await self._inner.load_checkpoint(run_id)


# -- configurations ---------------------------------------------------------------------------


@final
@dataclass(slots=True)
class Config:
    """One way of running a workload: an engine, and the timed store it saves to (if any)."""

    name: str
    engine: Engine
    store: TimedStore | None
    durability: Durability | None
    runs: list[float]
    results: list[ConvergeResult]
    run_ids: list[str]


@final
class Backends:
    """The stores of one invocation: SQLite files in a temporary folder, PostgreSQL if set."""

    __slots__ = ("_closers", "_pg_runs", "directory", "dsn")

    def __init__(self, directory: Path, dsn: str | None) -> None:
        self.directory = directory
        self.dsn = dsn
        self._closers: list[Callable[[], None]] = []
        self._pg_runs: list[str] = []

    def sqlite(self, name: str, synchronous: Literal["normal", "full"]) -> SqliteRunStore:
        """A SQLite store in a new file of the folder."""
        store = SqliteRunStore(self.directory / f"{name}.db", synchronous=synchronous)
        self._closers.append(store.close)
        return store

    def postgres(self) -> PostgresRunStore:
        """A PostgreSQL store on `DATABASE_URL`."""
        if self.dsn is None:
            raise RuntimeError("W5: no DATABASE_URL")
        store = PostgresRunStore(self.dsn)
        self._closers.append(store.close)
        return store

    def forget_postgres_run(self, run_id: str) -> None:
        """Delete `run_id` from PostgreSQL when the benchmark ends."""
        self._pg_runs.append(run_id)

    def close(self) -> None:
        """Close every store and delete the benchmark's runs from PostgreSQL."""
        for close in self._closers:
            close()
        if self.dsn is not None and self._pg_runs:
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True) as connection:
                runs = (self._pg_runs,)
                connection.execute("DELETE FROM converge_journal WHERE run_id = ANY(%s)", runs)
                connection.execute("DELETE FROM converge_runs WHERE run_id = ANY(%s)", runs)


def _config(
    name: str,
    register: Callable[[Engine], None],
    saving: tuple[RunStore, Durability] | None,
    budget: Budget = _BUDGET,
) -> Config:
    """An engine with the suggestors `register` adds, saving to a timed store if `saving`."""
    if saving is None:
        engine, timed, durability = Engine(budget=budget), None, None
    else:
        store, durability = saving
        timed = TimedStore(store)
        engine = Engine(budget=budget, store=timed, durability=durability)
    register(engine)
    return Config(name, engine, timed, durability, [], [], [])


def _rotation(configs: Sequence[Config], round_index: int) -> Iterator[Config]:
    """The configurations, starting one further each round (no fixed first or last)."""
    shift = round_index % len(configs)
    yield from (*configs[shift:], *configs[:shift])


async def _timed_run(config: Config, inputs: Sequence[ProposedFact]) -> ConvergeResult:
    if config.store is not None:
        config.store.reset()
    prepare()
    started = perf_counter()
    result = await config.engine.run(inputs=inputs)
    config.runs.append(perf_counter() - started)
    config.results.append(result)
    config.run_ids.append(result.run_id)
    return result


async def _rounds(
    configs: Sequence[Config],
    settings: Settings,
    inputs: Sequence[ProposedFact],
    check: Callable[[ConvergeResult], int],
    collect: Callable[[Config], None],
) -> None:
    """Warm up every configuration, then time `settings.runs` rounds of all of them."""
    for round_index in range(settings.warmups):
        for config in _rotation(configs, round_index):
            result = await config.engine.run(inputs=inputs)
            config.run_ids.append(result.run_id)
            check(result)
    for config in configs:
        config.runs.clear()
        config.results.clear()
    for round_index in range(settings.runs):
        for config in _rotation(configs, round_index):
            check(await _timed_run(config, inputs))
            collect(config)


# -- the journal workload ---------------------------------------------------------------------


def _check_journal(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or len(result.context) != TOTAL:
        raise RuntimeError(f"W5 did not run as designed: {result!r}")
    return result.cycles


@final
@dataclass(slots=True)
class SaveStats:
    """Per-run statistics of one configuration's `save_progress` and `save` times."""

    medians: list[float]
    first: list[float]
    last: list[float]
    claims: list[float]
    finals: list[float]
    pooled: list[float]
    totals: list[float]
    """Per run: the seconds spent inside the store (every `save_progress` and `save`)."""

    @classmethod
    def empty(cls) -> SaveStats:
        """No runs yet."""
        return cls([], [], [], [], [], [], [])

    def add(self, store: TimedStore, cycles: int) -> None:
        """Take the timings of the run just made through `store`.

        The run saved `cycles` productive cycles once each, after the save claiming it.
        """
        if store.save_times:
            self.finals.append(store.save_times[-1])
        times = store.progress_times
        self.totals.append(sum(store.save_times) + sum(seconds for _, seconds in times))
        if not times:
            return
        saved = [cycle for cycle, _ in times]
        if saved != list(range(cycles + 1)):
            raise RuntimeError(f"W5 saved cycles {saved}, expected 0 to {cycles}")
        per_cycle = [seconds for _, seconds in times[1:]]
        self.claims.append(times[0][1])
        self.medians.append(median(per_cycle))
        self.first.append(median(per_cycle[:WINDOW]))
        self.last.append(median(per_cycle[-WINDOW:]))
        self.pooled.extend(per_cycle)

    def figures(self) -> Figures:
        """Milliseconds, medians over runs (each run's own median first)."""
        figures: Figures = {}
        if self.finals:
            figures["final_save_ms"] = rounded(median(self.finals) * 1e3, 3)
        if not self.medians:
            return figures
        pooled = sorted(self.pooled)
        ratios = [late / early for late, early in zip(self.last, self.first, strict=True)]
        figures.update(
            {
                "save_ms": rounded(median(self.medians) * 1e3, 3),
                "save_ms_quartiles": quartiles(self.medians, 1e3),
                "save_ms_p95": rounded(pooled[int(0.95 * (len(pooled) - 1))] * 1e3, 3),
                "save_ms_max": rounded(pooled[-1] * 1e3, 3),
                "first20_save_ms": rounded(median(self.first) * 1e3, 3),
                "last20_save_ms": rounded(median(self.last) * 1e3, 3),
                "ratio_last20_first20": rounded(median(ratios), 3),
                "claim_save_ms": rounded(median(self.claims) * 1e3, 3),
            }
        )
        return figures


def _run_figures(configs: Sequence[Config], stats: dict[str, SaveStats], cycles: int) -> Figures:
    """Per configuration: µs per cycle, the added cost over the first (storeless) one, saves."""
    base = configs[0].runs
    per_cycle = 1e6 / cycles
    figures: Figures = {}
    for config in configs:
        entry: Figures = {
            "durability": config.durability,
            "run_ms": rounded(median(config.runs) * 1e3, 3),
            "us_per_cycle": rounded(median(config.runs) * per_cycle),
            "us_per_cycle_quartiles": quartiles(config.runs, per_cycle),
        }
        saves = stats[config.name]
        added = [run - bare for run, bare in zip(config.runs, base, strict=True)]
        if config is not configs[0]:
            entry["added_us_per_cycle"] = rounded(median(added) * per_cycle)
        if saves.totals:
            inside = saves.totals
            outside = [more - store for more, store in zip(added, inside, strict=True)]
            entry["in_store_us_per_cycle"] = rounded(median(inside) * per_cycle)
            entry["outside_store_us_per_cycle"] = rounded(median(outside) * per_cycle)
        entry.update(saves.figures())
        figures[config.name] = entry
    return figures


def _journal_configs(backends: Backends) -> list[Config]:
    def register(engine: Engine) -> None:
        engine.register_suggestor(Writer())

    configs = [
        _config("no_store", register, None),
        _config("sqlite_exit", register, (backends.sqlite("exit", "normal"), "exit")),
        _config("sqlite_normal", register, (backends.sqlite("normal", "normal"), "cycle")),
        _config("sqlite_full", register, (backends.sqlite("full", "full"), "cycle")),
    ]
    if backends.dsn is not None:
        configs.append(_config("postgres", register, (backends.postgres(), "cycle")))
    return configs


async def _journal(settings: Settings, backends: Backends) -> Figures:
    configs = _journal_configs(backends)
    stats = {config.name: SaveStats.empty() for config in configs}

    def collect(config: Config) -> None:
        if config.store is not None:
            stats[config.name].add(config.store, CYCLES)

    try:
        await _rounds(configs, settings, (), _check_journal, collect)
    finally:
        for config in configs:
            if config.name == "postgres":
                for run_id in config.run_ids:
                    backends.forget_postgres_run(run_id)
    cycles = configs[0].results[-1].cycles
    return {
        "facts": TOTAL,
        "facts_per_cycle": PER_CYCLE,
        "cycles": cycles,
        "saves_per_run": CYCLES + 1,
        "runs": settings.runs,
        "postgres": "measured" if backends.dsn is not None else "skipped: no DATABASE_URL",
        "configs": _run_figures(configs, stats, cycles),
    }


# -- bytes ------------------------------------------------------------------------------------


def _facts_json(result: ConvergeResult) -> int:
    """The bytes of every fact's own JSON (`FactRecord.model_dump_json()`, UTF-8)."""
    context = result.context
    return sum(
        len(FactRecord.of(fact).model_dump_json().encode())
        for key in context.keys()
        for fact in context.get(key)
    )


def _ratio(stored: int, facts_json: int) -> float:
    return rounded(stored / facts_json, 3)


def _per_fact(stored: int) -> float:
    return rounded(stored / TOTAL, 1)


@final
class SqliteFile:
    """A second connection to a store's file, to weigh rows and checkpoint the WAL."""

    __slots__ = ("_connection", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._connection = sqlite3.connect(path, isolation_level=None)

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def _int(self, statement: str, values: tuple[object, ...] = ()) -> int:
        row = self._connection.execute(statement, values).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def size(self) -> int:
        """The file's size after folding the WAL into it (`truncate`).

        `truncate` waits while the store's own checkpoint thread holds the file.
        """
        truncate(self._connection, within=5.0)
        return self.path.stat().st_size

    def free(self) -> int:
        """Bytes on the file's freelist (pages freed, to be reused by later writes)."""
        return self._int("PRAGMA freelist_count") * self._int("PRAGMA page_size")

    def stored(self, run_id: str) -> tuple[int, int, int]:
        """The bytes of the run's `record` column, its journal entries' bytes, their count."""
        record = self._int(
            "SELECT length(CAST(record AS BLOB)) FROM converge_runs WHERE run_id = ?", (run_id,)
        )
        entries = self._int(
            "SELECT sum(length(CAST(entry AS BLOB))) FROM converge_journal WHERE run_id = ?",
            (run_id,),
        )
        count = self._int("SELECT count(*) FROM converge_journal WHERE run_id = ?", (run_id,))
        return record, entries, count


@final
class PgWeigher:
    """A second PostgreSQL connection, to weigh a run's rows as text and as stored."""

    __slots__ = ("_dsn",)

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def stored(self, run_id: str) -> tuple[int, int, int, int]:
        """Text bytes of record and journal, then the same as stored (`pg_column_size`)."""
        import psycopg

        with psycopg.connect(self._dsn, autocommit=True) as connection:
            head = connection.execute(
                "SELECT octet_length(record), pg_column_size(record) FROM converge_runs "
                "WHERE run_id = %s",
                (run_id,),
            ).fetchone()
            journal = connection.execute(
                "SELECT coalesce(sum(octet_length(entry)), 0)::bigint, "
                "coalesce(sum(pg_column_size(entry)), 0)::bigint FROM converge_journal "
                "WHERE run_id = %s",
                (run_id,),
            ).fetchone()
        if head is None or journal is None:
            raise RuntimeError(f"W5: run {run_id} not found in PostgreSQL")
        return int(head[0]), int(journal[0]), int(head[1]), int(journal[1])


def _at_last_cycle(action: Callable[[str], None]) -> Callable[[RunProgress], None]:
    """A `TimedStore.after_progress` hook calling `action(run_id)` after cycle 200's save."""

    def hook(progress: RunProgress) -> None:
        head = progress.head
        if head.fact_count == TOTAL and progress.status is RunStatus.RUNNING:
            action(head.run_id)

    return hook


async def _sqlite_bytes(backends: Backends) -> Figures:
    store = backends.sqlite("bytes", "normal")
    await store.list_runs()  # creates the file and its tables
    file = SqliteFile(store.path)
    try:
        empty = file.size()
        seen: dict[str, int] = {}

        def weigh(run_id: str) -> None:
            record, entries, count = file.stored(run_id)
            seen.update(head=record, entries=entries, count=count, size=file.size())

        timed = TimedStore(store)
        timed.after_progress = _at_last_cycle(weigh)
        engine = Engine(budget=_BUDGET, store=timed)
        engine.register_suggestor(Writer())
        result = await engine.run()
        _check_journal(result)
        facts_json = _facts_json(result)
        record, left, _ = file.stored(result.run_id)
        if left:
            raise RuntimeError("W5: a finished run kept its journal")
        finished = file.size()
        freed = file.free()
        timed.after_progress = None
        second = await engine.run()  # a second run reuses the pages the first one freed
        _check_journal(second)
        after_second = file.size()
        in_progress = seen["head"] + seen["entries"]
        grown_in_progress = seen["size"] - empty
        return {
            "facts_json_bytes": facts_json,
            "facts_json_bytes_per_fact": _per_fact(facts_json),
            "in_progress": {
                "head_bytes": seen["head"],
                "journal_entries": seen["count"],
                "journal_bytes": seen["entries"],
                "bytes_per_fact": _per_fact(in_progress),
                "ratio": _ratio(in_progress, facts_json),
                "file_growth_bytes": grown_in_progress,
                "file_growth_ratio": _ratio(grown_in_progress, facts_json),
            },
            "finished": {
                "record_bytes": record,
                "bytes_per_fact": _per_fact(record),
                "ratio": _ratio(record, facts_json),
                "file_growth_bytes": finished - empty,
                "file_growth_ratio": _ratio(finished - empty, facts_json),
                "freelist_bytes": freed,
                "file_growth_less_freelist_ratio": _ratio(finished - empty - freed, facts_json),
                "next_run_file_growth_bytes": after_second - finished,
                "next_run_file_growth_ratio": _ratio(after_second - finished, facts_json),
            },
        }
    finally:
        file.close()


async def _postgres_bytes(backends: Backends) -> Figures:
    if backends.dsn is None:
        return {"skipped": "no DATABASE_URL"}
    weigher = PgWeigher(backends.dsn)
    seen: list[tuple[int, int, int, int]] = []
    timed = TimedStore(backends.postgres())
    timed.after_progress = _at_last_cycle(lambda run_id: seen.append(weigher.stored(run_id)))
    engine = Engine(budget=_BUDGET, store=timed)
    engine.register_suggestor(Writer())
    result = await engine.run()
    backends.forget_postgres_run(result.run_id)
    _check_journal(result)
    if not seen:
        raise RuntimeError("W5: cycle 200 of the PostgreSQL run was not weighed")
    facts_json = _facts_json(result)
    head, entries, head_stored, entries_stored = seen[0]
    record, _, record_stored, _ = weigher.stored(result.run_id)
    return {
        "facts_json_bytes": facts_json,
        "in_progress": {
            "text_bytes": head + entries,
            "ratio": _ratio(head + entries, facts_json),
            "stored_bytes": head_stored + entries_stored,
            "stored_ratio": _ratio(head_stored + entries_stored, facts_json),
        },
        "finished": {
            "text_bytes": record,
            "ratio": _ratio(record, facts_json),
            "stored_bytes": record_stored,
            "stored_ratio": _ratio(record_stored, facts_json),
        },
    }


# -- W1 with a store --------------------------------------------------------------------------


def _check_chain(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or len(result.context) != chain.LINKS + 1:
        raise RuntimeError(f"W5 (W1 chain) did not run as designed: {result!r}")
    return result.cycles


async def _chain(settings: Settings, backends: Backends) -> Figures:
    def register(engine: Engine) -> None:
        for index in range(chain.LINKS):
            engine.register_suggestor(chain.ChainLink(index))

    sqlite = backends.sqlite
    configs = [
        _config("no_store", register, None, _CHAIN_BUDGET),
        _config("sqlite_exit", register, (sqlite("chain-exit", "normal"), "exit"), _CHAIN_BUDGET),
        _config(
            "sqlite_cycle", register, (sqlite("chain-cycle", "normal"), "cycle"), _CHAIN_BUDGET
        ),
    ]
    stats = {config.name: SaveStats.empty() for config in configs}

    def collect(config: Config) -> None:
        if config.store is not None:
            stats[config.name].add(config.store, chain.LINKS)

    await _rounds(configs, settings, (_CHAIN_START,), _check_chain, collect)
    cycles = configs[0].results[-1].cycles
    return {
        "suggestors": chain.LINKS,
        "cycles": cycles,
        "runs": settings.runs,
        "configs": _run_figures(configs, stats, cycles),
    }


# -- the floor --------------------------------------------------------------------------------


async def _thread_hop() -> float:
    """µs for one `anyio.to_thread.run_sync` of a function doing nothing (median of 200).

    The least any store that runs its calls in a worker thread pays per call.
    """

    def nothing() -> None:
        return None

    times: list[float] = []
    for _ in range(200):
        started = perf_counter()
        await anyio.to_thread.run_sync(nothing)
        times.append(perf_counter() - started)
    return rounded(median(times) * 1e6, 1)


async def _measure(settings: Settings) -> Figures:
    dsn = os.environ.get("DATABASE_URL") or None
    if dsn is None:
        progress("W5: DATABASE_URL is not set: PostgreSQL skipped")
    with tempfile.TemporaryDirectory(prefix="converge-bench-w5-") as folder:
        backends = Backends(Path(folder), dsn)
        try:
            hop = await _thread_hop()
            journal = await _journal(settings, backends)
            progress("W5 durability: bytes stored per fact")
            stored: Figures = {
                "sqlite": await _sqlite_bytes(backends),
                "postgres": await _postgres_bytes(backends),
            }
            progress(f"W5 durability: W1 chain with a SQLite store, {settings.runs} runs")
            chained = await _chain(settings, backends)
        finally:
            backends.close()
    return {
        "thread_hop_us": hop,
        "journal": journal,
        "bytes": stored,
        "W1": chained,
        **_headline(journal, stored, chained),
    }


def _pick(figures: Figures, *path: str) -> object:
    """`figures[path[0]][path[1]]...`, or `None` where a step is missing."""
    value: object = figures
    for step in path:
        if not isinstance(value, dict) or step not in value:
            return None
        value = value[step]  # pyright: ignore[reportUnknownVariableType]
    return value  # pyright: ignore[reportUnknownVariableType]


def _headline(journal: Figures, stored: Figures, chained: Figures) -> Figures:
    """The figures the targets check, at the top of W5's report."""
    return {
        "sqlite_normal_save_ms": _pick(journal, "configs", "sqlite_normal", "save_ms"),
        "sqlite_full_save_ms": _pick(journal, "configs", "sqlite_full", "save_ms"),
        "postgres_save_ms": _pick(journal, "configs", "postgres", "save_ms"),
        "sqlite_normal_ratio_last20_first20": _pick(
            journal, "configs", "sqlite_normal", "ratio_last20_first20"
        ),
        "sqlite_full_ratio_last20_first20": _pick(
            journal, "configs", "sqlite_full", "ratio_last20_first20"
        ),
        "postgres_ratio_last20_first20": _pick(
            journal, "configs", "postgres", "ratio_last20_first20"
        ),
        "bytes_ratio_finished": _pick(stored, "sqlite", "finished", "ratio"),
        "bytes_ratio_in_progress": _pick(stored, "sqlite", "in_progress", "ratio"),
        "W1_us_per_cycle": {
            name: _pick(chained, "configs", name, "us_per_cycle")
            for name in ("no_store", "sqlite_exit", "sqlite_cycle")
        },
    }


def measure(settings: Settings) -> Figures:
    """Run W5 and return its figures."""
    progress(
        f"W5 durability: {TOTAL} facts, {PER_CYCLE} per cycle, per-cycle saves, "
        f"{settings.runs} runs"
    )
    return anyio.run(_measure, settings, backend="asyncio")
