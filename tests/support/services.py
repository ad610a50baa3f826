"""Local stand-ins for the services the stages touch (MLflow servers, DVC remotes): a port no one
listens on, a server that accepts connections and never says a word, one that answers every
HTTP request with a given status, one that sends an SSH version line. Each counts the
connections it accepted, so that a test can assert how many attempts a client made.
`remote_of` makes DVC remotes of each kind from them."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

UNRESOLVABLE = "no-such-host.invalid"  # RFC 2606: never resolves


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (a connection is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeServer:
    """A TCP server on 127.0.0.1:`port`; `greeting` is sent on each connection (None: never a
    word), then an HTTP request, if one comes, gets `status` (None: no answer)."""

    def __init__(self, greeting: bytes | None, status: int | None) -> None:
        self.greeting = greeting
        self.status = status
        self.connections = 0  # accepted so far
        self.port = 0
        self.accepted: list[socket.socket] = []

    def serve(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            self.accepted.append(connection)
            if self.greeting is not None:
                connection.sendall(self.greeting)
            if self.status is not None:
                threading.Thread(target=self.answer, args=(connection,), daemon=True).start()

    def answer(self, connection: socket.socket) -> None:
        request = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in request:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                request += chunk
            connection.sendall(
                f"HTTP/1.1 {self.status} Status\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n".encode()
            )


@contextlib.contextmanager
def fake_server(greeting: bytes | None = None, status: int | None = None) -> Iterator[FakeServer]:
    """A :class:`FakeServer` for the duration of the block."""
    server = FakeServer(greeting, status)
    stop = threading.Event()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.05)  # `serve` looks at `stop` between accepts
        server.port = listener.getsockname()[1]
        thread = threading.Thread(target=server.serve, args=(listener, stop), daemon=True)
        thread.start()
        try:
            yield server
        finally:
            stop.set()
            thread.join(5)
            for connection in server.accepted:
                connection.close()


SSH_GREETING = b"SSH-2.0-OpenSSH_9.6\r\n"


@contextlib.contextmanager
def remote_of(kind: str, tmp_path: Path) -> Iterator[tuple[dict[str, Any], FakeServer | None]]:
    """The config of a remote of `kind` (as `remotes` gives it) and the fake server behind it.

    `kind` is "<scheme> <what is there>": a local folder that exists or is missing, a closed
    port, a host that does not resolve, a server that accepts and never answers, one that
    answers HTTP 404 or sends an SSH version line."""
    scheme, what = kind.split(" ", 1)
    if scheme in ("local", "file"):
        folder = tmp_path / "remote"
        if what == "folder":
            folder.mkdir()
        yield {"url": str(folder) if scheme == "local" else folder.as_uri()}, None
        return
    with contextlib.ExitStack() as stack:
        server = None
        host, port = "127.0.0.1", free_port()
        if what == "unresolvable host":
            host = UNRESOLVABLE
        elif what != "closed port":
            greeting = SSH_GREETING if what == "speaks ssh" else None
            status = 404 if what == "answers 404" else None
            server = stack.enter_context(fake_server(greeting, status))
            port = server.port
        if scheme == "s3":  # an S3-compatible store (MinIO, ...) at `endpointurl`
            yield {"url": "s3://bucket/store", "endpointurl": f"http://{host}:{port}"}, server
        else:
            yield {"url": f"{scheme}://user@{host}:{port}/store"}, server
