"""The two real services `mlb latency` measures: the configured model in-process, and an HTTP
endpoint (standard library only). Both implement `measure.latency.Service`.

CUDA is touched only here, lazily, behind `device_synchronizer`: the engine and the fakes in the
tests never see it.
"""

from __future__ import annotations

import hashlib
import http.client
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mlbaseline import __version__
from mlbaseline.errors import UsageError
from mlbaseline.measure import httpbound
from mlbaseline.measure.latency import RequestError
from mlbaseline.redact import redact_url

# ---------------------------------------------------------------- model service


def _no_sync() -> None:
    pass


def device_synchronizer(device: str) -> Callable[[], None]:
    """A call that waits for all queued work on `device`: `torch.cuda.synchronize` on CUDA
    (kernels are asynchronous, so a stage boundary without it would charge the kernel to
    whichever stage next waits), a no-op on CPU where every op has finished when it returns."""
    if not device.startswith("cuda"):
        return _no_sync
    import torch

    target = torch.device(device)
    return lambda: torch.cuda.synchronize(target)


def _first_tensor(output: Any) -> Any:
    """Models may return a tensor, a tuple/list or a dict (e.g. HF-style); post-process the
    first tensor."""
    if isinstance(output, (tuple, list)) and output:
        return _first_tensor(output[0])
    if isinstance(output, dict) and output:
        return _first_tensor(next(iter(output.values())))
    return output


class ModelClient:
    """One client thread's view of the model: its own seeded input generator.

    Stages: prepare = create the random input and copy it host→device; compute = the forward
    pass under `torch.inference_mode()` (thread-local, so entered here, in the client's thread)
    plus a device synchronisation; post = device→host copy and argmax."""

    def __init__(self, service: ModelService, seed: int) -> None:
        import torch

        self.service = service
        self.generator = torch.Generator().manual_seed(seed)

    def prepare(self, index: int) -> Any:
        s = self.service
        x = s.make_input(self.generator).to(s.device)
        s.sync()
        return x

    def compute(self, prepared: Any) -> Any:
        import torch

        s = self.service
        with torch.inference_mode():
            out = s.model(prepared)
        s.sync()
        return out

    def post(self, output: Any) -> Any:
        logits = _first_tensor(output)
        # .cpu() blocks until the copy is done, so no extra synchronisation is needed here
        return logits.detach().cpu().argmax(dim=-1)

    def close(self) -> None:
        pass


class ModelService:
    """The configured workload in eval mode, called from several client threads.

    Calling one module from several threads in inference mode is safe (no autograd state, no
    parameter updates). The threads do share torch's CPU intra-op thread pool, so on CPU N
    clients compete for the same `torch.get_num_threads()` cores — that contention is part of
    what a concurrency level measures. On CUDA all clients use the default stream, and
    `torch.cuda.synchronize` waits for every client's kernels, as a one-stream server would."""

    def __init__(
        self,
        model: Any,
        make_input: Callable[[Any], Any],
        device: str,
        seed: int,
        sync: Callable[[], None] | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.make_input = make_input
        self.device = device
        self.seed = seed
        self.sync = sync or device_synchronizer(device)
        self.info = info or {}

    def client(self, index: int) -> ModelClient:
        return ModelClient(self, self.seed + 1 + index)

    def prime(self) -> None:
        """One forward pass on the calling thread before any client starts: lazy modules
        (LazyLinear) initialise their parameters on the first call, which must not race."""
        c = ModelClient(self, self.seed)
        c.post(c.compute(c.prepare(0)))

    def describe(self) -> dict[str, Any]:
        return {"type": "model", "device": self.device, **self.info}

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- HTTP endpoint service


@dataclass(frozen=True)
class Endpoint:
    """The one URL endpoint mode may contact."""

    url: str
    scheme: str
    host: str
    port: int
    target: str  # path + query, as sent on the request line


def parse_endpoint(url: str) -> Endpoint:
    """Validate `url`: http or https only, a host, a valid port, no credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        # the URL may hold a password or a token: it is quoted only redacted
        raise UsageError(f"latency.url: '{redact_url(url)}' is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        shown = parts.scheme or "no scheme"
        raise UsageError(f"latency.url: only http:// and https:// URLs are accepted, got {shown}")
    if not parts.hostname:
        raise UsageError(f"latency.url: '{redact_url(url)}' has no host")
    if parts.username or parts.password:
        raise UsageError("latency.url: credentials in the URL are not supported")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default_port = 443 if parts.scheme == "https" else 80
    return Endpoint(url, parts.scheme, parts.hostname, port or default_port, target)


class HttpClient:
    """One client thread's HTTP connection (`http.client`, kept alive when the server allows).

    Stages: prepare = open the connection when there is none (the first request, or after the
    server closed it); compute = send the request and wait for the status line and headers
    (network + server work); post = read the body. Redirects are never followed: only the given
    URL is contacted, and a 3xx is recorded as a failed request. `latency.timeout_s` bounds the
    whole request, connect to last byte, and the body is counted, never kept, up to
    `latency.max_response_bytes` (`httpbound`)."""

    def __init__(self, service: HttpService) -> None:
        self.s = service
        self.conn: httpbound.DeadlineMixin | None = None

    def _open(self) -> httpbound.DeadlineMixin:
        ep, timeout = self.s.endpoint, self.s.timeout_s
        if ep.scheme == "https":
            ctx = ssl.create_default_context()
            return httpbound.DeadlineHTTPSConnection(ep.host, ep.port, timeout=timeout, context=ctx)
        return httpbound.DeadlineHTTPConnection(ep.host, ep.port, timeout=timeout)

    def _fail(self, exc: BaseException, during: str) -> RequestError:
        """Drop the connection (its state is unknown) and describe the failure."""
        self.close()
        if isinstance(exc, TimeoutError):
            limit = f"{self.s.timeout_s:g} s (latency.timeout_s, the whole request)"
            return RequestError("timeout", f"{during}: no answer within {limit}")
        return RequestError("connection", f"{during}: {type(exc).__name__}: {exc}")

    def prepare(self, index: int) -> httpbound.DeadlineMixin:
        if self.conn is None:
            self.conn = self._open()
        self.conn.start(self.s.timeout_s)  # one deadline for the whole request
        if self.conn.sock is None:
            try:
                self.conn.connect()
            except OSError as exc:
                raise self._fail(exc, "connect") from None
        return self.conn

    def compute(self, conn: Any) -> http.client.HTTPResponse:
        s = self.s
        try:
            conn.request(s.method, s.endpoint.target, body=s.body, headers=s.headers)
            return conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise self._fail(exc, "request") from None

    def post(self, response: http.client.HTTPResponse) -> tuple[int, int]:
        try:
            size = httpbound.read_capped(response, self.s.max_response_bytes)
        except httpbound.BodyTooLarge as exc:
            self.close()  # the rest of the body is still on the wire
            raise RequestError("too_large", f"{exc} (latency.max_response_bytes)") from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._fail(exc, "reading the body") from None
        status = response.status
        if 300 <= status < 400:
            where = response.getheader("Location", "?")
            raise RequestError(
                "redirect",
                f"HTTP {status} to {where!r} not followed (only the given URL is contacted)",
                status,
            )
        if status >= 400:
            raise RequestError(f"http_{status}", f"HTTP {status} {response.reason}", status)
        return status, size

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class HttpService:
    """An HTTP endpoint measured end to end: network, (de)serialisation and the model."""

    def __init__(
        self,
        url: str,
        method: str = "POST",
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout_s: float = 10.0,
        max_response_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.endpoint = parse_endpoint(url)
        self.method = method
        self.body = body
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.headers = {"User-Agent": f"mlb/{__version__}", "Accept": "*/*"}
        if body is not None:
            self.headers["Content-Type"] = content_type

    def client(self, index: int) -> HttpClient:
        return HttpClient(self)

    def describe(self) -> dict[str, Any]:
        body = self.body or b""
        return {
            "type": "http",
            "device": "http",
            "url": redact_url(self.endpoint.url),  # written to the result: no token
            "method": self.method,
            "content_type": self.headers.get("Content-Type"),
            "body_bytes": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "timeout_s": self.timeout_s,
            "max_response_bytes": self.max_response_bytes,
            "redirects": "not followed; recorded as failed requests",
        }

    def close(self) -> None:
        pass
