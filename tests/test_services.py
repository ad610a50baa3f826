"""sentemb.services: a first contact answers, fails at once, or gives up after its seconds."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from urllib.error import URLError

import pytest

from sentemb.services import call_within, http_answers, reason, tcp_answers

from support.services import SSH_GREETING, UNRESOLVABLE, FakeServer, fake_server, free_port


def test_call_within_gives_the_value_the_error_or_a_timeout() -> None:
    assert call_within(5, lambda: 3) == 3
    with pytest.raises(KeyError, match="boom"):
        call_within(5, lambda: {}["boom"])
    release = threading.Event()
    with pytest.raises(TimeoutError, match=r"^no answer within 0\.2 s$"):
        call_within(0.2, release.wait)  # the thread is left waiting, as a hung connect would be
    release.set()


@pytest.mark.parametrize(
    "timeout",
    [TimeoutError("timed out"), URLError(TimeoutError("timed out"))],
    ids=["read", "connect"],
)
def test_a_probe_socket_timing_out_first_is_the_same_silence(timeout: OSError) -> None:
    """The probe's socket timeout (read, or a connect urllib wraps) may end it before the wait
    does on a loaded machine: the same `TimeoutError` and message either way."""

    def probe() -> None:
        raise timeout

    with pytest.raises(TimeoutError, match=r"^no answer within 1 s$") as raised:
        call_within(1, probe)
    assert raised.value.__cause__ is timeout


def test_reason_is_one_short_line() -> None:
    assert reason(ValueError("a\n  b")) == "ValueError: a b"
    assert len(reason(OSError("x" * 900))) == len("OSError: ") + 500


@contextlib.contextmanager
def http_target(kind: str, scheme: str = "http") -> Iterator[tuple[str, FakeServer | None]]:
    """A URL of `kind` and the fake server behind it, if any."""
    if kind == "closed port":
        yield f"{scheme}://127.0.0.1:{free_port()}/store", None
    elif kind == "unresolvable host":
        yield f"{scheme}://{UNRESOLVABLE}/store", None
    else:
        status = None if kind == "silent server" else int(kind.split()[-1])
        with fake_server(status=status) as server:
            yield f"{scheme}://127.0.0.1:{server.port}/store", server


@pytest.mark.parametrize(
    ("kind", "scheme"),
    [
        ("closed port", "http"),
        ("closed port", "https"),
        ("unresolvable host", "http"),
        ("unresolvable host", "https"),
        ("silent server", "http"),
        ("silent server", "https"),
    ],
)
def test_http_probe_fails_within_its_seconds(kind: str, scheme: str) -> None:
    with http_target(kind, scheme) as (url, server), pytest.raises(OSError) as raised:
        call_within(1, lambda: http_answers(url, 1))
    if kind == "silent server":
        assert str(raised.value) == "no answer within 1 s"
    if server is not None:
        assert server.connections == 1  # one attempt, no retry


@pytest.mark.parametrize("kind", ["answers 200", "answers 404", "answers 401", "answers 500"])
def test_any_http_status_is_an_answer(kind: str) -> None:
    with http_target(kind) as (url, server):
        http_answers(url, 5)
    assert server is not None and server.connections == 1


def test_any_tls_answer_is_an_answer() -> None:
    """A TLS handshake that fails (here: the server speaks no TLS; elsewhere a certificate not
    trusted here, or one asked of the client) says the server is there; the client decides."""
    with fake_server(greeting=b"HTTP/1.1 400 Bad Request\r\n\r\n") as server:
        http_answers(f"https://127.0.0.1:{server.port}/", 5)
    assert server.connections == 1


@pytest.mark.parametrize("kind", ["closed port", "unresolvable host", "silent server"])
def test_tcp_probe_of_a_server_that_speaks_first_fails_within_its_seconds(kind: str) -> None:
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(fake_server()) if kind == "silent server" else None
        host = UNRESOLVABLE if kind == "unresolvable host" else "127.0.0.1"
        port = free_port() if server is None else server.port
        with pytest.raises(OSError):
            call_within(1, lambda: tcp_answers(host, port, 1, speaks_first=True))
    assert server is None or server.connections == 1


def test_tcp_probe_of_a_server_that_speaks_first_succeeds() -> None:
    with fake_server(greeting=SSH_GREETING) as ssh:
        tcp_answers("127.0.0.1", ssh.port, 5, speaks_first=True)
    assert ssh.connections == 1
