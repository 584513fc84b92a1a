"""HTTP connections with one deadline per request and a capped response body.

`http.client`'s `timeout` bounds each socket operation, not the request: a server that sends a
byte every half second (slowloris) keeps every read alive, and `readline` on a header or chunk
line loops over such reads for as long as the server likes. Here the connection's socket is
wrapped so that *every* send and receive waits at most the time left until the request's
deadline, and none starts after it; the request then ends with `TimeoutError` at the deadline,
whatever the server does. The body is read in fixed pieces and counted, never kept, and a body
over the cap (announced by Content-Length, or counted while streaming) is refused.

Standard library only; `measure.latency_services.HttpClient` is the one user.
"""

from __future__ import annotations

import http.client
import io
import math
import socket
import time
from typing import Any

PIECE_BYTES = 64 * 1024  # one read of the body; the only buffer the body ever needs


class BodyTooLarge(Exception):
    """The response body is over the cap; `announced` when Content-Length said so up front."""

    def __init__(self, limit: int, announced: int | None) -> None:
        size = f"announced {announced:,} bytes" if announced is not None else "still streaming"
        super().__init__(f"response body over {limit:,} bytes ({size})")


class _DeadlineReader(io.RawIOBase):
    """The receiving side of the socket, as `http.client` reads it through `makefile`."""

    def __init__(self, owner: _DeadlineSocket) -> None:
        super().__init__()
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        sock = self._owner.sock
        sock.settimeout(self._owner.deadline.remaining())
        return sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._owner.reader_closed()
        super().close()


class _DeadlineSocket:
    """The connection's socket with every operation bounded by the owner's deadline; anything
    else (fileno, setsockopt) goes to the real socket. Like `socket.makefile`, an open reader
    keeps the descriptor alive after `close()`: http.client closes the connection while the
    response it returned is still to be read."""

    def __init__(self, sock: socket.socket, deadline: DeadlineMixin) -> None:
        self.sock, self.deadline = sock, deadline
        self._readers = 0
        self._closed = False

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        self._readers += 1
        return io.BufferedReader(_DeadlineReader(self))

    def sendall(self, data: Any) -> None:
        # since Python 3.5 the socket timeout bounds the whole sendall, not each send
        self.sock.settimeout(self.deadline.remaining())
        self.sock.sendall(data)

    def reader_closed(self) -> None:
        self._readers -= 1
        self._release()

    def close(self) -> None:
        self._closed = True
        self._release()

    def _release(self) -> None:
        if self._closed and self._readers <= 0:
            self.sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class DeadlineMixin:
    """Mixed into `http.client.HTTP(S)Connection`: `start(seconds)` opens a request's time
    budget; connecting, sending and every receive use only what is left of it."""

    deadline: float = math.inf
    timeout: Any
    sock: Any

    def start(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        return left

    def connect(self) -> None:
        self.timeout = self.remaining()
        super().connect()  # type: ignore[misc]  # the http.client class mixed with
        self.sock = _DeadlineSocket(self.sock, self)  # after TLS, for https


class DeadlineHTTPConnection(DeadlineMixin, http.client.HTTPConnection):
    pass


class DeadlineHTTPSConnection(DeadlineMixin, http.client.HTTPSConnection):
    pass


def read_capped(response: http.client.HTTPResponse, limit: int) -> int:
    """Read and discard the body; return its size. Raises BodyTooLarge past `limit` bytes (the
    connection is then in an unknown state: the caller closes it)."""
    if response.length is not None and response.length > limit:
        raise BodyTooLarge(limit, response.length)
    piece = memoryview(bytearray(PIECE_BYTES))
    total = 0
    while n := response.readinto(piece):
        total += n
        if total > limit:
            raise BodyTooLarge(limit, None)
    return total


__all__ = [
    "BodyTooLarge",
    "DeadlineHTTPConnection",
    "DeadlineHTTPSConnection",
    "read_capped",
]
