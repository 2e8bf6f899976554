"""`McpServer`: the tools of an MCP server (stdio or streamable HTTP), as read tools.

The wire protocol is the official `mcp` SDK's (`pip install "converge-engine[mcp]"`),
imported when a server is first opened. A server is opened for one `execute` and closed at
its end: no connection outlives the call that opened it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, Literal, cast, final

import anyio
from pydantic import JsonValue

from converge import get_logger

from ._chat import ToolSpec

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["McpServer", "McpTool", "McpToolError"]

_MAX_ERRORS: Final = 5
_NAME: Final = r"^[A-Za-z0-9_-]{1,64}$"


class McpToolError(Exception):
    """An MCP server answered a tool call with an error (`isError`), or no usable answer."""


@final
class McpTool:
    """One tool of an open `McpServer`: what `LlmSuggestor` offers and calls (a read tool)."""

    def __init__(
        self,
        client: Client,
        server: str,
        name: str,
        description: str,
        parameters: dict[str, JsonValue],
        timeout: float,
    ) -> None:
        self._client = client
        self._server = server
        self._name = name
        self._description = description
        self._parameters = parameters
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"McpTool({self._name!r}, server={self._server!r})"

    @property
    def name(self) -> str:
        """The tool's name on its server."""
        return self._name

    @property
    def kind(self) -> Literal["read"]:
        """`"read"`: an MCP tool runs inside the suggestor."""
        return "read"

    @property
    def timeout(self) -> float:
        """Seconds a call may take."""
        return self._timeout

    @property
    def spec(self) -> ToolSpec:
        """What the model is offered: the server's name, description and input schema."""
        return ToolSpec(name=self._name, description=self._description, parameters=self._parameters)

    def validate(self, arguments: object) -> dict[str, JsonValue]:
        """Validate `arguments` (a JSON object or its text) against the server's input schema.

        Raises:
            ValueError: Not a JSON object, or invalid (each problem with its location).
        """
        import jsonschema

        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments, strict=False)
            except ValueError as error:
                raise ValueError(f"the arguments are not JSON ({error})") from None
        if not isinstance(arguments, dict):
            raise ValueError(f"the arguments must be a JSON object, not {type(arguments).__name__}")
        given = cast("dict[str, JsonValue]", arguments)
        validator = jsonschema.Draft202012Validator(self._parameters)
        errors = sorted(
            validator.iter_errors(given),  # pyright: ignore[reportUnknownMemberType]
            key=lambda error: [str(part) for part in error.path],
        )
        if errors:
            raise ValueError(
                "; ".join(
                    f"{'.'.join(str(part) for part in error.absolute_path) or 'arguments'}: "
                    f"{error.message}"
                    for error in errors[:_MAX_ERRORS]
                )
            )
        return given

    async def call(
        self, arguments: Mapping[str, JsonValue], *, idempotency_key: str | None = None
    ) -> JsonValue:
        """Call the tool on its server within `timeout`; its structured result, else its text.

        Raises:
            TimeoutError: No answer within `timeout`.
            McpToolError: The server answered with an error.
            Exception: The connection failed (the server died, or answered garbage).
        """
        with anyio.fail_after(self._timeout):
            result = await self._client.call_tool(
                self._name, dict(arguments), read_timeout_seconds=self._timeout
            )
        texts = [
            text if isinstance(text := getattr(block, "text", None), str) else f"[{block.type}]"
            for block in result.content
        ]
        if result.is_error:
            raise McpToolError(
                f"MCP server {self._server!r}, tool {self._name!r}: " + " ".join(texts)
            )
        structured: object = result.structured_content
        if structured is not None:
            return cast("JsonValue", json.loads(json.dumps(structured)))
        return "\n".join(texts)


@final
class McpServer:
    """An MCP server whose tools a model may call, through the official `mcp` SDK.

    Give `command` (the server is started as a child process and spoken to over stdio) or
    `url` (streamable HTTP). `LlmSuggestor(mcp_servers=[...])` opens it at the start of each
    `execute`, lists its tools (all, or those named in `tools`), offers them to the model as
    read tools, and closes it at the end. Each call's arguments are validated against the
    tool's input schema first; its arguments and result are recorded like any read tool's.
    A server that cannot be started or does not answer within `timeout` fails the
    execution; one that dies or answers garbage mid-call fails that call.

    Raises:
        ValueError: Neither or both of `command` and `url`; an empty command.
        ImportError: The `mcp` extra is not installed.
    """

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        tools: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError(f"McpServer {name!r}: give either command or url")
        if command is not None and not command:
            raise ValueError(f"McpServer {name!r}: the command is empty")
        if not timeout > 0:
            raise ValueError(f"McpServer {name!r}: timeout must be positive")
        _require_mcp()
        self._name = name
        self._command = tuple(command) if command is not None else None
        self._url = url
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._only = frozenset(tools) if tools is not None else None
        self._timeout = timeout

    def __repr__(self) -> str:
        where = self._url if self._url is not None else " ".join(self._command or ())
        return f"McpServer({self._name!r}, {where!r})"

    @property
    def name(self) -> str:
        """The name it is known by in errors and the trace."""
        return self._name

    @asynccontextmanager
    async def connect(self) -> AsyncGenerator[tuple[McpTool, ...]]:
        """Open the server for the duration of the block; yield its tools.

        Raises:
            McpToolError: The server could not be opened or listed.
        """
        _require_mcp()
        from mcp import Client, StdioServerParameters

        if self._command is not None:
            program, *args = self._command
            target: object = StdioServerParameters(
                command=program, args=args, env=self._env, cwd=self._cwd
            )
        else:
            target = self._url
        client = Client(
            cast("str", target), read_timeout_seconds=self._timeout, raise_exceptions=True
        )
        opened = body_failed = False
        try:
            async with client:
                listed = await client.list_tools()
                tools = tuple(
                    McpTool(
                        client,
                        self._name,
                        tool.name,
                        tool.description or tool.name,
                        cast("dict[str, JsonValue]", json.loads(json.dumps(tool.input_schema))),
                        self._timeout,
                    )
                    for tool in listed.tools
                    if self._only is None or tool.name in self._only
                )
                opened = True
                try:
                    yield tools
                except BaseException:
                    body_failed = True
                    raise
        except Exception as error:
            if body_failed:
                raise
            if not opened:
                raise McpToolError(
                    f"MCP server {self._name!r} could not be opened: "
                    f"{type(error).__name__}: {error}"
                ) from error
            get_logger(mcp_server=self._name).warning(
                "mcp_server_closed_badly", error=f"{type(error).__name__}: {error}"
            )


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError as error:
        raise ImportError(
            "McpServer needs mcp: install the 'mcp' extra (pip install \"converge-engine[mcp]\")"
        ) from error
