"""The review console as an ASGI application (Starlette): routes, pages, decisions.

`Guard` admits a request first: its `Host`, a session cookie (a random id; the console keeps
the rest in memory) or `Authorization: Bearer`, and for a POST this console's exact origin.
Every POST must also carry the reviewer's CSRF token. Every page that shows a record checks
its signature and says what it found; the console imports the formation a record names only
when its signature verified (or with `trust_unsigned`). Decisions go through
`resume_stored` (`_decisions`), the path `converge resume` takes, so a run decided here and
one decided on the command line race under the same rules: one wins, the other is told who
decided. The run page, fact pages and event stream of a large finished run stored as rows
read its head and the rows they show (`_head_page`), never the whole record.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from urllib.parse import unquote

import anyio
from anyio.abc import TaskGroup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .._core._error import UsageError
from .._core._escape import error_text
from .._core._exceptions import ConvergeError, RunNotFoundError, StoreError
from .._core._hitl import GateDecision
from .._core._listing import RunSummary
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._stop import RunStatus, StopReason
from .._core._store import RowStore, RunStore
from .._review import check_signature, paused_checkpoint, signing_key
from ..stores import PostgresRunStore, SqliteRunStore
from ..stores._rows_read import Ends, broken, ends, large
from ._decisions import gate_decisions, resume, undecided_gates
from ._fact_page import FactPageError, fact_page, head_fact_page
from ._fork import Forks
from ._fork_page import family_box, fork_from
from ._form import FormError, read_form
from ._gate_page import cited, gate_page
from ._guard import Guard, signed_in
from ._head_page import head_banner, head_page
from ._inbox import INBOX_LIMIT, inbox_box
from ._lineage import Lineage
from ._live import run_events
from ._origin import Origin
from ._pages import Filters, Listed, message_page, run_page, run_url, runs_page
from ._settings import ConsoleSettings
from ._trust import Trust, banner, trust

__all__ = ["create_app"]


async def _selected(store: RunStore, filters: Filters, limit: int) -> Sequence[RunSummary]:
    """The newest `limit` runs, selected by `filters` in the query of a built-in store.

    So any run can be found, however many are newer; of another store, the newest.
    """
    if not isinstance(store, SqliteRunStore | PostgresRunStore):
        return await store.list_runs(limit=limit)
    values = {member.value: member for member in (*RunStatus, *StopReason)}
    chosen = values.get(filters.stop) if filters.stop else values.get(filters.status)
    if (filters.stop and chosen is None) or (filters.status and filters.status not in values):
        return ()  # nothing has a status or stop reason that does not exist
    return await store.list_runs(limit=limit, status=chosen, search=filters.text or None)


class _Console:
    """The console's request handlers, over one store and one task group for resumed runs."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.tasks: TaskGroup | None = None
        self._locks: dict[str, anyio.Lock] = {}
        self.forks = Forks(
            settings.store,
            settings.formation,
            settings.trust_unsigned,
            lambda: self.tasks,
        )
        self.lineage = Lineage(settings.store, settings.limit)

    # -- pages ---------------------------------------------------------------------------

    def _trust(self, record: RunRecord | RecordHead) -> Trust:
        settings = self.settings
        return trust(
            record,
            signing_key(),
            chosen=settings.formation,
            trust_unsigned=settings.trust_unsigned,
        )

    async def runs(self, request: Request) -> Response:
        viewer = signed_in(request).viewer
        params = request.query_params
        filters = Filters(params.get("status", ""), params.get("stop", ""), params.get("text", ""))
        store = self.settings.store
        key = signing_key()
        listed: list[Listed] = []
        rows = isinstance(store, RowStore)  # a runtime protocol check: once, not once a run
        for summary in await _selected(store, filters, self.settings.limit):
            if not filters.keeps(summary):
                continue
            try:
                head = await store.load_head(summary.run_id) if rows else None
                record = head if head is not None else await store.load(summary.run_id)
            except Exception as error:  # one unreadable row must not hide the others
                listed.append(Listed(summary, None, f"unreadable: {error_text(error)}"))
                continue
            listed.append(Listed(summary, record, check=check_signature(record, key)))
        unfiltered = not (filters.status or filters.stop or filters.text)
        gates = (  # the first page: the inbox above the newest runs
            await store.pending_gates(limit=INBOX_LIMIT)
            if unfiltered and isinstance(store, SqliteRunStore | PostgresRunStore)
            else ()
        )
        page = runs_page(
            listed,
            filters,
            viewer=viewer,
            limit=self.settings.limit,
            key_set=key is not None,
            inbox=inbox_box(gates),
        )
        return HTMLResponse(page)

    async def run(self, request: Request) -> Response:
        parts = _parts(request)
        if parts is None:
            return self._missing(request, "There is no such page.")
        run_id, rest = parts
        store = self.settings.store
        get = request.method == "GET"
        if len(rest) == 2 and rest[0] == "gates" and get:
            return await self._gate(request, run_id, rest[1])
        try:
            if rest == ("events",) and get:
                return await self._events(request, run_id)
            if get and rest in ((), ("facts",), ("fork",)) and isinstance(store, RowStore):
                head = await store.load_head(run_id)  # a large finished run: read its head
                if head is not None and large(head):
                    answer = await self._head(request, store, head, rest)
                    if answer is not None:  # else rows without counts: the whole record
                        return answer
            record = await store.load(run_id)
        except RunNotFoundError:
            return self._missing(request, f"The store has no run {run_id}.")
        except StoreError as error:  # an unreadable record: say why, show nothing of it
            status = 500 if get else 409  # and decide nothing on it
            return self._say(request, "Cannot read this run", error_text(error), status)
        if rest == () and get:
            return await self._run_page(request, record)
        if rest == ("facts",) and get:
            params = request.query_params
            try:
                html = fact_page(
                    record,
                    params.get("key", ""),
                    params.get("page", ""),
                    viewer=signed_in(request).viewer,
                    banner=banner(self._trust(record).check),
                )
            except FactPageError as error:
                return self._missing(request, str(error))
            return HTMLResponse(html)
        if rest == ("fork",):
            if request.method == "POST":
                return await self.forks.post(request, record)
            return self.forks.form(request, record)
        if rest == ("continue",) and request.method == "POST":
            return await self._decide(request, record, gate_id=None)
        if len(rest) == 2 and rest[0] == "gates" and request.method == "POST":
            return await self._decide(request, record, gate_id=rest[1])
        return self._missing(request, "There is no such page.")

    async def _events(self, request: Request, run_id: str) -> Response:
        """The run's event stream, from the version and clock the page showed.

        Raises:
            RunNotFoundError: The store has no run `run_id`.
        """
        store = self.settings.store
        if isinstance(store, RowStore):  # each raises for a run that is not there
            await store.load_head(run_id)
        else:
            await store.load(run_id)
        params = request.query_params
        seen, clock = params.get("seen", ""), params.get("clock", "")
        version = int(seen) if seen.isdecimal() and len(seen) < 19 else None
        running = params.get("running") == "1" and clock.isdecimal() and len(clock) < 19
        return run_events(
            store,
            run_id,
            version,
            self.settings.poll_seconds,
            clock=int(clock) if running else None,
            status=RunStatus.RUNNING if running else None,
        )

    async def _head(
        self, request: Request, store: RowStore, head: RecordHead, rest: tuple[str, ...]
    ) -> Response | None:
        """The run page, a fact page or the fork form of a large finished run stored as rows.

        Read from its head and the few rows they show, never the whole record (`None`: the
        fork form of rows written before schema 8, which needs it).
        """
        if rest == ("fork",):
            return await self.forks.head_form(request, store, head)
        check = check_signature(head, signing_key())
        viewer = signed_in(request).viewer
        if rest == ("facts",):
            params = request.query_params
            try:
                html = await head_fact_page(
                    store,
                    head,
                    params.get("key", ""),
                    params.get("page", ""),
                    viewer=viewer,
                    banner=head_banner(check),
                )
            except FactPageError as error:
                return self._missing(request, str(error))
            return HTMLResponse(html)
        try:
            shown = await ends(store, head)
        except StoreError as error:
            shown, problem = Ends((), (), ()), str(error).strip()
        else:
            problem = broken(head.record.run_id, [*shown.first, *shown.last])
        family = await self.lineage.head_family(head)
        html = head_page(
            head,
            shown,
            problem,
            check=check,
            viewer=viewer,
            store_argument=self.settings.store_argument,
            family=family_box(head.record, family),
            fork_from=fork_from(head.record),
        )
        return HTMLResponse(html)

    async def _run_page(self, request: Request, record: RunRecord) -> Response:
        family = await self.lineage.family(record)
        html = run_page(
            record,
            viewer=signed_in(request).viewer,
            store_argument=self.settings.store_argument,
            found=self._trust(record),
            family=family_box(record, family),
            fork_from=fork_from(record),
        )
        return HTMLResponse(html)

    async def _gate(self, request: Request, run_id: str, gate_id: str) -> Response:
        """A gate's page: of a paused run stored as rows, read from its head alone.

        The head holds the gates and the facts their evidence cites (`cited`); deciding
        loads the run.
        """
        store = self.settings.store
        try:
            head = (
                await store.load_head(run_id, paused=True) if isinstance(store, RowStore) else None
            )
            source = head if head is not None else await store.load(run_id)
        except RunNotFoundError:
            return self._missing(request, f"The store has no run {run_id}.")
        except StoreError as error:
            return self._say(request, "Cannot review this run", error_text(error), 409)
        record = source if isinstance(source, RunRecord) else source.record
        if gate_id not in {gate.gate_id for gate in record.pending}:
            return self._decided(request, source, gate_id)
        found = self._trust(source)
        try:  # the checkpoint is this run's, as stored; the signature is `found`'s to say
            checkpoint = paused_checkpoint(source, run_id, None)
            facts = cited(source)
        except (UsageError, ConvergeError) as error:
            return self._say(request, "Cannot review this run", error_text(error), 409, source)
        now = datetime.now(UTC)
        viewer = signed_in(request).viewer
        html = gate_page(
            record, checkpoint, gate_id, facts=facts, viewer=viewer, now=now, found=found
        )
        return HTMLResponse(html)

    # -- decisions -----------------------------------------------------------------------

    async def _decide(self, request: Request, record: RunRecord, gate_id: str | None) -> Response:
        signed = signed_in(request)
        try:
            form = await read_form(request)
            decisions = gate_decisions(form, signed) if gate_id is not None else []
        except FormError as error:
            return self._say(request, "Bad request", f"{error}: nothing was decided.", 400)
        if not signed.csrf_holds(form.get("csrf")):
            return self._say(
                request,
                "Refused",
                "The form did not carry this session's CSRF token: nothing was decided. "
                "Reload the page and decide again.",
                403,
            )
        found = self._trust(record)
        if found.refusal:
            said = f"Nothing was decided: {found.refusal}."
            return self._say(request, "Cannot resume this run", said, 409, record)
        undecided = undecided_gates(record, gate_id, decisions)
        if undecided:
            said = f"Choose approve or reject for {', '.join(undecided)}."
            return self._say(request, "No decision", said, 400)
        seen = form.get("version", "")
        lock = self._locks.setdefault(record.run_id, anyio.Lock())
        outcome: str | None = "the decision was interrupted before it was saved"
        async with lock:
            try:
                with anyio.CancelScope(shield=True):
                    outcome = await self._start(record.run_id, decisions, seen)
            except (UsageError, ConvergeError, ValueError) as error:
                return self._say(request, "Cannot resume this run", error_text(error), 409, record)
        if outcome is not None:
            current = await self.settings.store.load(record.run_id)
            return self._decided(request, current, gate_id, said=outcome)
        return RedirectResponse(run_url(record.run_id), status_code=303)

    async def _start(self, run_id: str, decisions: list[GateDecision], seen: str) -> str | None:
        """Resume the run in the console's task group.

        Returns `None` once the run has claimed its record, or what stopped it when someone
        else had it first.
        """
        tasks = self.tasks
        if tasks is None:
            raise UsageError("the console is not running")
        version = int(seen) if seen.isdecimal() else -1
        outcome: str | None = await tasks.start(resume, self.settings, run_id, decisions, version)
        return outcome

    # -- answers -------------------------------------------------------------------------

    def _decided(
        self,
        request: Request,
        source: RunRecord | RecordHead,
        gate_id: str | None,
        said: str = "",
    ) -> Response:
        """The page for a gate that is no longer waiting: who decided it, if anyone."""
        record = source if isinstance(source, RunRecord) else source.record
        mine = [d for d in record.trace.decisions if gate_id is None or d.gate_id == gate_id]
        if mine:
            decision = mine[-1]
            verdict = "approved" if decision.approved else "rejected"
            reason = f" ({decision.reason})" if decision.reason else ""
            message = (
                f"Gate {decision.gate_id} was already decided by {decision.by}: {verdict}"
                f"{reason}. Nothing was changed. The run is now {record.outcome}."
            )
        else:
            message = said or f"Run {record.run_id} has no pending gate {gate_id}."
        html = message_page(
            "Already decided",
            message,
            viewer=signed_in(request).viewer,
            back=run_url(record.run_id),
            check=check_signature(source, signing_key()),
        )
        return HTMLResponse(html, status_code=409)

    def _say(
        self,
        request: Request,
        title: str,
        message: str,
        status: int,
        record: RunRecord | RecordHead | None = None,
    ) -> Response:
        check = None if record is None else check_signature(record, signing_key())
        html = message_page(
            title,
            message,
            viewer=signed_in(request).viewer,
            refused=status == 403,
            check=check,
        )
        return HTMLResponse(html, status_code=status)

    def _missing(self, request: Request, message: str) -> Response:
        return self._say(request, "Not found", message, 404)


def _parts(request: Request) -> tuple[str, tuple[str, ...]] | None:
    """The run id and the rest of a `/runs/...` path, each segment percent-decoded once."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    segments = raw.decode("latin-1").split("?", 1)[0].split("/")[2:]
    if not segments or not segments[0]:
        return None
    decoded = [unquote(segment) for segment in segments]
    return decoded[0], tuple(decoded[1:])


def create_app(settings: ConsoleSettings) -> ASGIApp:
    """The console as an ASGI application, for uvicorn or any ASGI server."""
    console = _Console(settings)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncGenerator[None]:
        async with anyio.create_task_group() as tasks:
            console.tasks = tasks
            yield
            tasks.cancel_scope.cancel()  # resumed runs are saved as interrupted

    app = Starlette(
        routes=[
            Route("/", console.runs, methods=["GET"]),
            Route("/runs/{rest:path}", console.run, methods=["GET", "POST"]),
            Route("/diff", console.forks.diff, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    origin = Origin.parse(settings.origin) if settings.origin is not None else None
    return Guard(app, settings.reviewers, settings.sessions, origin)
