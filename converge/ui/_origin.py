"""The console's own origin: which `Host` it answers, which `Origin` it accepts, where it redirects.

A browser names the page that sent a request in `Origin` as scheme, host and port; the
console compares it with its own, exactly: `https://127.0.0.1:8765` is another origin than
`http://127.0.0.1:8765`, and `http://127.0.0.1:8766` another still. The `Host` a request
names must be the address the console is bound to (and its port), or `localhost` when that
address is loopback, so that a name an attacker controls pointing at 127.0.0.1 (DNS
rebinding) reaches nothing. Behind a TLS proxy, the console is told its public origin
(`--origin https://review.example.com`) and then answers that one only.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final, final
from urllib.parse import unquote, urlsplit

from starlette.types import Scope

__all__ = ["Origin", "local_path", "origin_of_request"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LONGEST_TARGET: Final = 2048


@final
@dataclass(frozen=True, slots=True)
class Origin:
    """A web origin: scheme, host and port."""

    scheme: str
    host: str
    """The host as a URL writes it: a name, an IPv4 address, or an IPv6 address in brackets."""
    port: int

    @classmethod
    def parse(cls, text: str) -> Origin:
        """The origin `scheme://host[:port]` (no path, query, fragment or user).

        Raises:
            ValueError: `text` is not such an origin (says why).
        """
        try:
            split = urlsplit(text)
            port = split.port
        except ValueError as error:
            raise ValueError(f"not an origin: {text!r} ({error})") from None
        scheme = split.scheme.lower()
        if scheme not in _DEFAULT_PORTS or not split.hostname:
            raise ValueError(
                f"not an origin: {text!r} (expected http://HOST[:PORT] or https://...)"
            )
        if split.path not in ("", "/") or split.query or split.fragment or "@" in split.netloc:
            raise ValueError(f"not an origin: {text!r} (no path, query, fragment or user)")
        host = split.hostname.lower()
        if ":" in host:
            host = f"[{host}]"
        return cls(scheme, host, _DEFAULT_PORTS[scheme] if port is None else port)

    @property
    def serialized(self) -> str:
        """The origin as a browser's `Origin` header says it (a default port left out)."""
        if self.port == _DEFAULT_PORTS.get(self.scheme):
            return f"{self.scheme}://{self.host}"
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        """The `Host` headers that name this origin."""
        named = f"{self.host}:{self.port}"
        if self.port == _DEFAULT_PORTS.get(self.scheme):
            return frozenset({named, self.host})
        return frozenset({named})

    @property
    def cookie(self) -> str:
        """The name of the console's session cookie here (cookies are not port-scoped)."""
        return f"converge-console-{self.port}"


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def origin_of_request(scope: Scope, configured: Origin | None) -> Origin | None:
    """The console's origin as this request names it; `None` when its `Host` is not ours.

    Ours: the configured origin's, else the address and port the connection came to (or
    `localhost` with that port, when the address is loopback).
    """
    host = ""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = value.decode("latin-1").lower()
            break
    if configured is not None:
        return configured if host in configured.hosts else None
    server = scope.get("server")
    if not server or server[1] is None:
        return None
    address, port = str(server[0]), int(server[1])
    scheme = str(scope.get("scheme", "http"))
    named = f"[{address.lower()}]" if ":" in address else address.lower()
    for candidate in (named, "localhost") if _loopback(address) else (named,):
        origin = Origin(scheme, candidate, port)
        if host in origin.hosts:
            return origin
    return None


def local_path(target: str) -> str:
    r"""`target` when it is a path on this console (with its query), else `/`.

    Refused: anything with a scheme or a host (`https://...`, `//host`, `http:host`), a
    backslash (browsers read `/\host` as `//host`), control characters or spaces (browsers
    drop tabs and newlines), and the same once percent-decoded.
    """
    if (
        not target.startswith("/")
        or len(target) > _LONGEST_TARGET
        or any(ch == "\\" or ch <= " " or ch == "\x7f" for ch in target)
    ):
        return "/"
    path = target.split("?", 1)[0]
    decoded = unquote(path)
    if path.startswith("//") or decoded.startswith(("//", "/\\")):
        return "/"
    split = urlsplit(target)
    if split.scheme or split.netloc:
        return "/"
    return target
