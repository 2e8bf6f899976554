"""`StreamedReply`: a chat completion streamed as server-sent events, read as it comes.

It takes the reply's body (decompressed, under the provider's byte cap) each time more of it
has come, reads every complete event (its `data:` lines joined by newlines, as the
server-sent events format says), hands on the new text of the reply, and once
the body ends gives the whole `ChatResponse`: the same one a non-streamed call would return
for the same reply. The text handed on never shows a credential: it stops at the first one,
and holds back whatever at its end begins one until the text after it says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import final

from pydantic import BaseModel, JsonValue, NonNegativeInt, ValidationError

from ._chat import ChatResponse, ProviderError, ToolCall
from ._llm_format import describe_validation_error
from ._secrets import Scrubber

__all__ = ["StreamedReply"]


class _Function(BaseModel):
    name: str | None = None
    arguments: str | None = None


class _CallDelta(BaseModel):
    index: NonNegativeInt = 0
    id: str | None = None
    function: _Function | None = None


class _Delta(BaseModel):
    content: str | None = None
    tool_calls: list[_CallDelta] | None = None


class _Choice(BaseModel):
    index: NonNegativeInt = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: NonNegativeInt | None = None
    completion_tokens: NonNegativeInt | None = None


class _Chunk(BaseModel):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    model: str | None = None
    error: JsonValue = None


@final
class StreamedReply:
    """One attempt's streamed reply.

    Args:
        scrubber: The provider's secrets: text holding one is never handed on.
        emit: Takes each new piece of the reply's text.
        malformed: The error of a reply that cannot be read (a reason and the bytes at fault).
    """

    __slots__ = (
        "_calls",
        "_choices",
        "_data",
        "_done",
        "_emit",
        "_ended",
        "_finish",
        "_malformed",
        "_model",
        "_scanned",
        "_scrubber",
        "_shown",
        "_stopped",
        "_text",
        "_usage",
    )

    def __init__(
        self,
        scrubber: Scrubber,
        emit: Callable[[str], Awaitable[None]],
        malformed: Callable[[str, bytearray], ProviderError],
    ) -> None:
        self._scrubber = scrubber
        self._emit = emit
        self._malformed = malformed
        self._done = 0
        """Bytes of the body read so far (up to the end of its last complete line)."""
        self._scanned = 0
        """Bytes of the body looked through for a line's end (a long line is not again)."""
        self._text = ""
        self._shown = 0
        """Characters of `_text` handed on."""
        self._stopped = False
        """A credential was found: nothing more is handed on (the reply will be refused)."""
        self._ended = False
        """`data: [DONE]` came."""
        self._choices = False
        self._finish: str | None = None
        self._model: str | None = None
        self._usage: _Usage | None = None
        self._calls: dict[int, list[str]] = {}
        """Tool calls by index: id, name, arguments so far."""
        self._data: list[bytes] | None = None
        """The `data:` lines of the event being read (`None` before its first)."""

    async def take(self, body: bytearray) -> None:
        """Read the complete lines of `body` not read yet; hand on the new text.

        Raises:
            ProviderError: A line is not a chunk of a chat completion.
        """
        end = body.rfind(b"\n", max(self._done, self._scanned))
        self._scanned = len(body)
        if end < self._done:
            return
        start, self._done = self._done, end + 1
        for line in bytes(body[start:end]).split(b"\n"):
            self._line(line)
        await self._hand_on(final=False)

    async def finish(self, body: bytearray) -> ChatResponse:
        """The whole reply, once `body` is complete.

        Raises:
            ProviderError: It cannot be read, or ends before its end.
        """
        for line in bytes(body[self._done :]).split(b"\n"):
            self._line(line)
        self._dispatch()  # the last event, if the body ends without its blank line
        self._done = len(body)
        await self._hand_on(final=True)
        if not self._ended and self._finish is None:
            raise self._malformed("the stream ended before its end (no data: [DONE])", body)
        if not self._choices:
            raise self._malformed("no choices in the reply", body)
        usage = self._usage or _Usage()
        prompt, generated = usage.prompt_tokens, usage.completion_tokens
        calls = tuple(
            ToolCall(id=parts[0] or f"call-{index}", name=parts[1], arguments=parts[2] or "{}")
            for index, (_, parts) in enumerate(sorted(self._calls.items()))
        )
        return ChatResponse(
            tool_calls=calls,
            content=self._text,
            prompt_tokens=prompt or 0,
            completion_tokens=generated or 0,
            model=self._model or "",
            finish_reason=self._finish,
            tokens_unknown=prompt is None or generated is None,
        )

    def _line(self, raw: bytes) -> None:
        """Read one line of the stream: a field of the event being read, or the blank line
        that ends it. An event's `data:` lines are its data, joined by newlines (the
        server-sent events format); other fields and comments (keep-alives) are ignored."""
        line = raw.removesuffix(b"\r")
        if not line:
            self._dispatch()
            return
        field, _, value = line.partition(b":")
        if field != b"data":
            return  # a comment (a keep-alive: the field is empty) or another field
        if self._data is None:
            self._data = []
        self._data.append(value.removeprefix(b" "))

    def _dispatch(self) -> None:
        """Read the event whose lines were read (if it has data): one chunk of the reply."""
        lines, self._data = self._data, None
        if lines is None:
            return
        data = b"\n".join(lines).strip()
        if data == b"[DONE]":
            self._ended = True
            return
        if self._ended:
            raise self._malformed("data after data: [DONE]", bytearray(data))
        try:
            chunk = _Chunk.model_validate_json(data)
        except ValidationError as error:
            raise self._malformed(describe_validation_error(error), bytearray(data)) from None
        if chunk.error is not None:
            raise self._malformed(
                f"the stream reported an error: {json.dumps(chunk.error)}", bytearray(data)
            )
        if chunk.model:
            self._model = chunk.model
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            self._choices = True
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self._text += delta.content
            for call in delta.tool_calls or ():
                parts = self._calls.setdefault(call.index, ["", "", ""])
                if call.id:
                    parts[0] = call.id
                function = call.function
                if function is not None:
                    parts[1] += function.name or ""
                    parts[2] += function.arguments or ""

    async def _hand_on(self, *, final: bool) -> None:
        """Hand on the text not handed on yet, up to what may be shown."""
        if self._stopped:
            return
        text, shown = self._text, self._shown
        end = self._scrubber.showable(text, shown, final=final)
        if end is None:
            self._stopped = True
            return
        if end > shown:
            self._shown = end
            await self._emit(text[shown:end])
