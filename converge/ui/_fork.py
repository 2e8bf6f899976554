"""Forking a run from the console, and the diff of two runs.

The fork form posts what `converge fork` takes on the command line; it is checked the same
way (the same one-line errors) before anything runs, and a fork that cannot be made as
asked writes nothing. The console forks only a record it would resume: its signature
verified (or no key is set and it trusts unsigned records, or `--formation` names the
formation). The fork runs in the console's task group and the page answers once it has
stopped or paused (it is saved then), with the new run's page. A run's parent and forks
are `_lineage`'s.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, final

import anyio
from anyio.abc import TaskGroup
from pydantic import JsonValue
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .._core._error import UsageError
from .._core._escape import error_text
from .._core._exceptions import ConvergeError, ForkError, RunNotFoundError, StoreError
from .._core._key import AnyKey, key_named
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._result import ConvergeResult
from .._core._store import RowStore, RunStore
from .._diff import diff_runs
from .._formation import EngineOptions, Formation, command_timeout, load_formation, locate
from .._kernel._fork import records_root
from .._kernel._fork_changes import proposed_inputs
from .._kernel._state import new_run_id
from .._review import check_signature, signing_key
from ..stores._rows_read import broken, facts_at
from ._fork_page import (
    SHOWN_FACTS,
    FactsAt,
    ForkForm,
    diff_page,
    fork_cycle,
    fork_page,
)
from ._form import FormError, read_form
from ._guard import signed_in
from ._html import Viewer
from ._pages import message_page, run_url
from ._trust import Trust, trust

__all__ = ["Forks"]

MAX_COUNT: Final = 1_000_000_000
"""The largest cycle number or budget the form takes (as the command line)."""
DIFF_LIMIT: Final = 200
"""How many facts of each list the diff page shows by default (`limit=` changes it)."""
MAX_DIFF_LIMIT: Final = 10_000
MAX_ONCE: Final = 10_000
"""How many posted fork forms the console remembers (the oldest are forgotten)."""


def _no_once() -> dict[tuple[str, str], str | None]:
    return {}


@final
@dataclass(frozen=True, slots=True)
class Forks:
    """The console's fork and diff handlers over one store."""

    store: RunStore
    formation: str | None
    """The console's `--formation`, if any."""
    trust_unsigned: bool
    tasks: Callable[[], TaskGroup | None]
    """The console's task group, where forks run."""
    _once: dict[tuple[str, str], str | None] = field(default_factory=_no_once)
    """Each posted fork form's one-time field (by reviewer): the fork it made, or `None`
    while it runs; a form posted twice (a double click) forks once."""

    def trust(self, record: RunRecord | RecordHead) -> Trust:
        """What checking `record` (or a head) found, and whether the console may act on it."""
        return trust(
            record, signing_key(), chosen=self.formation, trust_unsigned=self.trust_unsigned
        )

    # -- the fork form -------------------------------------------------------------------

    def form(self, request: Request, record: RunRecord) -> Response:
        """The fork form, at the cycle `?at=` names (the last one by default)."""
        values, error = _asked(request, record)
        return self._form_page(request, record, values, error, 200 if not error else 400)

    async def head_form(
        self, request: Request, store: RowStore, head: RecordHead
    ) -> Response | None:
        """`form` of a finished run stored as rows, from its head and its entries' counts.

        The facts in the context at the cycle are read from the first entries. `None` when
        an entry has no counts (rows written before schema 8): the caller loads the record.

        Raises:
            StoreError: An entry read is missing or invalid, does not hold what its counts
                say, or a fact shown does not match its digest.
        """
        record = head.record
        values, error = _asked(request, record)
        found = await facts_at(store, head, fork_cycle(record, values), SHOWN_FACTS)
        if found is None:
            return None
        count, first = found
        problem = broken(record.run_id, first)
        if problem is not None:
            raise StoreError(problem)
        return self._form_page(
            request, head, values, error, 200 if not error else 400, FactsAt(count, first)
        )

    def _form_page(
        self,
        request: Request,
        source: RunRecord | RecordHead,
        values: ForkForm,
        error: str,
        status: int,
        facts: FactsAt | None = None,
    ) -> Response:
        html = fork_page(
            source if isinstance(source, RunRecord) else source.record,
            viewer=signed_in(request).viewer,
            found=self.trust(source),
            values=values,
            error=error,
            once=secrets.token_urlsafe(18),
            facts=facts,
        )
        return HTMLResponse(html, status_code=status)

    async def post(self, request: Request, record: RunRecord) -> Response:
        """Fork `record` as the posted form asks; the new run's page, or why not."""
        signed = signed_in(request)
        viewer = signed.viewer
        try:
            form = await read_form(request)
        except FormError as error:
            return _say(viewer, "Bad request", f"{error}: nothing was forked.", 400)
        if not signed.csrf_holds(form.get("csrf")):
            return _say(
                viewer,
                "Refused",
                "The form did not carry this session's CSRF token: nothing was forked. "
                "Reload the page and fork again.",
                403,
            )
        once = (signed.reviewer.name, form.get("once", ""))
        if once[1] and once in self._once:
            forked = self._once[once]
            if forked is None:
                said = "This form is being forked already: its page answers when it is done."
                return _say(viewer, "Already forking", said, 409, record)
            return RedirectResponse(run_url(forked), status_code=303)
        if once[1]:
            self._once[once] = None
            while len(self._once) > MAX_ONCE:
                del self._once[next(iter(self._once))]
        answer, forked = None, None
        try:
            answer, forked = await self._fork(request, record, form)
        finally:
            if once[1]:
                if forked is None:
                    self._once.pop(once, None)
                else:
                    self._once[once] = forked
        return answer

    async def _fork(
        self, request: Request, record: RunRecord, form: dict[str, str]
    ) -> tuple[Response, str | None]:
        """Check the posted changes and fork; the answer, and the fork's id when one ran."""
        signed = signed_in(request)
        viewer = signed.viewer
        found = self.trust(record)
        if found.refusal or found.formation is None:
            said = f"Nothing was forked: {found.refusal}."
            return _say(viewer, "Cannot fork this run", said, 409, record), None
        values = ForkForm.of(form)
        try:
            formation = load_formation(found.formation)
        except UsageError as error:
            said = f"Nothing was forked: formation {found.formation}: {error_text(error)}"
            return _say(viewer, "Cannot fork this run", said, 409, record), None
        try:
            at = _cycle(values.at, record)
            budget = _max_cycles(values.max_cycles)
            inputs = proposed_inputs(_documents(values.inputs, signed.reviewer.name))
        except ForkError as error:
            return self._refused(request, record, values, error), None
        run_id = new_run_id()
        engine = formation.engine(**_options(self.store, formation, found.formation, budget))

        async def work() -> ConvergeResult:
            return await engine.fork(
                record,
                at_cycle=at,
                inputs=inputs,
                retract=values.retracted,
                cascade=values.cascade,
                run_id=run_id,
            )

        try:
            await self._run(work)
        except ForkError as error:
            return self._refused(request, record, values, error), None
        except StoreError as error:
            said = f"Nothing was forked: {error_text(error)}"
            return _say(viewer, "Cannot fork this run", said, 409, record), None
        except (UsageError, ConvergeError) as error:
            return _say(viewer, "Cannot fork this run", error_text(error), 409, record), None
        return RedirectResponse(run_url(run_id), status_code=303), run_id

    def _refused(
        self, request: Request, record: RunRecord, values: ForkForm, error: Exception
    ) -> Response:
        text = error_text(error)
        if text.startswith("--retract "):  # the form's field, not the command line's option
            text = text.removeprefix("--")
        said = f"error: {text}; nothing was forked"
        return self._form_page(request, record, values, said, 400)

    async def _run(self, work: Callable[[], Awaitable[ConvergeResult]]) -> ConvergeResult:
        """`work()` in the console's task group, and its result once it is done.

        A reviewer who leaves the page does not cancel it; the console's shutdown does.

        Raises:
            Exception: What `work` raised.
        """
        tasks = self.tasks()
        if tasks is None:
            raise UsageError("the console is not running")
        done = anyio.Event()
        outcome: list[ConvergeResult | Exception] = []

        async def run() -> None:
            try:
                outcome.append(await work())
            except Exception as error:
                outcome.append(error)
            finally:
                done.set()

        tasks.start_soon(run, name="fork")
        await done.wait()
        if not outcome:
            raise UsageError("the fork was cancelled before it was saved")
        found = outcome[0]
        if isinstance(found, Exception):
            raise found
        return found

    # -- the diff ------------------------------------------------------------------------

    async def diff(self, request: Request) -> Response:
        """`/diff?a=RUN_A&b=RUN_B[&key=K][&limit=N]`: what `converge diff` prints."""
        viewer = signed_in(request).viewer
        params = request.query_params
        run_a, run_b = params.get("a", "").strip(), params.get("b", "").strip()
        if not run_a or not run_b:
            said = "Give two runs to compare: /diff?a=RUN_A&b=RUN_B (and key=K to narrow it)."
            return _say(viewer, "Bad request", said, 400)
        key: AnyKey | None = None
        if params.get("key"):
            try:
                key = key_named(params["key"])
            except ValueError as error:
                return _say(viewer, "Bad request", f"key {params['key']}: {error}", 400)
        limit_text = params.get("limit", str(DIFF_LIMIT))
        if not _whole(limit_text) or not 1 <= int(limit_text) <= MAX_DIFF_LIMIT:
            said = f"limit must be a whole number from 1 to {MAX_DIFF_LIMIT:_}, got {limit_text!r}"
            return _say(viewer, "Bad request", said, 400)
        records: list[RunRecord] = []
        for run_id in (run_a, run_b):
            try:
                records.append(await self.store.load(run_id))
            except RunNotFoundError:
                return _say(viewer, "Not found", f"The store has no run {run_id}.", 404)
        a, b = records
        key_held = signing_key()
        checks = [check_signature(record, key_held) for record in records]
        for record, check in zip(records, checks, strict=True):
            problem = check.message if check.failed else None
            if problem is None and records_root(record.facts) != record.integrity.merkle_root:
                problem = (
                    f"run {record.run_id}: its stored facts do not hash to its integrity "
                    "proof's root"
                )
            if problem is not None:
                said = f"Not compared: {problem}."
                return _say(viewer, "Cannot compare these runs", said, 409, record)
        limit = int(limit_text)
        compared = await anyio.to_thread.run_sync(lambda: diff_runs(a, b, key=key, limit=limit))
        html = diff_page(
            compared, viewer=viewer, checks=checks, key=params.get("key", ""), limit=limit
        )
        return HTMLResponse(html)


def _asked(request: Request, record: RunRecord) -> tuple[ForkForm, str]:
    """The form's values at the cycle `?at=` names (by default the last), and its error."""
    at = request.query_params.get("at", "").strip() or str(record.cycles)
    if not _whole(at) or int(at) > record.cycles:
        return ForkForm(at=str(record.cycles)), f"error: {_at_problem(at, record)}"
    return ForkForm(at=at), ""


def _at_problem(at: str, record: RunRecord) -> str:
    """What is wrong with the fork cycle `at`: not a number, too large, or not the run's."""
    shown = at if len(at) <= 40 else f"{at[:40]}..."
    if not (at.isascii() and at.isdecimal()):
        return f"cycle: must be a cycle number, got {shown!r}"
    if len(at) > 10 or int(at) > MAX_COUNT:
        return f"cycle: must be from 0 to {MAX_COUNT:_}, got {shown}"
    return (
        f"run {record.run_id} has no cycle {int(at)}: it ran cycles 0 to {record.cycles} "
        f"({record.outcome}); fork at one of them"
    )


def _cycle(at: str, record: RunRecord) -> int:
    """The fork cycle typed (whether the run has it is `Engine.fork`'s to check).

    Raises:
        ForkError: It is not a whole number from 0 to `MAX_COUNT`.
    """
    if not _whole(at) or int(at) > MAX_COUNT:
        raise ForkError(_at_problem(at, record))
    return int(at)


def _whole(text: str) -> bool:
    """Whether `text` is ASCII digits, at most ten of them."""
    return text.isascii() and text.isdecimal() and len(text) <= 10


def _max_cycles(text: str) -> int | None:
    """The cycle budget typed (`None`: the formation's).

    Raises:
        ForkError: It is not a whole number from 1 to `MAX_COUNT`.
    """
    if not text:
        return None
    shown = text if len(text) <= 40 else f"{text[:40]}..."
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdecimal()):
        raise ForkError(f"max cycles: must be a whole number, got {shown!r}")
    if len(digits) > 10 or int(text) > MAX_COUNT:
        raise ForkError(f"max cycles: must be at most {MAX_COUNT:_}, got {shown}")
    number = int(text)
    if number < 1:
        raise ForkError(f"max cycles: must be at least 1, got {shown}")
    return number


def _documents(text: str, reviewer: str) -> list[JsonValue]:
    """The inputs typed: a JSON list of proposed facts (or `{"inputs": [...]}`).

    Each input that gives no provenance gets the reviewer's name.

    Raises:
        ForkError: It is not JSON, or not a list.
    """
    if not text.strip():
        return []
    try:
        loaded: JsonValue = json.loads(text)
    except ValueError as error:
        raise ForkError(f"inputs: not JSON: {error}") from None
    if isinstance(loaded, dict) and "inputs" in loaded:
        loaded = loaded["inputs"]
    if not isinstance(loaded, list):
        raise ForkError("inputs: expected a JSON list of proposed facts")
    documents: list[JsonValue] = []
    for item in loaded:
        if isinstance(item, dict) and "provenance" not in item:
            item = {**item, "provenance": reviewer}
        documents.append(item)
    return documents


def _options(
    store: RunStore, formation: Formation, locator: str, max_cycles: int | None
) -> EngineOptions:
    """The fork's engine: this store, the formation's locator, the signing key."""
    options: EngineOptions = {
        "store": store,
        "formation": locate(locator),
        "suggestor_timeout": command_timeout(formation),
    }
    if max_cycles is not None:
        options["budget"] = formation.budget.model_copy(update={"max_cycles": max_cycles})
    key = signing_key()
    if key is not None:
        options["signing_key"] = key
    return options


def _say(
    viewer: Viewer, title: str, message: str, status: int, record: RunRecord | None = None
) -> Response:
    check = None if record is None else check_signature(record, signing_key())
    back = None if record is None else run_url(record.run_id)
    html = message_page(
        title, message, viewer=viewer, refused=status == 403, back=back, check=check
    )
    return HTMLResponse(html, status_code=status)
