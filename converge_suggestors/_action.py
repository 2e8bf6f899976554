"""`ActionRunner`: runs each promoted action once, and records what it did as a fact."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Final, final

from pydantic import JsonValue, ValidationError

from converge import AgentEffect, AnyKey, Context, Fact, ProposedFact, get_logger

from ._mcp import McpServer, McpTool
from ._tool import (
    ACTION_RESULTS,
    ACTIONS,
    ActionOutcome,
    ActionRequest,
    Tool,
    arguments_digest,
    canonical_arguments,
)

__all__ = ["ActionRunner", "idempotency_key"]

_ERROR_EXCERPT: Final = 500


def idempotency_key(action: Fact, /, *, namespace: str = "") -> str:
    """The key an action's tool is given: SHA-256 of the namespace, the action's reference and
    its digest (which covers its arguments, its cycle, its clock and who approved it)."""
    text = f"converge-action\0{namespace}\0{action.ref}\0{action.digest}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@final
class ActionRunner:
    """Runs every promoted `ACTIONS` fact that has no `ACTION_RESULTS` fact yet, once.

    For each such action, in the order it was promoted, it checks that a person approved it
    (unless `require_approval=False`), that its tool is one of `tools` and an action, and
    that its arguments are byte for byte the ones approved (their SHA-256 and their
    validation round trip); then it calls the tool with them and `idempotency_key`, within the
    tool's timeout. Whatever happens becomes one `ACTION_RESULTS` fact, id the action's id,
    citing the action: `done` with the result, `failed` with the error, `timed_out` (the
    effect is unknown), or `refused` (the tool was never called). An action with a result is
    never run again in the run; replay and fork use the recorded result.

    After a crash between the call and the save of its result, the run continues from its
    last saved cycle and calls the tool again with the same idempotency key: a tool that keys
    its effect by it takes effect once.

    Args:
        name: Unique suggestor name.
        tools: The actions it may run (read tools are refused here).
        mcp_servers: MCP servers whose `actions` it may run: opened only when an action is
            pending, for that `execute`. A server that cannot be opened fails the execution
            and leaves its actions pending (none is recorded as run).
        require_approval: Run only actions a person approved at a human gate (not a timeout).
        namespace: Mixed into every idempotency key: give each deployment its own, so two
            deployments that reach the same action do not share a key.
    """

    def __init__(
        self,
        name: str = "action-runner",
        *,
        tools: Sequence[Tool] = (),
        mcp_servers: Sequence[McpServer] = (),
        require_approval: bool = True,
        namespace: str = "",
    ) -> None:
        for server in mcp_servers:
            if not server.actions:
                raise ValueError(
                    f"ActionRunner {name!r}: MCP server {server.name!r} declares no actions"
                )
        actions: dict[str, Tool] = {}
        for tool in tools:
            if tool.kind != "action":
                raise ValueError(f"ActionRunner {name!r}: tool {tool.name!r} is not an action")
            if tool.name in actions:
                raise ValueError(f"ActionRunner {name!r}: two tools named {tool.name!r}")
            actions[tool.name] = tool
        self._name = name
        self._tools = actions
        self._servers = tuple(mcp_servers)
        self._require_approval = require_approval
        self._namespace = namespace

    def __repr__(self) -> str:
        servers = [server.name for server in self._servers]
        return (
            f"ActionRunner({self._name!r}, tools={sorted(self._tools)!r}, mcp_servers={servers!r})"
        )

    @property
    def name(self) -> str:
        """The name given at construction."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """`ACTIONS` and `ACTION_RESULTS`."""
        return (ACTIONS, ACTION_RESULTS)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """`ACTION_RESULTS` only."""
        return (ACTION_RESULTS,)

    def accepts(self, ctx: Context, /) -> bool:
        """True while some promoted action has no result yet."""
        return bool(self._pending(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Run each pending action once; propose what each did."""
        pending = self._pending(ctx)
        if not self._servers or not pending:
            outcomes = [await self._run(action, self._tools) for action in pending]
            return AgentEffect(proposals=tuple(outcomes))
        async with AsyncExitStack() as stack:
            tools: dict[str, Tool | McpTool] = dict(self._tools)
            for server in self._servers:
                for tool in await stack.enter_async_context(server.connect()):
                    if tool.kind != "action":
                        continue
                    if tool.name in tools:
                        raise ValueError(
                            f"ActionRunner {self._name!r}: MCP server {server.name!r} offers "
                            f"an action named {tool.name!r}, and another action has that name"
                        )
                    tools[tool.name] = tool
            outcomes = [await self._run(action, tools) for action in pending]
        return AgentEffect(proposals=tuple(outcomes))

    def _pending(self, ctx: Context) -> list[Fact]:
        done = {fact.id for fact in ctx.get(ACTION_RESULTS)}
        return [fact for fact in ctx.get(ACTIONS) if fact.id not in done]

    async def _run(self, action: Fact, tools: Mapping[str, Tool | McpTool]) -> ProposedFact:
        key = idempotency_key(action, namespace=self._namespace)
        log = get_logger(suggestor=self._name).bind(action=action.ref)
        try:
            request = ActionRequest.model_validate(action.payload)
        except ValidationError as error:
            return self._outcome(
                action,
                "refused",
                key,
                "",
                error=f"not an action request ({error.errors()[0]['msg']})",
            )
        digest = request.arguments_sha256
        problem = self._problem(action, request, tools)
        if problem is not None:
            log.warning("action_refused", reason=problem)
            return self._outcome(action, "refused", key, digest, error=problem)
        tool = tools[request.tool]
        log.info("action_started", tool=tool.name, idempotency_key=key)
        try:
            result = await tool.call(request.arguments, idempotency_key=key)
        except TimeoutError:
            log.warning("action_timed_out", tool=tool.name)
            return self._outcome(
                action,
                "timed_out",
                key,
                digest,
                error=f"no answer within {tool.timeout:g}s: whether it took effect is unknown",
            )
        except Exception as error:  # the tool's failure is recorded, never read as success
            text = _cut(f"{type(error).__name__}: {error}")
            log.warning("action_failed", tool=tool.name, error=text)
            return self._outcome(action, "failed", key, digest, error=text)
        log.info("action_done", tool=tool.name)
        return self._outcome(action, "done", key, digest, result=result)

    def _problem(
        self, action: Fact, request: ActionRequest, tools: Mapping[str, Tool | McpTool]
    ) -> str | None:
        """Why `action` must not run, or `None`."""
        promotion = action.promotion
        if self._require_approval and (
            promotion.gate != "human" or promotion.approved_by in (None, "timeout")
        ):
            by = promotion.approved_by or promotion.gate
            return f"not approved by a person (promoted by {by}); the runner requires approval"
        tool = tools.get(request.tool)
        if tool is None:
            return f"no action named {request.tool!r} in this runner"
        if arguments_digest(request.arguments) != request.arguments_sha256:
            return "its arguments differ from the approved ones (SHA-256 mismatch)"
        try:
            passed = tool.validate(request.arguments)
        except ValueError as error:
            return f"its arguments do not validate: {error}"
        if canonical_arguments(passed) != canonical_arguments(request.arguments):
            return "its arguments would not be passed exactly as approved (validation changes them)"
        return None

    def _outcome(
        self,
        action: Fact,
        status: str,
        key: str,
        digest: str,
        *,
        result: JsonValue = None,
        error: str | None = None,
    ) -> ProposedFact:
        outcome = ActionOutcome.model_validate(
            {
                "action": action.ref,
                "status": status,
                "result": result,
                "error": error,
                "idempotency_key": key,
                "arguments_sha256": digest,
            }
        )
        words = {
            "done": "done",
            "failed": "failed",
            "timed_out": "timed out (effect unknown)",
            "refused": "refused (not run)",
        }[status]
        content = f"action {action.ref}: {words}" + (f": {error}" if error else "")
        return ProposedFact(
            key=ACTION_RESULTS,
            id=action.id,
            content=content,
            payload=outcome.model_dump(mode="json"),
            provenance=self._name,
            evidence=(action.ref,),
        )


def _cut(text: str) -> str:
    return text if len(text) <= _ERROR_EXCERPT else text[: _ERROR_EXCERPT - 1] + "…"
