"""Small HTTP helpers for the providers: `Retry-After` and URLs safe to print."""

from __future__ import annotations

import email.utils
import time
from urllib.parse import urlsplit, urlunsplit

__all__ = ["endpoint_url", "retry_after_seconds", "safe_url"]


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delay-seconds or an HTTP date), or `None`.

    A date in the past means 0; an unreadable value means `None`.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(seconds, 0.0)


def safe_url(url: str) -> str:
    """`url` without user information, query string or fragment, where secrets may hide."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def endpoint_url(base_url: str, path: str) -> str:
    """`path` appended to the path of `base_url`, keeping its query string (`?api-version=`)."""
    parts = urlsplit(base_url)
    joined = parts.path.rstrip("/") + "/" + path.lstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, joined, parts.query, parts.fragment))
