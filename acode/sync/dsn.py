"""How a remote is named to people: its libpq connection string without secrets.

A DSN may carry a password (``postgresql://user:secret@host/db`` or
``password=secret``); everything acode prints, logs or records about a remote goes
through ``describe_remote`` first.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

__all__ = ["describe_remote"]

_KEY_VALUE = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")
_SHOWN_KEYS = ("host", "hostaddr", "port", "dbname", "user")


def describe_remote(dsn: str) -> str:
    """``postgresql://user@host:port/db`` (URL form) or ``host=... dbname=...``
    (key/value form), with no password and no other parameter."""
    text = dsn.strip()
    if "://" in text:
        return _describe_url(text)
    pairs = {key: value.strip("'") for key, value in _KEY_VALUE.findall(text)}
    shown = [f"{key}={pairs[key]}" for key in _SHOWN_KEYS if key in pairs]
    return " ".join(shown) or "the remote (no host named)"


def _describe_url(text: str) -> str:
    try:
        url = urlsplit(text)
        port = url.port
    except ValueError:
        return "the remote (its URL cannot be read)"
    host = url.hostname or ""
    if not host:  # a Unix socket directory given as ?host=/path
        host = parse_qs(url.query).get("host", ["localhost"])[0]
    if ":" in host and not host.startswith("/"):
        host = f"[{host}]"  # an IPv6 address
    user = f"{url.username}@" if url.username else ""
    where = f"{host}:{port}" if port else host
    return f"{url.scheme}://{user}{where}{url.path}"
