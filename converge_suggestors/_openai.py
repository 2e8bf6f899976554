"""`OpenAIChatProvider`: any OpenAI-compatible `POST {base_url}/chat/completions` endpoint.

Hosted APIs, vLLM, Ollama and the llama.cpp server all speak it. HTTP comes from `httpx`,
installed with the `llm` extra (`pip install "converge[llm]"`) and imported on first use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, final

import anyio
from pydantic import BaseModel, JsonValue

from converge import get_logger

from ._chat import ChatRequest, ChatResponse, ProviderError

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIChatProvider"]

_RETRYABLE: Final = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_MAX_RETRY_AFTER: Final = 30.0
_EXCERPT: Final = 300


def _httpx() -> object:
    try:
        import httpx
    except ImportError:  # pragma: no cover - exercised through a test that hides httpx
        raise ImportError(
            "OpenAIChatProvider needs httpx: install the 'llm' extra "
            '(pip install "converge[llm]")'
        ) from None
    return httpx


@final
class OpenAIChatProvider:
    """Talks to an OpenAI-compatible chat completions endpoint, with retries and backoff.

    Args:
        base_url: The API root, e.g. `"https://api.openai.com/v1"` or `"http://127.0.0.1:8080/v1"`.
        api_key: Sent as `Authorization: Bearer ...`; defaults to `OPENAI_API_KEY`; local
            servers usually need none. It never appears in logs, errors or reprs.
        model: The model asked for when a request names none.
        timeout: Seconds for each HTTP attempt.
        max_retries: Extra attempts after a 408/409/425/429/5xx answer or a connection error.
        backoff: Seconds before the first retry, doubling each time (a numeric `Retry-After`
            header wins, up to 30 s).
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
    ) -> None:
        _httpx()
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._model = model
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff = backoff

    def __repr__(self) -> str:
        key = "set" if self._key else "none"
        return f"OpenAIChatProvider(url={self._url!r}, model={self._model!r}, api_key={key})"

    @property
    def model(self) -> str:
        """The default model."""
        return self._model

    async def complete(self, request: ChatRequest, /) -> ChatResponse:
        """Send `request`; retry what is worth retrying; parse the reply.

        Raises:
            ProviderError: A non-retryable status, retries used up, or a malformed reply.
        """
        import httpx

        body: dict[str, JsonValue] = {
            "model": request.model or self._model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "temperature": request.temperature,
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        log = get_logger(provider="openai", url=self._url)
        attempts = self._max_retries + 1
        async with httpx.AsyncClient(timeout=self._timeout) as client:
            for attempt in range(1, attempts + 1):
                try:
                    response = await client.post(self._url, json=body, headers=headers)
                except httpx.TransportError as error:
                    problem = f"{type(error).__name__}: {self._scrub(str(error))}"
                    if attempt == attempts:
                        raise ProviderError(
                            f"POST {self._url} failed after {attempts} attempts: {problem}"
                        ) from None
                    delay = self._delay(attempt, None)
                    log.warning("provider_retry", attempt=attempt, error=problem, delay=delay)
                    await anyio.sleep(delay)
                    continue
                if response.status_code == 200:
                    return self._parse(response)
                excerpt = self._scrub(response.text[:_EXCERPT])
                status = response.status_code
                if status not in _RETRYABLE:
                    raise ProviderError(
                        f"POST {self._url} returned {status}: {excerpt}", status=status
                    )
                if attempt == attempts:
                    raise ProviderError(
                        f"POST {self._url} returned {status} after {attempts} attempts: {excerpt}",
                        status=status,
                    )
                delay = self._delay(attempt, response.headers.get("Retry-After"))
                log.warning("provider_retry", attempt=attempt, status=status, delay=delay)
                await anyio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), _MAX_RETRY_AFTER)
            except ValueError:
                pass
        return self._backoff * 2 ** (attempt - 1)

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _parse(self, response: httpx.Response) -> ChatResponse:
        try:
            data = _Completion.model_validate_json(response.content)
            if not data.choices:
                raise ValueError("no choices in the reply")
            usage = data.usage or _Usage()
            return ChatResponse(
                content=data.choices[0].message.content or "",
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                model=data.model or self._model,
            )
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            excerpt = self._scrub(response.text[:_EXCERPT])
            reason = self._scrub(str(error).splitlines()[0])
            raise ProviderError(
                f"POST {self._url} returned a malformed reply ({reason}): {excerpt}",
                status=response.status_code,
            ) from None


class _Message(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _Message


class _Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Completion(BaseModel):
    choices: list[_Choice]
    usage: _Usage | None = None
    model: str | None = None
