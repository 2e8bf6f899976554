"""`OpenAIChatProvider`: any OpenAI-compatible `POST {base_url}/chat/completions` endpoint.

Hosted APIs, vLLM, Ollama and the llama.cpp servers all speak it. The request is built and sent
by the official `openai` SDK over `httpx`, both installed with the `llm` extra
(`pip install "converge-engine[llm]"`) and imported on first use.

What stays hand-written, and why (each was tried with the SDK and failed a test of the
misbehaving-server suite):

- the deadline and the byte cap: the SDK's timeouts are per read, and it reads an error
  answer's body whole (an endless 404 body for 20 s, to 887 MB; a gzip bomb to 400 MB), so the
  SDK is given an `httpx` client whose transport reads error bodies within a cap, and the whole
  attempt runs under one deadline;
- the reply's validation: the SDK accepts `{"choices": "many"}` as a completion, and its strict
  mode rejects what lenient servers send (no `id`, no `object`), so the raw body is validated here;
- the stream's checks: the SDK accepts a stream cut before `data: [DONE]`, or data after it;
- retries: the SDK's are off (`max_retries=0`): converge's policy retries only what cannot have
  been generated twice, and says so in the trace.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self, cast, final, get_args
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import anyio
from pydantic import BaseModel, JsonValue, NonNegativeInt, ValidationError

from converge import get_logger

from ._body import BodyTooLarge, BodyUnreadable
from ._chat import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ProviderError,
    StructuredOutput,
    ToolCall,
)
from ._exchange import ACCEPT_ENCODING, Answer, Exchange, bounded_transport
from ._http import endpoint_url, retry_after_seconds, safe_url
from ._llm_format import describe_validation_error
from ._llm_telemetry import record_retry
from ._loop_client import LoopBoundClient
from ._secrets import Scrubber, guard_logs
from ._sse import StreamedReply

if TYPE_CHECKING:
    import httpx
    import httpx2
    import openai
    from openai.types.chat import ChatCompletionMessageParam

__all__ = ["OpenAIChatProvider"]

_RETRYABLE_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
_MAX_DELAY: Final = 60.0
_EXCERPT: Final = 300
_CONNECT_TIMEOUT: Final = 10.0
_ERROR_BYTES: Final = 64 * 1024
"""Most bytes of an error answer's body read (its excerpt is cut from them)."""
DEFAULT_MAX_REPLY_BYTES: Final = 16 * 1024 * 1024
"""The default cap on a reply's bytes, after decompression: 16 MiB."""


def _llm_extra() -> object:
    try:
        import httpx
        import openai
    except ImportError:  # pragma: no cover - exercised through a test that hides httpx
        raise ImportError(
            "OpenAIChatProvider needs httpx and openai: install the 'llm' extra "
            '(pip install "converge-engine[llm]")'
        ) from None
    return httpx, openai


@final
class OpenAIChatProvider:
    """Talks to an OpenAI-compatible chat completions endpoint, with retries and backoff.

    It keeps one `httpx.AsyncClient`, created on first use and reused by every call made in
    the same event loop; a call from another event loop (a later `anyio.run` or
    `Engine.run_sync`) gets a new one, and each is closed when its event loop ends.
    `async with provider:` (or `await provider.aclose()`) closes it sooner; a later call
    opens a new one.

    Args:
        base_url: The API root, e.g. `"https://api.openai.com/v1"` or `"http://127.0.0.1:8000/v1"`.
        api_key: Sent as `Authorization: Bearer ...`; defaults to `OPENAI_API_KEY`; local
            servers usually need none. It never appears in logs, errors or reprs.
        model: The model asked for when a request names none.
        timeout: Seconds each HTTP attempt may take in all: connecting (at most 10 s of
            it), the reply's headers and its whole body. A reply not complete by then is
            not retried: the server may still be generating it.
        max_retries: Extra attempts after a connection error, a 408/425/429 or a 5xx answer.
        backoff: Seconds before the first retry, doubling each time, with jitter (a
            `Retry-After` header, in seconds or as an HTTP date, wins); at most 60 s.
        structured_output: How a request's `response_schema` is sent (see `StructuredOutput`).
        provider_name: The `gen_ai.provider.name` of telemetry spans (`"openai"`).
        max_reply_bytes: Most bytes of a reply read, after decompression (16 MiB); a longer
            reply is a failed call, and the rest of it is not read.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        structured_output: StructuredOutput = "json_schema",
        provider_name: str = "openai",
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        _llm_extra()
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_reply_bytes < 1:
            raise ValueError(f"max_reply_bytes must be positive, got {max_reply_bytes}")
        if structured_output not in get_args(StructuredOutput):
            raise ValueError(
                "structured_output must be 'json_schema', 'json_object' or 'none', "
                f"got {structured_output!r}"
            )
        self._url = endpoint_url(base_url, "chat/completions")
        parts = urlsplit(base_url)  # the SDK drops a base URL's query: it is sent apart
        self._base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        self._query: dict[str, object] = dict(parse_qsl(parts.query, keep_blank_values=True))
        self._key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._scrubber = Scrubber.of(base_url, self._key)
        guard_logs(self._scrubber)
        self._safe_url = self._scrubber.scrub(safe_url(self._url))
        self._model = model
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff = backoff
        self._max_bytes = max_reply_bytes
        self._structured_output: StructuredOutput = structured_output
        self._provider_name = provider_name
        self._clients = LoopBoundClient(self._new_client)
        self._sdk: tuple[httpx.AsyncClient, openai.AsyncOpenAI] | None = None

    def __repr__(self) -> str:
        key = "set" if self._key else "none"
        return f"OpenAIChatProvider(url={self._safe_url!r}, model={self._model!r}, api_key={key})"

    @property
    def model(self) -> str:
        """The default model."""
        return self._model

    @property
    def endpoint(self) -> str:
        """The URL it posts to, without user information, query string or fragment."""
        return self._safe_url

    @property
    def provider_name(self) -> str:
        """The `gen_ai.provider.name` of telemetry spans."""
        return self._provider_name

    @property
    def structured_output(self) -> StructuredOutput:
        """How a request's `response_schema` is sent."""
        return self._structured_output

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client, if one is open; the next call opens a new one."""
        await self._clients.aclose()

    async def complete(self, request: ChatRequest, /) -> ChatResponse:
        """Send `request`; retry what is worth retrying; parse the reply.

        Raises:
            ProviderError: A non-retryable status, a reply not complete within `timeout`,
                one over `max_reply_bytes`, retries used up, a malformed reply, or one that
                echoes a credential. Its `tokens` is 0 when no attempt can have cost any
                (error answers, connections never made), `None` when one may have (a reply
                that timed out, a dropped connection, a malformed reply).
        """
        return await self._complete(request, None)

    async def stream(
        self, request: ChatRequest, on_text: Callable[[int, str], Awaitable[None]], /
    ) -> ChatResponse:
        """`complete`, the reply streamed: `on_text(attempt, text)` takes each new piece of
        its text as it comes, and the reply returned is the one `complete` would return.

        The same bounds hold: the whole stream within `timeout` per attempt, its bytes
        within `max_reply_bytes`, the same retries (a retried attempt's text starts again,
        under the next `attempt`). Text holding a credential is not handed on (and the
        reply is refused). The request asks for the usage at the stream's end
        (`stream_options.include_usage`); a server that leaves it out makes the reply
        `tokens_unknown`.

        Raises:
            ProviderError: As `complete`, and for a stream that is not one of chat
                completion chunks, reports an error, or ends before its `data: [DONE]`.
        """
        return await self._complete(request, on_text)

    async def _complete(
        self, request: ChatRequest, on_text: Callable[[int, str], Awaitable[None]] | None
    ) -> ChatResponse:
        body = self.body(request)
        if on_text is not None:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        attempts = self._max_retries + 1
        uncertain = False  # an earlier attempt may have cost tokens nobody reported
        for attempt in range(1, attempts + 1):
            client = self._clients.get()
            try:
                reply = None
                if on_text is not None:
                    reply = StreamedReply(
                        self._scrubber, partial(on_text, attempt), self._malformed
                    )
                outcome = await self._attempt(client, body, attempt, attempts, reply)
            except ProviderError as error:
                if uncertain:
                    error.tokens = None
                raise
            if isinstance(outcome, ChatResponse):
                return outcome
            uncertain = uncertain or outcome.unknown
            await self._wait(attempt, outcome)
        raise AssertionError("unreachable")  # pragma: no cover

    def body(self, request: ChatRequest, /) -> dict[str, JsonValue]:
        """The JSON body `complete` sends for `request`."""
        body: dict[str, JsonValue] = {
            "model": request.model or self._model,
            "messages": [_message(m) for m in request.messages],
            "temperature": request.temperature,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        choice = request.tool_choice
        if choice is not None:
            body["tool_choice"] = (
                choice
                if choice in ("auto", "none", "required")
                else {"type": "function", "function": {"name": choice}}
            )
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.seed is not None:
            body["seed"] = request.seed
        if request.stop:
            body["stop"] = list(request.stop)
        schema = request.response_schema
        if schema is not None and self._structured_output == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.name,
                    "schema": schema.json_schema,
                    "strict": schema.strict,
                },
            }
        elif schema is not None and self._structured_output == "json_object":
            body["response_format"] = {"type": "json_object", "schema": schema.json_schema}
        return body

    async def _attempt(
        self,
        client: httpx.AsyncClient,
        body: dict[str, JsonValue],
        attempt: int,
        attempts: int,
        reply: StreamedReply | None,
    ) -> ChatResponse | _Retry:
        """One HTTP attempt, under its deadline: the reply, what to retry, or a
        `ProviderError` raised. A streamed `reply` reads the body as it comes."""
        exchange = Exchange()
        answer: Answer | _Retry | None = None
        with anyio.move_on_after(self._timeout):
            answer = await self._exchange(exchange, client, body, attempt, attempts, reply)
        if answer is None:  # the deadline passed
            if not exchange.sent:  # never connected: nothing generated, worth another try
                problem = f"ConnectTimeout: no connection within {self._timeout:g} s"
                return self._retry_or_fail(problem, attempt, attempts, cost=0)
            raise self._timed_out(exchange.progress(), exchange.status)
        if isinstance(answer, _Retry):
            return answer
        status = answer.status
        if status == 200:
            if reply is None:
                return self._parse(answer.body)
            response = await reply.finish(answer.body)
            self._refuse_echoes(response)
            return response
        text = answer.body.decode("utf-8", "replace")
        excerpt = self._scrubber.excerpt(text, _EXCERPT, truncated=answer.truncated)
        excerpt = excerpt or "(empty body)"
        hint = self._hint(status)
        if status not in _RETRYABLE_STATUS:
            raise ProviderError(
                f"POST {self._safe_url} returned {status}: {excerpt}{hint}",
                status=status,
                tokens=0,
            )
        if attempt == attempts:
            raise ProviderError(
                f"POST {self._safe_url} returned {status} after {attempts} attempts: "
                f"{excerpt}{hint}",
                status=status,
                tokens=0,
            )
        return _Retry(f"HTTP {status}", status, answer.retry_after)

    async def _exchange(
        self,
        exchange: Exchange,
        client: httpx.AsyncClient,
        body: dict[str, JsonValue],
        attempt: int,
        attempts: int,
        reply: StreamedReply | None,
    ) -> Answer | _Retry:
        """The attempt's HTTP exchange: the answer, what to retry, or a `ProviderError`."""
        import httpx
        import openai

        try:
            return await exchange.post(
                partial(self._open_reply, client, body),
                limit=self._max_bytes,
                error_limit=_ERROR_BYTES,
                on_data=None if reply is None else reply.take,
            )
        except ProviderError:  # a streamed reply that cannot be read
            raise
        except BodyTooLarge:
            raise ProviderError(
                f"POST {self._safe_url} returned a reply over max_reply_bytes "
                f"({self._max_bytes} bytes); the rest was not read",
                status=exchange.status,
                tokens=None,  # the server generated it: what it cost is unknown
            ) from None
        except BodyUnreadable as error:
            reason = self._scrubber.excerpt(str(error), _EXCERPT)
            raise ProviderError(
                f"POST {self._safe_url} returned a malformed reply ({reason})",
                status=exchange.status,
                tokens=None,
            ) from None
        except (httpx.TransportError, openai.APIConnectionError) as raised:
            # the SDK wraps the transport's error: the cause says what happened
            cause = raised.__cause__ if isinstance(raised, openai.APIConnectionError) else raised
            error = (
                cause
                if isinstance(cause, httpx.TransportError)
                else httpx.NetworkError(str(cause or raised))
            )
            problem, retryable = self._describe(error)
            cost = None if exchange.sent else 0  # once sent, the server may have generated
            if not retryable:
                raise ProviderError(f"POST {self._safe_url} {problem}", tokens=cost) from None
            return self._retry_or_fail(problem, attempt, attempts, cost=cost)
        except Exception as error:  # anything else: scrubbed, never passed on raw
            detail = self._scrubber.excerpt(str(error), _EXCERPT) or "no detail"
            raise ProviderError(
                f"POST {self._safe_url} failed: {type(error).__name__}: {detail}",
                status=exchange.status,
                tokens=None if exchange.sent else 0,
            ) from None

    @asynccontextmanager
    async def _open_reply(
        self, client: httpx.AsyncClient, body: dict[str, JsonValue]
    ) -> AsyncGenerator[httpx.Response | None]:
        """The SDK sends `body`: the reply's unread response, or `None` for an error answer
        (read by the client's transport, see `Exchange.post`)."""
        import openai

        sdk = self._sdk_for(client)
        fields = dict(body)
        model = fields.pop("model")
        messages = fields.pop("messages")
        headers: dict[str, str | openai.Omit] = {"Accept-Encoding": ACCEPT_ENCODING}
        if not self._key:  # a local server: no credential at all
            headers["Authorization"] = openai.Omit()
        reply = sdk.chat.completions.with_streaming_response.create(
            model=str(model),
            messages=cast("list[ChatCompletionMessageParam]", messages),
            extra_headers=cast("dict[str, str]", headers),
            extra_query=self._query,
            extra_body=fields,
        )
        async with AsyncExitStack() as stack:
            response: httpx.Response | None = None
            try:
                opened = await stack.enter_async_context(reply)
                response = cast("httpx.Response", opened.http_response)
            except openai.APIStatusError:  # the transport read the answer's body
                pass
            yield response

    def _sdk_for(self, client: httpx.AsyncClient) -> openai.AsyncOpenAI:
        """The SDK's client over `client` (one per HTTP client, so per event loop)."""
        import openai

        if self._sdk is not None and self._sdk[0] is client:
            return self._sdk[1]
        sdk = openai.AsyncOpenAI(
            api_key=self._key or "",
            # a local server needs no key: none is sent (`_open_reply` omits the header)
            _enforce_credentials=bool(self._key),
            base_url=self._base,
            max_retries=0,  # converge retries (see the module's docstring)
            http_client=cast("httpx2.AsyncClient", client),  # the SDK takes httpx's too
        )
        self._sdk = (client, sdk)
        return sdk

    def _retry_or_fail(
        self, problem: str, attempt: int, attempts: int, *, cost: int | None
    ) -> _Retry:
        if attempt == attempts:
            raise ProviderError(
                f"POST {self._safe_url} failed after {attempts} attempts: {problem}",
                tokens=cost,
            )
        return _Retry(problem, None, None, unknown=cost is None)

    def _timed_out(self, progress: str, status: int | None) -> ProviderError:
        return ProviderError(
            f"POST {self._safe_url} timed out: no complete reply within {self._timeout:g} s "
            f"({progress}); not retried, since the server may still be generating: raise "
            "`timeout` or lower `max_tokens`",
            status=status,
            tokens=None,  # unknown: the server may have generated any number
        )

    async def _wait(self, attempt: int, retry: _Retry) -> None:
        delay = retry_after_seconds(retry.retry_after)
        if delay is None:
            delay = self._backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
        delay = min(delay, _MAX_DELAY)
        log = get_logger(provider=self._provider_name, url=self._safe_url)
        log.warning(
            "provider_retry", attempt=attempt, status=retry.status, error=retry.problem, delay=delay
        )
        record_retry(attempt, retry.problem, retry.status, delay)
        await anyio.sleep(delay)

    def _describe(self, error: httpx.TransportError) -> tuple[str, bool]:
        """What went wrong, in words, and whether another attempt may help."""
        import httpx

        name = type(error).__name__
        detail = self._scrubber.excerpt(str(error), _EXCERPT) or "no detail"
        connect = min(self._timeout, _CONNECT_TIMEOUT)
        if isinstance(error, httpx.ReadTimeout):
            return (
                f"timed out: no complete reply within {self._timeout:g} s (httpx.ReadTimeout); "
                "not retried, since the server may still be generating: raise `timeout` or "
                "lower `max_tokens`",
                False,
            )
        if isinstance(error, httpx.ConnectTimeout):
            return f"ConnectTimeout: no connection within {connect:g} s", True
        if isinstance(error, httpx.TimeoutException):
            return f"{name}: timed out after {self._timeout:g} s ({detail})", True
        if isinstance(error, httpx.NetworkError | httpx.RemoteProtocolError):
            return f"{name}: {detail}", True
        return f"{name}: {detail}", False

    def _hint(self, status: int) -> str:
        if status == 500 and self._structured_output == "json_schema":
            return (
                " (llama-cpp-python 0.3.x answers 500 to a json_schema response_format: "
                "use structured_output='json_object')"
            )
        return ""

    def _new_client(self) -> httpx.AsyncClient:
        import httpx

        timeout = httpx.Timeout(self._timeout, connect=min(self._timeout, _CONNECT_TIMEOUT))
        return httpx.AsyncClient(timeout=timeout, transport=bounded_transport())

    def _parse(self, data: bytearray) -> ChatResponse:
        """The completion in a `200` body; a `ProviderError` if it is malformed or echoes a
        credential."""
        try:
            completion = _Completion.model_validate_json(data)
        except ValidationError as error:
            raise self._malformed(describe_validation_error(error), data) from None
        if not completion.choices:
            raise self._malformed("no choices in the reply", data)
        usage = completion.usage or _Usage()
        prompt, generated = usage.prompt_tokens, usage.completion_tokens
        unknown = prompt is None or generated is None
        choice = completion.choices[0]
        calls = tuple(
            ToolCall(
                id=call.id or f"call-{index}",
                name=call.function.name,
                arguments=call.function.arguments
                if isinstance(call.function.arguments, str)
                else json.dumps(call.function.arguments),
            )
            for index, call in enumerate(choice.message.tool_calls or ())
        )
        response = ChatResponse(
            tool_calls=calls,
            content=choice.message.content or "",
            prompt_tokens=prompt or 0,
            completion_tokens=generated or 0,
            model=completion.model or self._model,
            finish_reason=choice.finish_reason,
            tokens_unknown=unknown,
        )
        self._refuse_echoes(response)
        return response

    def _malformed(self, reason: str, data: bytearray) -> ProviderError:
        scrubber = self._scrubber
        excerpt = scrubber.excerpt(data.decode("utf-8", "replace"), _EXCERPT)
        return ProviderError(
            f"POST {self._safe_url} returned a malformed reply "
            f"({scrubber.excerpt(reason, _EXCERPT)}): {excerpt}",
            status=200,
            tokens=None,  # the server answered 200: it may have generated a reply
        )

    def _refuse_echoes(self, response: ChatResponse) -> None:
        """Raise if any text of `response` holds a credential, in any form: nothing of it
        may reach a proposal, a fact or the trace."""
        find = self._scrubber.find
        for where, text in (
            ("choices[0].message.content", response.content),
            ("model", response.model),
            ("choices[0].finish_reason", response.finish_reason or ""),
            *(
                (
                    f"choices[0].message.tool_calls[{index}]",
                    f"{call.id} {call.name} {call.arguments}",
                )
                for index, call in enumerate(response.tool_calls)
            ),
        ):
            found = find(text)
            if found is not None:
                raise ProviderError(
                    f"POST {self._safe_url} returned a reply whose {where} holds {found}: "
                    "refused, so that no credential reaches a proposal or the trace",
                    status=200,
                    tokens=response.prompt_tokens + response.completion_tokens,
                    tokens_unknown=response.tokens_unknown,
                )


@final
class _Retry:
    """Why an attempt is worth repeating."""

    __slots__ = ("problem", "retry_after", "status", "unknown")

    def __init__(
        self, problem: str, status: int | None, retry_after: str | None, *, unknown: bool = False
    ) -> None:
        self.problem = problem
        self.status = status
        self.retry_after = retry_after
        self.unknown = unknown
        """The failed attempt may have cost tokens (the request reached the server)."""


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, JsonValue] = "{}"


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


def _message(message: ChatMessage) -> dict[str, JsonValue]:
    """One message as the API takes it: a tool call's answer names the call it answers."""
    body: dict[str, JsonValue] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        body["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        body["tool_call_id"] = message.tool_call_id
    return body


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: NonNegativeInt | None = None
    completion_tokens: NonNegativeInt | None = None


class _Completion(BaseModel):
    choices: list[_Choice]
    usage: _Usage | None = None
    model: str | None = None
