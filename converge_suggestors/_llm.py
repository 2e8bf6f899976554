"""`LlmSuggestor`: asks a chat model for proposals and stages them for validation."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Final, cast, final

from pydantic import BaseModel, JsonValue

from converge import (
    AgentEffect,
    AnyKey,
    Context,
    ContextKey,
    Fact,
    KeyLike,
    ProposedFact,
    Refusal,
    get_logger,
    key_named,
    token_sink,
)

from ._chat import (
    ChatMessage,
    ChatProvider,
    ChatRequest,
    ChatResponse,
    ProviderError,
    StreamingChatProvider,
    ToolCall,
)
from ._chat import ResponseSchema as _ResponseSchema
from ._llm_format import (
    InvalidItem,
    ParsedReply,
    format_prompt,
    item_model,
    parse_reply,
    reply_schema,
)
from ._llm_telemetry import CallRecord, chat_span, describe_provider, describe_text, llm_tracer
from ._mcp import McpServer, McpTool
from ._tool import (
    ACTIONS,
    REASON,
    ActionRequest,
    Tool,
    arguments_digest,
    canonical_arguments,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["LlmOutputError", "LlmSuggestor"]

_REPLY_EXCERPT: Final = 200
_REPAIR_ECHO: Final = 4000
_UNSAFE_ID: Final = re.compile(r"[^A-Za-z0-9_.:-]")
_TOOL_ANSWER: Final = 4000
"""Most characters of a tool's result (or error) sent back to the model."""
_RECORDED: Final = 800
"""Most characters of a call's arguments, result or error recorded in the trace (a result cut
is recorded as its text, cut, with `result_chars`)."""
_MAX_TOOL_TURNS: Final = 8
"""Most replies with tool calls `max_tool_turns` may allow: 8 x 8 recorded calls of at most
about 8 KB each stay well within the trace's 1 MiB of metadata per call."""
_CALLS_PER_TURN: Final = 8
"""Most tool calls of one reply that are run; the rest are answered as not run."""
_REJECTED: Final = "hitl-rejected:"
DEFAULT_MAX_TOKENS: Final = 512
"""Completion tokens per call when `max_tokens` is not given."""


class LlmOutputError(ValueError):
    """A model's replies were not the JSON the suggestor asked for, repairs included.

    `tokens` holds what every attempt cost, so the engine still counts it against the budget,
    and `metadata` what the trace records about the call (see `LlmSuggestor`).
    """

    tokens: int
    """Prompt plus completion tokens of every attempt (as far as they are known)."""
    tokens_unknown: bool
    """True when some attempt's cost is unknown: `tokens` is then a lower bound."""
    attempts: int
    """How many replies were asked for (1 + repairs)."""
    metadata: dict[str, JsonValue]
    """The call's model, options and attempts, copied to `Execution.metadata`."""

    def __init__(
        self,
        message: str,
        *,
        tokens: int = 0,
        attempts: int = 1,
        metadata: dict[str, JsonValue] | None = None,
        tokens_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.tokens_unknown = tokens_unknown
        self.attempts = attempts
        self.metadata = dict(metadata or {})


@final
class LlmSuggestor:
    """Shows a chat model its instructions and the facts of its dependency keys; stages replies.

    Every valid proposal in the reply is staged under `PROPOSALS` with `target`, provenance
    `"{name}:{model}"` and evidence = the `"key/id"` of every fact the model was shown, so a
    separate `ValidationAgent` decides what becomes a fact. The request carries the JSON
    schema of the reply (`ChatRequest.response_schema`), which a provider may send as
    `response_format`. A reply that yields no valid proposal (not JSON, the wrong shape, every
    item invalid) is sent back with the problem, up to `max_repairs` times; each invalid item
    of a reply that has valid ones is refused (`AgentEffect.refused`), which the engine
    records as a rejection with the reason.

    Each call's effect carries `metadata`, which the engine copies to the trace's
    `Execution.metadata`: the model and provider, the options sent, the system prompt's length
    and digest (not its text), the attempts with each one's usage and finish reason, the
    problems that were repaired and the number of invalid items. A failure it raises
    (`LlmOutputError`, `ProviderError`) carries the same `metadata` so far, and `tokens`: the
    sum of every attempt's usage when all are known. When an attempt's cost is unknown (a call
    that timed out or was dropped), the first call's error has `tokens=None`, and a later
    (repair) call's error carries the earlier attempts' known sum with `tokens_unknown=True`:
    the engine counts it as a lower bound and marks the call `tokens_unknown`.

    It accepts while some dependency fact has not yet been shown to it (read from the
    evidence of its own staged facts), so it runs once per new input and the loop converges.
    Its `dependencies` are the given keys plus `PROPOSALS`; when more than
    `max_context_facts` facts are waiting, it shows the oldest unseen ones first and runs
    again in the next cycle for the rest.

    Args:
        name: Unique suggestor name.
        provider: The chat model.
        dependencies: Keys whose facts the model is shown.
        target: The key its proposals ask to be promoted into.
        instructions: The task, sent in the system message.
        model: The model to ask; `None` for the provider's default.
        temperature: Sampling temperature.
        max_context_facts: Most facts shown per call; facts not yet shown go first.
        max_tokens: Most completion tokens per call (never unbounded).
        top_p: Nucleus sampling, or `None` for the server's default.
        seed: A sampling seed, or `None`.
        stop: Sequences that end a reply.
        system_prompt: Text sent before the instructions in the system message.
        format_prompt: The description of the reply format sent after the instructions;
            `None` for the default, which describes each field in words; `""` for none.
        payload_model: A pydantic model each proposal's `payload` must match; `None` for
            proposals without a required payload.
        max_repairs: How many times an unusable reply is sent back with its problem.
        tools: Tools the model may call (see `Tool`): a read tool runs here and its
            arguments and result are recorded in the trace (`metadata["tool_calls"]`); an
            action's call is staged as a proposal under `ACTIONS`, for `ActionRunner`.
        mcp_servers: MCP servers whose tools the model may call, as read tools or, those named
            in a server's `actions`, as actions (see `McpServer`): each is opened at the start
            of every `execute` and closed at its end.
        first_tool: The tool the model's first reply must call (sent as `tool_choice`, which
            servers that constrain output enforce); later replies choose freely. `None`: the
            model chooses from the start.
        max_tool_turns: Most replies with tool calls per `execute` (1 to 8); one more is an
            `LlmOutputError`.
        tracer_provider: Where its OpenTelemetry spans go (one per model call), when
            `opentelemetry-api` is installed; the global provider by default.
        stream: Stream each model call's text, as `TokenStreamed` events of
            `Engine.stream` (the provider must be a `StreamingChatProvider`). Only when
            a stream listens: under `run` the calls are made whole. Nothing of it is
            recorded: the effect is the same either way (but for its token counts, unknown
            when the server sends no usage in a stream).
    """

    def __init__(
        self,
        name: str,
        provider: ChatProvider,
        *,
        dependencies: Sequence[AnyKey],
        target: KeyLike,
        instructions: str,
        model: str | None = None,
        temperature: float = 0.0,
        max_context_facts: int = 50,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        top_p: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        system_prompt: str | None = None,
        format_prompt: str | None = None,
        payload_model: type[BaseModel] | None = None,
        max_repairs: int = 2,
        tools: Sequence[Tool] = (),
        mcp_servers: Sequence[McpServer] = (),
        max_tool_turns: int = 4,
        first_tool: str | None = None,
        tracer_provider: TracerProvider | None = None,
        stream: bool = False,
    ) -> None:
        target = key_named(target)
        if stream and not isinstance(provider, StreamingChatProvider):
            raise ValueError(
                f"LlmSuggestor {name!r}: stream=True needs a provider with a `stream` method "
                f"(a StreamingChatProvider, such as OpenAIChatProvider); "
                f"{type(provider).__name__} has none"
            )
        self._streams = provider if stream and isinstance(provider, StreamingChatProvider) else None
        if target is ContextKey.PROPOSALS:
            raise ValueError(f"LlmSuggestor {name!r}: target cannot be PROPOSALS")
        if max_context_facts < 1:
            raise ValueError(f"LlmSuggestor {name!r}: max_context_facts must be at least 1")
        if max_repairs < 0:
            raise ValueError(f"LlmSuggestor {name!r}: max_repairs must be 0 or more")
        if not 1 <= max_tool_turns <= _MAX_TOOL_TURNS:
            raise ValueError(
                f"LlmSuggestor {name!r}: max_tool_turns must be from 1 to {_MAX_TOOL_TURNS} "
                "(every call is recorded in the trace, whose metadata is bounded)"
            )
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"LlmSuggestor {name!r}: two tools named {tool.name!r}")
            self._tools[tool.name] = tool
        self._max_tool_turns = max_tool_turns
        self._servers = tuple(mcp_servers)
        if first_tool is not None and first_tool not in self._tools and not self._servers:
            raise ValueError(
                f"LlmSuggestor {name!r}: first_tool {first_tool!r} is not one of its tools"
            )
        self._first_tool = first_tool
        self._acts = any(tool.kind == "action" for tool in tools) or any(
            server.actions for server in self._servers
        )
        self._name = name
        self._provider = provider
        self._shown_keys = tuple(dict.fromkeys(dependencies))
        self._dependencies = tuple(dict.fromkeys((*self._shown_keys, ContextKey.PROPOSALS)))
        self._target = target
        self._model = model
        self._max_context_facts = max_context_facts
        self._max_repairs = max_repairs
        self._item_model = item_model(payload_model)
        self._template = ChatRequest(
            model=model or "",
            messages=(),
            temperature=temperature,
            max_tokens=max_tokens,
            top_p=top_p,
            seed=seed,
            stop=tuple(stop),
            response_schema=_ResponseSchema(
                name="proposals", json_schema=reply_schema(payload_model)
            ),
            tools=tuple(tool.spec for tool in self._tools.values()),
        )
        described = _format_prompt(payload_model) if format_prompt is None else format_prompt
        self._system = "\n\n".join(
            part for part in (system_prompt, instructions, described) if part
        )
        self._tracer = llm_tracer(tracer_provider)
        self._safe_name = _UNSAFE_ID.sub("-", name)
        default = getattr(provider, "model", "")
        self._asked = model or (default if isinstance(default, str) else "") or None
        self._setup = self._call_setup(system_prompt)

    def __repr__(self) -> str:
        return f"LlmSuggestor({self._name!r}, target={self._target.value!r})"

    @property
    def name(self) -> str:
        """The name given at construction."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The keys whose facts the model is shown, plus `PROPOSALS` (read by `accepts`)."""
        return self._dependencies

    @property
    def writes(self) -> Sequence[AnyKey]:
        """`PROPOSALS`, for the model's output, and `ACTIONS` when it has actions."""
        return (ContextKey.PROPOSALS, ACTIONS) if self._acts else (ContextKey.PROPOSALS,)

    @property
    def system_message(self) -> str:
        """The system message every call sends: system prompt, instructions, format."""
        return self._system

    @property
    def options(self) -> dict[str, JsonValue]:
        """The call options every request carries (what its spans and logs record)."""
        request = self._template
        return {
            "model": request.model or None,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            "stop": list(request.stop),
            "max_repairs": self._max_repairs,
            **(
                {
                    "tools": list(self._tools),
                    "mcp_servers": [server.name for server in self._servers],
                    "max_tool_turns": self._max_tool_turns,
                }
                if self._tools or self._servers
                else {}
            ),
        }

    def _call_setup(self, system_prompt: str | None) -> dict[str, JsonValue]:
        """What every call's trace metadata starts with: model, options, provider, prompts."""
        return {
            **self.options,
            "model": self._asked,
            **describe_provider(self._provider),
            "system_prompt": describe_text(system_prompt),
            "system_message": describe_text(self._system),
        }

    def accepts(self, ctx: Context, /) -> bool:
        """True while some dependency fact is not yet in the evidence of its staged facts."""
        return bool(self._unseen(ctx, self._seen(ctx)))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Ask the model, running its read tools, repairing unusable replies; stage the valid
        proposals and the actions it asked for.

        Raises:
            LlmOutputError: No reply was usable, repairs included, or the model asked for
                tools in more than `max_tool_turns` replies.
            ProviderError: The provider failed (its `tokens` include earlier attempts', or are
                `None` when unknown; its `metadata` records the attempts so far).
            McpToolError: An MCP server could not be opened.
            ValueError: An MCP server offers a tool whose name another tool has.
        """
        if not self._servers:
            return await self._converse(ctx, self._tools)
        async with AsyncExitStack() as stack:
            tools: dict[str, Tool | McpTool] = dict(self._tools)
            for server in self._servers:
                for tool in await stack.enter_async_context(server.connect()):
                    if tool.name in tools:
                        raise ValueError(
                            f"{self._name}: MCP server {server.name!r} offers a tool named "
                            f"{tool.name!r}, and another tool has that name"
                        )
                    tools[tool.name] = tool
            return await self._converse(ctx, tools)

    async def _converse(self, ctx: Context, tools: Mapping[str, Tool | McpTool]) -> AgentEffect:
        """The conversation of one `execute`, with `tools` offered."""
        specs = tuple(tool.spec for tool in tools.values())
        shown = self._shown(ctx)
        evidence = tuple(fact.ref for fact in shown)
        user = _describe(shown)
        if self._acts:
            user += self._rejections(ctx)
        messages = [
            ChatMessage(role="system", content=self._system),
            ChatMessage(role="user", content=user),
        ]
        attempts = self._max_repairs + 1
        record = CallRecord(dict(self._setup))
        problem = ""
        actions: dict[str, ProposedFact] = {}
        attempt = repairs = turns = 0
        while repairs < attempts:
            attempt += 1
            choice = self._first_tool if attempt == 1 and specs else None
            request = self._template.model_copy(
                update={"messages": tuple(messages), "tools": specs, "tool_choice": choice}
            )
            response, parsed = await self._ask(request, attempt, record, evidence)
            if response.tool_calls and tools:
                record.answered(response, None)
                turns += 1
                if turns > self._max_tool_turns:
                    raise LlmOutputError(
                        f"{self._name}: the model asked for tools in more than "
                        f"{self._max_tool_turns} replies (max_tool_turns)",
                        tokens=record.known_tokens,
                        attempts=attempt,
                        metadata=record.metadata(),
                        tokens_unknown=record.tokens is None,
                    )
                messages.append(
                    ChatMessage(
                        role="assistant",
                        content=_cut(response.content, _REPAIR_ECHO),
                        tool_calls=response.tool_calls,
                    )
                )
                for index, call in enumerate(response.tool_calls):
                    answer = await self._use(call, index, turns, tools, record, actions, evidence)
                    messages.append(ChatMessage(role="tool", content=answer, tool_call_id=call.id))
                continue
            repairs += 1
            record.answered(response, parsed.problem)
            self._log(response, attempt, parsed)
            if parsed.problem is None:
                refused = [self._refusal(item, response) for item in parsed.invalid]
                record.invalid = len(refused)
                return AgentEffect(
                    proposals=(*parsed.proposals, *actions.values()),
                    refused=tuple(refused),
                    tokens=record.known_tokens,
                    tokens_unknown=record.tokens is None,
                    metadata=record.metadata(),
                )
            problem = f"{parsed.problem}; reply: {_cut(response.content, _REPLY_EXCERPT)!r}"
            messages += [
                ChatMessage(role="assistant", content=_cut(response.content, _REPAIR_ECHO)),
                ChatMessage(role="user", content=_repair_prompt(parsed.problem)),
            ]
        raise LlmOutputError(
            f"{self._name}: no usable reply after {attempts} attempt(s) "
            f"(1 + {self._max_repairs} repairs); last: {problem}",
            tokens=record.known_tokens,
            attempts=attempts,
            metadata=record.metadata(),
            tokens_unknown=record.tokens is None,
        )

    async def _ask(
        self, request: ChatRequest, attempt: int, record: CallRecord, evidence: tuple[str, ...]
    ) -> tuple[ChatResponse, ParsedReply]:
        """One model call in its own span: the reply and what it yields."""
        with chat_span(
            self._tracer,
            request,
            provider_name=str(getattr(self._provider, "provider_name", "unknown")),
            model=self._asked or "default",
            suggestor=self._name,
            attempt=attempt,
        ) as span:
            try:
                response = await self._call(request, attempt)
            except ProviderError as error:
                span.failed(error)
                record.failed(error.tokens, unknown=error.tokens_unknown)
                earlier: object = getattr(error, "metadata", None)  # a subclass may not set it
                known = cast("dict[str, JsonValue]", earlier) if isinstance(earlier, dict) else {}
                metadata = {**known, **record.metadata()}
                if attempt == 1:
                    error.metadata = metadata
                    raise
                raise ProviderError(
                    f"{self._name}: attempt {attempt} (a repair) failed: {error}",
                    status=error.status,
                    tokens=record.known_tokens,
                    metadata=metadata,
                    tokens_unknown=record.tokens is None,
                ) from error
            except Exception as error:
                span.failed(error)
                raise
            span.response(response)
            if response.tool_calls and request.tools:
                return response, ParsedReply()
            provenance = f"{self._name}:{response.model or self._model or 'default'}"

            def make(item: BaseModel) -> ProposedFact:
                return ProposedFact.model_validate(
                    {
                        **item.model_dump(mode="json", include={"id", "content", "confidence"}),
                        "key": ContextKey.PROPOSALS,
                        "payload": _payload(item),
                        "provenance": provenance,
                        "target": self._target,
                        "evidence": evidence,
                    }
                )

            parsed = parse_reply(response.content, self._item_model, make)
            if parsed.problem is not None:
                span.invalid(parsed.problem)
            return response, parsed

    async def _call(self, request: ChatRequest, call: int) -> ChatResponse:
        """The provider's reply to `request`, streamed to the run's token sink when this
        suggestor streams and `Engine.stream` listens."""
        streams = self._streams
        sink = None if streams is None else token_sink()
        if streams is None or sink is None:
            return await self._provider.complete(request)
        name = self._name

        async def on_text(attempt: int, text: str, /) -> None:
            await sink(name, call, attempt, text)

        return await streams.stream(request, on_text)

    async def _use(
        self,
        call: ToolCall,
        index: int,
        turn: int,
        tools: Mapping[str, Tool | McpTool],
        record: CallRecord,
        actions: dict[str, ProposedFact],
        evidence: tuple[str, ...],
    ) -> str:
        """Answer one tool call: run a read tool, stage an action; record it either way.

        Returns the text the model is sent back. Nothing the model sent is trusted: an unknown
        tool, arguments that do not validate, a tool that raises or times out are each
        answered with the problem and recorded with their status.
        """
        entry: dict[str, JsonValue] = {
            "turn": turn,
            "id": _cut(call.id, 200),
            "tool": _cut(call.name, 200),
            "arguments": _cut(call.arguments, _RECORDED),
        }
        record.tool_calls.append(entry)
        log = get_logger(suggestor=self._name)
        if index >= _CALLS_PER_TURN:
            entry["status"] = "not_run"
            return f"Not run: at most {_CALLS_PER_TURN} tool calls per reply."
        tool = tools.get(call.name)
        if tool is None:
            entry["status"] = "unknown_tool"
            offered = ", ".join(tools)
            return (
                f"Error: there is no tool named {_cut(call.name, 64)!r}; the tools are: {offered}."
            )
        entry["kind"] = tool.kind
        if tool.kind == "action":
            return self._stage(call, tool, entry, actions, evidence)
        try:
            arguments = tool.validate(call.arguments)
        except ValueError as error:
            entry["status"] = "invalid"
            entry["error"] = _cut(str(error), _RECORDED)
            return f"Error: invalid arguments for {tool.name}: {_cut(str(error), _TOOL_ANSWER)}"
        try:
            result = await tool.call(arguments)
        except TimeoutError:
            entry["status"] = "timed_out"
            log.warning("tool_timed_out", tool=tool.name)
            return f"Error: {tool.name} did not answer within {tool.timeout:g}s."
        except Exception as error:  # the tool's failure is the model's answer, and recorded
            problem = _cut(f"{type(error).__name__}: {error}", _TOOL_ANSWER)
            entry["status"] = "failed"
            entry["error"] = _cut(problem, _RECORDED)
            log.warning("tool_failed", tool=tool.name, error=entry["error"])
            return f"Error: {tool.name} failed: {problem}"
        text = json.dumps(result, ensure_ascii=False)
        entry["status"] = "ok"
        if len(text) <= _RECORDED:
            entry["result"] = result
        else:
            entry["result"] = _cut(text, _RECORDED)
            entry["result_chars"] = len(text)
        log.debug("tool_called", tool=tool.name)
        return _cut(text, _TOOL_ANSWER)

    def _stage(
        self,
        call: ToolCall,
        tool: Tool | McpTool,
        entry: dict[str, JsonValue],
        actions: dict[str, ProposedFact],
        evidence: tuple[str, ...],
    ) -> str:
        """Stage an action's call as a proposal under `ACTIONS`; it is not run here."""
        try:
            raw: object = json.loads(call.arguments, strict=False)
        except ValueError:
            raw = None
        reason = ""
        if isinstance(raw, dict):
            given = cast("dict[str, object]", raw)
            stated = given.pop(REASON, "")
            reason = stated if isinstance(stated, str) else ""
            raw = given
        try:
            if not reason.strip():
                raise ValueError("reason: a non-empty string is required (why this action)")
            arguments = tool.validate(raw if raw is not None else call.arguments)
        except ValueError as error:
            entry["status"] = "invalid"
            entry["error"] = _cut(str(error), _RECORDED)
            return f"Error: invalid arguments for {tool.name}: {_cut(str(error), _TOOL_ANSWER)}"
        digest = arguments_digest(arguments)
        ident = f"{self._safe_name}.{tool.name}.{digest[:16]}"
        request = ActionRequest(
            tool=tool.name, arguments=arguments, arguments_sha256=digest, reason=_cut(reason, 2000)
        )
        actions[ident] = ProposedFact(
            key=ACTIONS,
            id=ident,
            content=f"{tool.name} {canonical_arguments(arguments)} (reason: {_cut(reason, 500)})",
            payload=request.model_dump(mode="json"),
            provenance=f"{self._name}:{self._asked or 'default'}",
            evidence=evidence,
        )
        entry["status"] = "proposed"
        entry["action"] = ACTIONS / ident
        return (
            f"Proposed as action {ACTIONS / ident}; it runs only after approval, not now. "
            "Do not call it again."
        )

    def _rejections(self, ctx: Context) -> str:
        """Lines naming this suggestor's actions that a reviewer rejected, for the model."""
        prefix = f"{_REJECTED}{self._safe_name}."
        notes = [
            fact.content for fact in ctx.get(ContextKey.DIAGNOSTIC) if fact.id.startswith(prefix)
        ]
        if not notes:
            return ""
        return "\n\nActions of yours that a reviewer rejected (do not propose them again):\n" + (
            "\n".join(f"- {_cut(note, 500)}" for note in notes)
        )

    def _refusal(self, item: InvalidItem, response: ChatResponse) -> Refusal:
        """One invalid item, refused: a stand-in proposal holding the item, and why."""
        digest = hashlib.sha256(item.excerpt.encode()).hexdigest()[:16]
        stand_in = ProposedFact(
            key=ContextKey.PROPOSALS,
            id=f"llm-invalid:{self._safe_name}:{digest}",
            content=f"proposals[{item.index}] of the model's reply: {item.excerpt}",
            payload={"index": item.index, "item": item.excerpt},
            provenance=f"{self._name}:{response.model or self._model or 'default'}",
            target=self._target,
        )
        return Refusal(proposal=stand_in, reason=f"not a valid proposal ({item.reason})")

    def _log(self, response: ChatResponse, attempt: int, parsed: ParsedReply) -> None:
        get_logger(suggestor=self._name).debug(
            "llm_call",
            attempt=attempt,
            response_model=response.model,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            finish_reason=response.finish_reason,
            proposals=len(parsed.proposals),
            invalid=len(parsed.invalid),
            problem=parsed.problem,
            **self.options,
        )

    def _shown(self, ctx: Context) -> list[Fact]:
        seen = self._seen(ctx)
        limit = self._max_context_facts
        shown = self._unseen(ctx, seen)[:limit]
        if len(shown) < limit:
            shown += [fact for fact in self._facts(ctx) if fact.ref in seen][: limit - len(shown)]
        return shown

    def _facts(self, ctx: Context) -> list[Fact]:
        return [fact for key in self._shown_keys for fact in ctx.get(key)]

    def _seen(self, ctx: Context) -> set[str]:
        name = self._name
        keys = (ContextKey.PROPOSALS, ACTIONS) if self._acts else (ContextKey.PROPOSALS,)
        return {
            ref
            for key in keys
            for staged in ctx.get(key)
            if staged.promotion.suggestor == name
            for ref in staged.evidence
        }

    def _unseen(self, ctx: Context, seen: set[str]) -> list[Fact]:
        return [fact for fact in self._facts(ctx) if fact.ref not in seen]


def _format_prompt(payload_model: type[BaseModel] | None) -> str:
    return format_prompt(payload_model)


def _payload(item: BaseModel) -> JsonValue:
    value: object = getattr(item, "payload", None)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return item.model_dump(include={"payload"}).get("payload")


def _repair_prompt(problem: str) -> str:
    return (
        f"That reply cannot be used: {problem}. Reply again with the corrected JSON object "
        "only, in the format described."
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(facts: Sequence[Fact]) -> str:
    if not facts:
        return "There are no facts yet."
    lines = ["Facts (key/id, provenance: content):"]
    lines.extend(f"- {fact.ref} ({fact.provenance}): {fact.content}" for fact in facts)
    return "\n".join(lines)
