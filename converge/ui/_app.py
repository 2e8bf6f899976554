"""The review console as an ASGI application (Starlette): routes, sign-in, decisions.

Every request must carry a reviewer's token: in the URL once (`?token=`, then kept in an
HttpOnly, SameSite=Strict cookie and dropped from the address), in the cookie, or as
`Authorization: Bearer`. Every POST must also carry the reviewer's CSRF token, and a
browser's `Origin`, when sent, must be this console. Decisions go through `resume_stored`,
the path `converge resume` takes, so a run decided here and one decided on the command line
race under the same rules: one wins, the other is told who decided.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, final
from urllib.parse import parse_qsl, unquote, urlencode

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._cli_records import paused_checkpoint, resume_stored, signing_key
from .._cli_support import CliError, VisibleLines, error_text
from .._durable import DEFAULT_LEASE
from .._events import EngineEvent
from .._exceptions import ConvergeError, RunNotFoundError
from .._formation import EngineOptions, Formation
from .._hitl import GateDecision
from .._stop import RunStatus
from .._store import RunRecord, RunStore
from ._auth import Reviewer, Reviewers
from ._gate_page import gate_page, live_gates
from ._html import POLICY
from ._live import run_events
from ._pages import Filters, Listed, message_page, run_page, run_url, runs_page

__all__ = ["ConsoleSettings", "create_app"]

_LOG: Final = logging.getLogger("converge.ui")
_MAX_FORM: Final = 64 * 1024
_HEADERS: Final = (
    (b"content-security-policy", POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


@final
@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """What a console serves and how: the store, who may review, and where formations live."""

    store: RunStore
    reviewers: Reviewers
    formation: str | None = None
    """The formation to resume runs with; by default the one each stored run names."""
    store_argument: str = ""
    """`--store ...` for the commands the pages print (`""`: the default store)."""
    poll_seconds: float = 0.5
    """How often a live run page's event stream reads the store."""
    limit: int = 200
    """How many of the newest runs the runs list reads."""


def _cookie(scope: Scope) -> str:
    server = scope.get("server") or ("", 0)
    return f"converge-console-{server[1]}"


@final
class _Guard:
    """ASGI middleware: refuse requests without a reviewer's token; add security headers."""

    def __init__(self, app: ASGIApp, reviewers: Reviewers) -> None:
        self._app = app
        self._reviewers = reviewers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        request = Request(scope)
        given = request.query_params.get("token")
        bearer = request.headers.get("authorization", "")
        token = given or request.cookies.get(_cookie(scope))
        if bearer.lower().startswith("bearer "):
            token = bearer[7:].strip()
        reviewer = self._reviewers.find(token)
        if reviewer is None:
            refused = message_page(
                "Sign-in needed",
                "This console admits reviewers with a token: open the URL that `converge ui` "
                "printed (it ends in ?token=...), or ask whoever runs it for a token.",
                reviewer=None,
                refused=True,
            )
            await HTMLResponse(refused, status_code=401)(scope, receive, secured)
            return
        if given is not None and token == given:
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            query = urlencode(kept)
            target = request.url.path + (f"?{query}" if query else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(_cookie(scope), given, httponly=True, samesite="strict", path="/")
            await response(scope, receive, secured)
            return
        scope.setdefault("state", {})["reviewer"] = reviewer
        await self._app(scope, receive, secured)


@final
class _Claim:
    """An observer that says when a resumed run has claimed its record (its first event)."""

    def __init__(self, claimed: Callable[[], None]) -> None:
        self._claimed = claimed

    def on_event(self, event: EngineEvent, /) -> None:
        self._claimed()


class _Console:
    """The console's request handlers, over one store and one task group for resumed runs."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.tasks: TaskGroup | None = None
        self._locks: dict[str, anyio.Lock] = {}

    # -- pages ---------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        reviewer = _reviewer(request)
        params = request.query_params
        filters = Filters(params.get("status", ""), params.get("stop", ""), params.get("text", ""))
        store = self.settings.store
        listed: list[Listed] = []
        for summary in await store.list_runs(limit=self.settings.limit):
            if not filters.keeps(summary):
                continue
            try:
                listed.append(Listed(summary, await store.load(summary.run_id)))
            except Exception as error:  # one unreadable row must not hide the others
                listed.append(Listed(summary, None, f"unreadable: {error_text(error)}"))
        page = runs_page(listed, filters, reviewer=reviewer.name, limit=self.settings.limit)
        return HTMLResponse(page)

    async def run(self, request: Request) -> Response:
        parts = _parts(request)
        if parts is None:
            return self._missing(request, "There is no such page.")
        run_id, rest = parts
        try:
            record = await self.settings.store.load(run_id)
        except RunNotFoundError:
            return self._missing(request, f"The store has no run {run_id}.")
        if rest == ("events",) and request.method == "GET":
            seen = request.query_params.get("seen", "")
            version = int(seen) if seen.isdecimal() else record.version
            return run_events(self.settings.store, run_id, version, self.settings.poll_seconds)
        if rest == () and request.method == "GET":
            return self._run_page(request, record)
        if rest == ("continue",) and request.method == "POST":
            return await self._decide(request, record, gate_id=None)
        if len(rest) == 2 and rest[0] == "gates":
            if request.method == "POST":
                return await self._decide(request, record, gate_id=rest[1])
            return self._gate(request, record, rest[1])
        return self._missing(request, "There is no such page.")

    def _run_page(self, request: Request, record: RunRecord) -> Response:
        reviewer = _reviewer(request)
        try:
            record.verify_signature(signing_key())
        except ConvergeError as error:
            return self._say(request, "Cannot show this run", error_text(error), 409)
        html = run_page(
            record,
            reviewer=reviewer.name,
            csrf=self.settings.reviewers.csrf(reviewer),
            store_argument=self.settings.store_argument,
        )
        return HTMLResponse(html)

    def _gate(self, request: Request, record: RunRecord, gate_id: str) -> Response:
        reviewer = _reviewer(request)
        if gate_id not in {gate.gate_id for gate in record.pending}:
            return self._decided(request, record, gate_id)
        try:
            checkpoint = paused_checkpoint(record, record.run_id, signing_key())
        except (CliError, ConvergeError) as error:
            return self._say(request, "Cannot review this run", error_text(error), 409)
        csrf = self.settings.reviewers.csrf(reviewer)
        now = datetime.now(UTC)
        html = gate_page(record, checkpoint, gate_id, reviewer=reviewer.name, csrf=csrf, now=now)
        return HTMLResponse(html)

    # -- decisions -----------------------------------------------------------------------

    async def _decide(self, request: Request, record: RunRecord, gate_id: str | None) -> Response:
        reviewer = _reviewer(request)
        form = await _form(request)
        if form is None or not self.settings.reviewers.csrf_holds(reviewer, form.get("csrf")):
            return self._say(
                request,
                "Refused",
                "The form did not carry this console's CSRF token: nothing was decided. "
                "Reload the page and decide again.",
                403,
            )
        if not _same_origin(request):
            return self._say(request, "Refused", "The form came from another site.", 403)
        decisions = _decisions(form, reviewer) if gate_id is not None else []
        undecided = self._undecided(record, gate_id, decisions)
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
            except (CliError, ConvergeError, ValueError) as error:
                return self._say(request, "Cannot resume this run", error_text(error), 409)
        if outcome is not None:
            current = await self.settings.store.load(record.run_id)
            return self._decided(request, current, gate_id, said=outcome)
        return RedirectResponse(run_url(record.run_id), status_code=303)

    def _undecided(
        self, record: RunRecord, gate_id: str | None, decisions: list[GateDecision]
    ) -> list[str]:
        """The live gates the form left without a decision (none when continuing a run)."""
        checkpoint = record.checkpoint
        if gate_id is None or checkpoint is None or record.status is not RunStatus.PAUSED:
            return []
        decided = {decision.gate_id for decision in decisions}
        live = live_gates(checkpoint, datetime.now(UTC))
        return [gate.gate_id for gate in live if gate.gate_id not in decided]

    async def _start(self, run_id: str, decisions: list[GateDecision], seen: str) -> str | None:
        """Resume the run in the console's task group.

        Returns `None` once the run has claimed its record, or what stopped it when someone
        else had it first.
        """
        tasks = self.tasks
        if tasks is None:
            raise CliError("the console is not running")
        version = int(seen) if seen.isdecimal() else -1
        outcome: str | None = await tasks.start(self._resume, run_id, decisions, version)
        return outcome

    async def _resume(
        self,
        run_id: str,
        decisions: list[GateDecision],
        seen: int,
        *,
        task_status: TaskStatus[str | None],
    ) -> None:
        started = False

        def claimed() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started(None)

        def options(formation: Formation, locator: str) -> EngineOptions:
            chosen: EngineOptions = {
                "store": self.settings.store,
                "formation": locator,
                "durability": "cycle",
                "lease": DEFAULT_LEASE,
                "observers": (_Claim(claimed),),
            }
            key = signing_key()
            if key is not None:
                chosen["signing_key"] = key
            return chosen

        try:
            resumed = await resume_stored(
                self.settings.store,
                run_id,
                decisions,
                formation=self.settings.formation,
                options=options,
                err=VisibleLines(sys.stderr),
                seen_version=seen,
            )
        except Exception:
            if not started:
                raise
            _LOG.exception("run %s failed after it resumed", run_id)
            return
        if not started:
            task_status.started(resumed if isinstance(resumed, str) else None)

    # -- answers -------------------------------------------------------------------------

    def _decided(
        self, request: Request, record: RunRecord, gate_id: str | None, said: str = ""
    ) -> Response:
        """The page for a gate that is no longer waiting: who decided it, if anyone."""
        reviewer = _reviewer(request)
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
            reviewer=reviewer.name,
            back=run_url(record.run_id),
        )
        return HTMLResponse(html, status_code=409)

    def _say(self, request: Request, title: str, message: str, status: int) -> Response:
        reviewer = _reviewer(request)
        html = message_page(title, message, reviewer=reviewer.name, refused=status == 403)
        return HTMLResponse(html, status_code=status)

    def _missing(self, request: Request, message: str) -> Response:
        return self._say(request, "Not found", message, 404)


def _reviewer(request: Request) -> Reviewer:
    reviewer: Reviewer = request.scope["state"]["reviewer"]
    return reviewer


def _parts(request: Request) -> tuple[str, tuple[str, ...]] | None:
    """The run id and the rest of a `/runs/...` path, each segment percent-decoded once."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    segments = raw.decode("latin-1").split("?", 1)[0].split("/")[2:]
    if not segments or not segments[0]:
        return None
    decoded = [unquote(segment) for segment in segments]
    return decoded[0], tuple(decoded[1:])


async def _form(request: Request) -> dict[str, str] | None:
    """A urlencoded form of at most 64 KiB; `None` for anything else."""
    if request.headers.get("content-type", "").split(";")[0] != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            return None
    pairs = parse_qsl(body.decode("utf-8", "replace"), max_num_fields=1000)
    return dict(pairs)


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return origin in {f"http://{host}", f"https://{host}"}


def _decisions(form: dict[str, str], reviewer: Reviewer) -> list[GateDecision]:
    decisions: list[GateDecision] = []
    for field, value in form.items():
        if not field.startswith("gate:") or value not in {"approve", "reject"}:
            continue
        gate = field.removeprefix("gate:")
        reason = form.get(f"reason:{gate}", "").strip() or None
        approved = value == "approve"
        decisions.append(
            GateDecision(gate_id=gate, approved=approved, by=reviewer.name, reason=reason)
        )
    return decisions


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
        ],
        lifespan=lifespan,
    )
    return _Guard(app, settings.reviewers)
