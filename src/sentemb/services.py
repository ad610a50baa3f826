"""First contact with an external service (an MLflow store, a DVC remote), bounded in time.

A service that is down, misnamed or silent would cost each stage its client's own retries and
timeouts, minutes each (docs/operations.md). Instead, one small request first: does the service
answer within :data:`CONNECT_SECONDS`? If not, the caller warns once and goes on without it. A
service that answers gets the client's own settings for the real work.
"""

from __future__ import annotations

import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import TypeVar

CONNECT_SECONDS = 5.0  # a healthy service answers a first request in well under a second

T = TypeVar("T")


def reason(exc: BaseException) -> str:
    """``TypeName: message`` on one line, cut to 500 characters."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 500 else text[:497] + "..."
    return f"{type(exc).__name__}: {text}"


def call_within(seconds: float, func: Callable[[], T]) -> T:
    """`func()`'s value or exception, or `TimeoutError` if it has neither after `seconds`.

    `func` runs in a daemon thread that is left to end on its own, so it must be a probe that
    changes nothing: name resolution and a blocked connect obey no socket timeout. A probe's own
    socket timeout of the same `seconds` may end it first (on a loaded machine, whichever comes
    first): that is the same silence, so it is the same `TimeoutError` and message."""
    value: list[T] = []
    error: list[Exception] = []

    def target() -> None:
        try:
            value.append(func())
        except Exception as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="service-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    silent = TimeoutError(f"no answer within {seconds:g} s")
    if error:
        if isinstance(getattr(error[0], "reason", error[0]), TimeoutError):  # urllib wraps one
            raise silent from error[0]
        raise error[0]
    if value:
        return value[0]
    raise silent


def http_answers(url: str, seconds: float) -> None:
    """Raise unless the HTTP(S) server at `url` answers one GET within `seconds`. Any status is
    an answer (401, 404, 500: the server is there), and so is any TLS answer (a client
    certificate asked for, a certificate not trusted here): what the client needs beyond that
    is its business, with its own settings. No credentials are sent (a ``user@`` in the URL is
    dropped); proxies come from the environment, as for `requests` and `aiohttp`."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    try:
        with urllib.request.urlopen(parts._replace(netloc=netloc).geturl(), timeout=seconds):
            pass
    except urllib.error.HTTPError as answer:
        answer.close()
    except urllib.error.URLError as error:
        if not isinstance(error.reason, ssl.SSLError):
            raise


def tcp_answers(host: str, port: int, seconds: float, *, speaks_first: bool = False) -> None:
    """Raise unless `host:port` accepts a connection within `seconds` (and, `speaks_first`,
    sends its first bytes within `seconds` more, as an SSH server sends its version line)."""
    with socket.create_connection((host, port), timeout=seconds) as sock:
        if speaks_first and not sock.recv(1):
            raise ConnectionError(f"{host}:{port} closed the connection without a word")
