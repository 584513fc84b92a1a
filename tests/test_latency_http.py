"""Endpoint mode against a loopback HTTP server the tests start and stop (127.0.0.1, port 0)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from mlbaseline import config
from mlbaseline.cli import app
from mlbaseline.errors import UsageError
from mlbaseline.measure.latency_services import HttpService, parse_endpoint
from mlbaseline.progress import RecordingProgress
from mlbaseline.results import load_result
from mlbaseline.runners.latency import run_latency


class Server:
    """Routes: /predict answers 200 JSON, /error 503, /slow waits for `release`, /redirect 302
    to another host. Every request is recorded (path, body, content type)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes, str | None]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with state.lock:
                    state.seen.append((self.path, body, self.headers.get("Content-Type")))
                if self.path == "/slow":
                    state.release.wait(5)
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "http://elsewhere.invalid/predict")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 503 if self.path == "/error" else 200
                payload = json.dumps({"label": 3, "n": len(body)}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer  # http.server dispatches on these names

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # a short poll keeps shutdown() quick (it waits for the serve loop's next poll)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _, _ in self.seen]


@pytest.fixture
def server():
    s = Server()
    s.thread.start()
    try:
        yield s
    finally:
        s.release.set()  # let any handler still waiting on /slow finish
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(5)


def cfg_for(url: str, **latency):
    overrides = {"latency.url": url, "latency.warmup_requests": 0}
    overrides.update({f"latency.{k}": v for k, v in latency.items()})
    return config.resolve(None, "demo", overrides)


def test_endpoint_measured_end_to_end_with_the_configured_body(server):
    cfg = cfg_for(
        f"{server.base}/predict?v=1", body='{"x": [1, 2]}', requests=40, warmup_requests=2
    )
    result = run_latency(cfg, RecordingProgress())
    assert result.status == "complete" and not result.verdict.failed
    level = result.data["levels"]["c2"]
    assert level["errors"]["count"] == 0 and level["completed"] == 40
    assert set(level["requests"]["status"]) == {200}
    assert len(server.seen) == 42  # 2 warm-up + 40 measured, nothing else
    assert {p for p, _, _ in server.seen} == {"/predict?v=1"}
    assert {b for _, b, _ in server.seen} == {b'{"x": [1, 2]}'}
    assert {c for _, _, c in server.seen} == {"application/json"}
    assert level["stages"]["compute"]["median"] > 0
    assert result.data["mode"] == "endpoint"
    service = result.data["service"]
    assert service["type"] == "http" and service["body_bytes"] == 13
    assert result.environment["blocking"]["device"] == "http"


def test_error_status_is_counted_per_request_and_fails_the_verdict(server):
    result = run_latency(cfg_for(f"{server.base}/error", requests=20), RecordingProgress())
    assert result.status == "complete"
    level = result.data["levels"]["c2"]
    assert level["errors"] == {"count": 20, "share": 1.0, "by_kind": {"http_503": 20}}
    assert level["requests"]["status"] == [503] * 20
    assert level["sla"]["met"] is False
    checks = {c.name: c.status for c in result.verdict.checks}
    assert checks["errors.c2"] == "fail" and checks["sla.c2"] == "fail"


def test_timeout_is_recorded_not_raised(server):
    cfg = cfg_for(f"{server.base}/slow", requests=2, concurrency=1, timeout_s=0.2)
    result = run_latency(cfg, RecordingProgress())
    assert result.status == "complete"
    level = result.data["levels"]["c1"]
    assert level["errors"]["by_kind"] == {"timeout": 2}
    assert all("no answer within 0.2 s" in d for d in level["requests"]["detail"])
    assert all(v >= 0.2 for v in level["requests"]["latency_s"])
    assert result.verdict.failed


def test_redirects_are_not_followed(server):
    result = run_latency(cfg_for(f"{server.base}/redirect", requests=5), RecordingProgress())
    level = result.data["levels"]["c2"]
    assert level["errors"]["by_kind"] == {"redirect": 5}
    assert "elsewhere.invalid" in level["requests"]["detail"][0]
    assert "not followed" in level["requests"]["detail"][0]
    assert server.paths() == ["/redirect"] * 5


def test_connection_refused_is_counted():
    with socket.socket() as s:  # a port nobody listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = cfg_for(f"http://127.0.0.1:{port}/x", requests=6, concurrency=1, timeout_s=1.0)
    result = run_latency(cfg, RecordingProgress())
    assert result.status == "complete"
    assert result.data["levels"]["c1"]["errors"]["by_kind"] == {"connection": 6}


def test_open_loop_against_the_endpoint(server):
    cfg = cfg_for(f"{server.base}/predict", requests=30, rate=300.0, body="{}")
    result = run_latency(cfg, RecordingProgress())
    level = result.data["levels"]["r300"]
    assert level["errors"]["count"] == 0 and level["achieved_rate"] > 0
    assert len(server.seen) == 30


def test_cli_endpoint_with_a_body_file(server, tmp_path):
    body = tmp_path / "req.json"
    body.write_bytes(b'{"image": "abc"}')
    out = tmp_path / "lat.json"
    args = ["latency", "--url", f"{server.base}/predict", "--body-file", str(body)]
    args += ["--requests", "20", "--set", "latency.warmup_requests=0", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert load_result(out).data["service"]["url"] == f"{server.base}/predict"
    assert {b for _, b, _ in server.seen} == {b'{"image": "abc"}'}


def test_cli_rejects_other_schemes_and_missing_body_file(tmp_path):
    res = CliRunner().invoke(app, ["latency", "--url", "file:///etc/passwd"])
    assert res.exit_code == 2 and res.stderr.startswith("Error: latency.url: only http")
    missing = tmp_path / "nope.json"
    res = CliRunner().invoke(
        app, ["latency", "--url", "http://127.0.0.1:9/", "--body-file", str(missing)]
    )
    assert res.exit_code == 2 and "no such file" in res.stderr
    res = CliRunner().invoke(
        app, ["latency", "--url", "http://127.0.0.1:9/", "--body", "a", "--body-file", str(missing)]
    )
    assert res.exit_code == 2 and "give one, not both" in res.stderr


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/x", "only http:// and https://"),
        ("127.0.0.1:8080/predict", "only http:// and https://"),
        ("http:///nohost", "has no host"),
        ("http://user:pw@host/x", "credentials"),
        ("http://host:99999/x", "not a valid URL"),
    ],
)
def test_parse_endpoint_refuses_bad_urls(url, message):
    with pytest.raises(UsageError, match=message):
        parse_endpoint(url)


def test_parse_endpoint_keeps_path_and_query():
    ep = parse_endpoint("https://example.com/v1/predict?a=1")
    assert (ep.scheme, ep.host, ep.port, ep.target) == (
        "https",
        "example.com",
        443,
        "/v1/predict?a=1",
    )
    assert parse_endpoint("http://h").target == "/"
    assert HttpService("http://h:81/").describe()["content_type"] is None
