"""`McpServer`: the tools of an MCP server (stdio or streamable HTTP), as read tools or actions.

The wire protocol is the official `mcp` SDK's (`pip install "converge-engine[mcp]"`),
imported when a server is first opened. A server is opened for one `execute` and closed at
its end: no connection outlives the call that opened it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, cast, final

import anyio
from pydantic import JsonValue

from converge import get_logger

from ._chat import ToolSpec
from ._tool import IDEMPOTENCY_PARAMETER, ToolKind, with_reason

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import RequestParamsMeta

__all__ = ["McpServer", "McpTool", "McpToolError"]

_MAX_ERRORS: Final = 5
_NAME: Final = r"^[A-Za-z0-9_-]{1,64}$"
IDEMPOTENCY_META: Final = "converge/idempotency_key"
"""The `_meta` member of an MCP action's `tools/call` request that holds its idempotency key."""


class McpToolError(Exception):
    """An MCP server answered a tool call with an error (`isError`), or no usable answer."""


@final
class McpTool:
    """One tool of an open `McpServer`: what `LlmSuggestor` offers (and calls, for a read
    tool), and what `ActionRunner` calls (an action)."""

    def __init__(
        self,
        client: Client,
        server: str,
        name: str,
        description: str,
        parameters: dict[str, JsonValue],
        timeout: float,
        kind: ToolKind = "read",
    ) -> None:
        self._client = client
        self._server = server
        self._name = name
        self._description = description
        self._timeout = timeout
        self._kind: ToolKind = kind
        self._takes_key = False
        if kind == "action":  # the key is converge's to give, not the model's
            parameters, self._takes_key = _without_key(parameters)
        self._parameters = parameters

    def __repr__(self) -> str:
        return f"McpTool({self._name!r}, server={self._server!r})"

    @property
    def name(self) -> str:
        """The tool's name on its server."""
        return self._name

    @property
    def kind(self) -> ToolKind:
        """`"read"` (runs inside the suggestor) or `"action"` (named in the server's
        `actions`: staged for approval, run by `ActionRunner`)."""
        return self._kind

    @property
    def timeout(self) -> float:
        """Seconds a call may take."""
        return self._timeout

    @property
    def spec(self) -> ToolSpec:
        """What the model is offered: the server's name, description and input schema (an
        action's without `idempotency_key`, with a required `reason`)."""
        parameters = with_reason(self._parameters) if self._kind == "action" else self._parameters
        return ToolSpec(name=self._name, description=self._description, parameters=parameters)

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

        An action's `idempotency_key` goes in the request's `_meta` (as
        `"converge/idempotency_key"`), and as the argument `idempotency_key` when the tool's
        input schema declares one.

        Raises:
            TimeoutError: No answer within `timeout`.
            McpToolError: The server answered with an error.
            Exception: The connection failed (the server died, or answered garbage).
        """
        sent = dict(arguments)
        meta: dict[str, str] | None = None
        if idempotency_key is not None:
            meta = {IDEMPOTENCY_META: idempotency_key}
            if self._takes_key:
                sent[IDEMPOTENCY_PARAMETER] = idempotency_key
        with anyio.fail_after(self._timeout):
            result = await self._client.call_tool(
                self._name,
                sent,
                read_timeout_seconds=self._timeout,
                meta=cast("RequestParamsMeta | None", meta),
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
    read tools (or as actions, those named in `actions`), and closes it at the end. Each
    call's arguments are validated against the tool's input schema first; its arguments and
    result are recorded like any read tool's.
    A server that cannot be started or does not answer within `timeout` fails the
    execution; one that dies or answers garbage mid-call fails that call.

    A tool named in `actions` is an action: the model's call of it is staged under `ACTIONS`
    for approval, like a `Tool(kind="action")`'s, and `ActionRunner(mcp_servers=[...])` runs
    it once promoted, with its idempotency key (see `McpTool.call`).

    Raises:
        ValueError: Neither or both of `command` and `url`; an empty command; an action that
            `tools` leaves out.
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
        actions: Sequence[str] = (),
        timeout: float = 30.0,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError(f"McpServer {name!r}: give either command or url")
        if command is not None and not command:
            raise ValueError(f"McpServer {name!r}: the command is empty")
        if not timeout > 0:
            raise ValueError(f"McpServer {name!r}: timeout must be positive")
        if tools is not None and (left_out := sorted(set(actions) - set(tools))):
            raise ValueError(f"McpServer {name!r}: actions {left_out} are not among its tools")
        _require_mcp()
        self._name = name
        self._actions = frozenset(actions)
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

    @property
    def actions(self) -> frozenset[str]:
        """The names of its tools that are actions."""
        return self._actions

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
                        "action" if tool.name in self._actions else "read",
                    )
                    for tool in listed.tools
                    if self._only is None or tool.name in self._only
                )
                missing = sorted(self._actions - {tool.name for tool in tools})
                if missing:
                    raise McpToolError(f"it offers no tool named {', '.join(missing)}")
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


def _without_key(schema: dict[str, JsonValue]) -> tuple[dict[str, JsonValue], bool]:
    """`schema` without an `idempotency_key` property, and whether it had one."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or IDEMPOTENCY_PARAMETER not in properties:
        return schema, False
    required = schema.get("required")
    kept: dict[str, JsonValue] = {
        **schema,
        "properties": {k: v for k, v in properties.items() if k != IDEMPOTENCY_PARAMETER},
    }
    if isinstance(required, list):
        kept["required"] = [name for name in required if name != IDEMPOTENCY_PARAMETER]
    return kept, True


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError as error:
        raise ImportError(
            "McpServer needs mcp: install the 'mcp' extra (pip install \"converge-engine[mcp]\")"
        ) from error
