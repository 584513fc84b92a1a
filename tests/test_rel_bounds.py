"""Bounded input (issue 25, item 6; docs/RELIABILITY.md section 5.5).

Hostile sizes end quickly, in bounded memory, with one `Error:` line or a counted failure. The
resource-bound cases run in a child process and measure it: wall time and the child's own peak
RSS from `os.wait4` (its rusage, the per-child form of `getrusage(RUSAGE_CHILDREN)`, which
would keep the maximum over every child the test session ever reaped), against the same child
given a trivial valid input. The HTTP cases use a loopback server in a thread of the test.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlbaseline import config
from mlbaseline.cli import app
from mlbaseline.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 10.0  # the bound for every case
LIMIT_RSS = 500 * 1024 * 1024  # above the baseline child's peak RSS
KILL_AFTER_S = 60.0  # a runaway child is killed here, and the case fails on its wall time


def assert_one_error_line(res, *fragments: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# ---------------------------------------------------------------- a measured child process


@dataclass
class Child:
    code: int
    output: str
    wall_s: float
    peak_rss: int  # bytes


def run_child(args: list[str]) -> Child:
    """Run `python ARGS` in the repository and measure its wall time and peak RSS."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out, stderr=out)
        killer = threading.Timer(KILL_AFTER_S, proc.kill)
        killer.start()
        t0 = time.monotonic()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return Child(proc.returncode, text, wall, usage.ru_maxrss * 1024)  # Linux: KiB


def assert_bounded(case: Child, baseline: Child) -> None:
    assert "Traceback" not in case.output, case.output
    assert case.wall_s < LIMIT_S, (case.wall_s, case.output)
    assert case.peak_rss - baseline.peak_rss < LIMIT_RSS, (case.peak_rss, baseline.peak_rss)


# ---------------------------------------------------------------- YAML


def billion_laughs() -> str:
    """About 500 bytes: nine levels of nine aliases, 9⁹ strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghi"
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "workload:\n  model_kwargs:\n" + "".join(f"    {line}\n" for line in lines)


YAML_CASES = {
    "alias-bomb": (billion_laughs(), "aliases"),
    "nested-600": ("workload:\n  model_kwargs:\n    a: " + "[" * 600 + "]" * 600 + "\n", "deeper"),
}

# what the CLI does with a config: resolve it, copy it into the result, write it as JSON
RESOLVE = (
    "import json, sys; from pathlib import Path; from mlbaseline import config; "
    "from mlbaseline.errors import MlbError\n"
    "try: print(len(json.dumps(config.resolve(Path(sys.argv[1])).to_dict())))\n"
    "except MlbError as e: print('Error:', e); sys.exit(2)"
)


@pytest.mark.parametrize(
    "case",
    [pytest.param(k, id=k) for k in YAML_CASES],
)
def test_yaml_bounds(case: str, tmp_path: Path) -> None:
    text, fragment = YAML_CASES[case]
    ok, bad = tmp_path / "ok.yaml", tmp_path / "bad.yaml"
    ok.write_text("workload:\n  model_kwargs: {a: [1, 2]}\n")
    bad.write_text(text)
    baseline = run_child(["-c", RESOLVE, str(ok)])
    assert baseline.code == 0, baseline.output
    child = run_child(["-c", RESOLVE, str(bad)])
    assert child.code == 2 and fragment in child.output, child.output
    assert_bounded(child, baseline)
    res = CliRunner().invoke(app, ["throughput", "-c", str(bad)])
    assert_one_error_line(res, f"{bad}:", fragment)


def test_yaml_duplicate_key_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("throughput:\n  min_steps: 5\nseed: 1\nthroughput:\n  max_steps: 9\n")
    res = CliRunner().invoke(app, ["throughput", "-c", str(path)])
    assert_one_error_line(res, f"{path}:4: duplicate key 'throughput'")


def test_yaml_nested_duplicate_key_and_merge_keys(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("latency:\n  requests: 5\n  requests: 6\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml:3: duplicate key 'requests'"):
        config.resolve(path)
    # a merge key (`<<: *base`) is overridden by the keys beside it: not a duplicate
    merged = tmp_path / "merge.yaml"
    merged.write_text("throughput:\n  <<: {min_steps: 3, max_steps: 50}\n  min_steps: 4\n")
    assert config.resolve(merged).throughput.min_steps == 4


def test_set_value_is_bounded_too() -> None:
    res = CliRunner().invoke(app, ["throughput", "--set", "workload.model_kwargs.a=" + "[" * 600])
    assert_one_error_line(res, "--set workload.model_kwargs.a", "deeper")


def test_config_file_must_be_a_regular_file() -> None:
    res = CliRunner().invoke(app, ["throughput", "-c", "/dev/zero"])
    assert_one_error_line(res, "/dev/zero", "not a regular file")


# ---------------------------------------------------------------- non-finite floats


def _float_fields() -> list[str]:
    return [name for name, type_name, *_ in config.iter_fields() if type_name.startswith("float")]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(".nan", id="nan"),
        pytest.param(".inf", id="inf"),
        pytest.param("-.inf", id="minus-inf"),
        pytest.param("1e999", id="overflow"),
        pytest.param("1" + "0" * 400, id="400-digits"),
    ],
)
def test_every_float_field_refuses_non_finite(value: str) -> None:
    fields = _float_fields()
    assert "compare.alpha" in fields and "latency.timeout_s" in fields and len(fields) > 20
    for name in fields:
        with pytest.raises(ConfigError, match=rf"^{name}: expected a finite number"):
            config.resolve(None, None, config.flatten(config.parse_set([f"{name}={value}"])))
    thresholds = config.parse_set([f"compare.thresholds.step={value}"])
    with pytest.raises(ConfigError, match="finite"):
        config.resolve(None, None, config.flatten(thresholds))


def test_cli_nan_is_one_error_line() -> None:
    res = CliRunner().invoke(app, ["compare", "a.json", "b.json", "--set", "compare.alpha=.nan"])
    assert_one_error_line(res, "compare.alpha: expected a finite number, got nan")


# ---------------------------------------------------------------- HTTP endpoint


class Hostile(socketserver.BaseRequestHandler):
    """Answers by path: /ok a small body; /endless an endless chunked body; /slowloris a header
    line one byte every 0.5 s, forever; /huge a 1 TB Content-Length (then zeros)."""

    stop: threading.Event

    def handle(self) -> None:
        sock: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            if not (data := sock.recv(4096)):
                return
            head += data
        path = head.split(b" ", 2)[1].decode()
        with contextlib.suppress(OSError):  # the client hung up: what a bounded client does
            self.answer(sock, path)

    def answer(self, sock: socket.socket, path: str) -> None:
        if path == "/ok":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        elif path == "/endless":
            sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
            while not self.stop.is_set():
                sock.sendall(chunk)
        elif path == "/slowloris":
            sock.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not self.stop.wait(0.5):  # the server's pace; the test waits for the client
                sock.sendall(b"z")
        elif path == "/huge":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n")
            while not self.stop.is_set():
                sock.sendall(b"\0" * 65536)


@pytest.fixture
def hostile() -> Iterator[str]:
    stop = threading.Event()
    handler = type("Handler", (Hostile,), {"stop": stop})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


# one request through the real client, as a level of `mlb latency` sends it
REQUEST = (
    "import sys; from mlbaseline.measure.latency_services import HttpService; "
    "from mlbaseline.measure.latency import RequestError\n"
    "c = HttpService(sys.argv[1], 'GET', timeout_s=2.0).client(0)\n"
    "try: print('ok', c.post(c.compute(c.prepare(0))))\n"
    "except RequestError as e: print(e.kind, e.message)"
)


@pytest.mark.parametrize(
    ("path", "kind", "fragment"),
    [
        pytest.param("/endless", "too_large", "over 67,108,864 bytes", id="endless-chunked"),
        pytest.param("/slowloris", "timeout", "no answer within 2 s", id="slowloris"),
        pytest.param("/huge", "too_large", "announced 1,000,000,000,000 bytes", id="huge-length"),
    ],
)
def test_http_response_bounds(hostile: str, path: str, kind: str, fragment: str) -> None:
    baseline = run_child(["-c", REQUEST, f"{hostile}/ok"])
    assert baseline.output.startswith("ok (200, 2)"), baseline.output
    child = run_child(["-c", REQUEST, f"{hostile}{path}"])
    assert child.output.startswith(f"{kind} ") and fragment in child.output, child.output
    assert_bounded(child, baseline)
    if path == "/slowloris":  # the deadline ended it, not the end of the test's patience
        assert child.wall_s < 2.0 + 3.0, child.wall_s


def test_http_over_cap_is_a_counted_failure_of_the_level(hostile: str) -> None:
    from mlbaseline.progress import RecordingProgress
    from mlbaseline.runners.latency import run_latency

    overrides = {
        "latency.url": f"{hostile}/endless",
        "latency.method": "GET",
        "latency.warmup_requests": 0,
        "latency.requests": 3,
        "latency.concurrency": 1,
        "latency.max_response_bytes": 100_000,
    }
    result = run_latency(config.resolve(None, "demo", overrides), RecordingProgress())
    level = result.data["levels"]["c1"]
    assert level["errors"]["by_kind"] == {"too_large": 3}
    assert all("latency.max_response_bytes" in d for d in level["requests"]["detail"])
    assert result.data["service"]["max_response_bytes"] == 100_000
    assert result.verdict.failed


# ---------------------------------------------------------------- --body-file

READ_BODY = (
    "import sys; from mlbaseline import config; from mlbaseline.errors import MlbError; "
    "from mlbaseline.runners.latency import read_body\n"
    "o = {'latency.url': 'http://127.0.0.1:9/', 'latency.body_file': sys.argv[1]}\n"
    "try: print(len(read_body(config.resolve(None, None, o).latency)))\n"
    "except MlbError as e: print('Error:', e); sys.exit(2)"
)


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "fifo")  # nobody writes: opening it for reading must not wait for one
    return tmp / "fifo"


def _over_cap(tmp: Path) -> Path:
    path = tmp / "big.bin"
    with open(path, "wb") as fh:
        fh.truncate(64 * 1024 * 1024 + 1)  # sparse: no disk used
    return path


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        pytest.param(lambda tmp: Path("/dev/zero"), "not a regular file", id="dev-zero"),
        pytest.param(_fifo, "not a regular file", id="fifo"),
        pytest.param(_over_cap, "larger than 67,108,864 bytes", id="over-64MiB"),
        pytest.param(lambda tmp: tmp, "cannot read", id="directory"),
    ],
)
def test_body_file_must_be_a_small_regular_file(make, fragment: str, tmp_path: Path) -> None:
    ok = tmp_path / "ok.json"
    ok.write_bytes(b'{"x": 1}')
    baseline = run_child(["-c", READ_BODY, str(ok)])
    assert baseline.output.strip() == "8", baseline.output
    path = make(tmp_path)
    child = run_child(["-c", READ_BODY, str(path)])
    assert child.code == 2 and fragment in child.output, child.output
    assert_bounded(child, baseline)
    res = CliRunner().invoke(
        app, ["latency", "--url", "http://127.0.0.1:9/", "--body-file", str(path)]
    )
    assert_one_error_line(res, "latency.body_file", fragment)


# ---------------------------------------------------------------- batches that cannot fit


def test_batch_estimate_and_the_memory_it_is_checked_against() -> None:
    from mlbaseline.measure.memory import BatchEstimate, available_bytes, refuse_oversized_batch

    est = BatchEstimate(1_000_000_000, (3, 224, 224), "float32")
    assert est.bytes == 1_000_000_000 * 3 * 224 * 224 * 4
    gib = 2**30
    # on CUDA the batch must fit on the host (built there first) and on the device
    assert available_bytes("cuda:0", lambda: 64 * gib, lambda dev: 21 * gib) == 21 * gib
    assert available_bytes("cpu", lambda: 64 * gib, lambda dev: 1 / 0) == 64 * gib
    with pytest.raises(ConfigError) as err:
        refuse_oversized_batch("latency.batch_size", est, "cuda:0", lambda dev: 21 * gib)
    assert str(err.value) == (
        "latency.batch_size: 1000000000 × 3×224×224 float32 ≈ 560,760.5 GiB, "
        "more than the 21.0 GiB available"
    )
    small = BatchEstimate(64, (3, 224, 224), "float32")
    refuse_oversized_batch("latency.batch_size", small, "cpu", lambda dev: gib)  # fits


# the interpreter with the CLI's imports (torch included) and nothing to do
IMPORTS = "import torch, mlbaseline.cli, mlbaseline.runners.throughput"


@pytest.fixture(scope="module")
def import_baseline() -> Child:
    child = run_child(["-c", IMPORTS])
    assert child.code == 0, child.output
    return child


@pytest.mark.parametrize(
    ("command", "setting"),
    [
        pytest.param("latency", "latency.batch_size=1000000000", id="latency"),
        pytest.param("dataloader", "dataloader.batch_size=1000000000", id="dataloader"),
        pytest.param("throughput", "throughput.batch_sizes=[8,1000000000]", id="throughput"),
    ],
)
def test_batch_over_available_memory_is_refused_before_allocating(
    command: str, setting: str, tmp_path: Path, import_baseline: Child
) -> None:
    out = tmp_path / "r.json"
    child = run_child(["-m", "mlbaseline", command, "--set", setting, "-o", str(out)])
    lines = child.output.splitlines()
    assert child.code == 2 and len(lines) == 1, child.output
    name = setting.split("=")[0]
    assert lines[0].startswith(f"Error: {name}: 1000000000 × 3×"), lines[0]
    assert "GiB available" in lines[0]
    assert_bounded(child, import_baseline)
    assert not out.exists()


# ---------------------------------------------------------------- names that are not UTF-8


def _tree_with_non_utf8_names(root: Path) -> list[str]:
    """A 4-class JPEG tree plus a class folder and a file whose names are not UTF-8 bytes."""
    from mlbaseline.workloads.synthetic import write_image_tree

    paths = write_image_tree(root, 48, num_classes=4, size=16, seed=1, fmt="jpeg")
    bad_class = os.path.join(os.fsencode(root), b"dog\xff")
    os.mkdir(bad_class)
    for name in (b"a.jpg", b"b.jpg"):
        with open(os.path.join(bad_class, name), "wb") as fh:
            fh.write(Path(paths[0]).read_bytes())
    first_class = os.fsencode(Path(paths[0]).parent)
    with open(os.path.join(first_class, b"caf\xe9.jpg"), "wb") as fh:
        fh.write(Path(paths[1]).read_bytes())
    return ["b'dog\\xff'", f"b'{Path(paths[0]).parent.name}/caf\\xe9.jpg'"]


@pytest.mark.parametrize(
    "command",
    [pytest.param("subset", id="subset"), pytest.param("dataloader", id="dataloader")],
)
def test_non_utf8_names_never_crash(command: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shown = _tree_with_non_utf8_names(data)
    if command == "subset":
        args = ["subset", str(data), "-o", str(tmp_path / "sub"), "--n", "8", "--json"]
    else:
        args = ["dataloader", "--data-dir", str(data), "--no-cold", "--workers", "0", "--json"]
        args += [
            "--batches",
            "2",
            "--set",
            "golden.batch_size=4",
            "--set",
            "workload.image_size=16",
        ]
        args += ["--set", "dataloader.persistent_epochs=0"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output  # measured (a verdict may fail), never a crash
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    doc = json.loads(res.stdout)
    if command == "subset":  # skipped, and each one named in a warning, escaped
        warning = next(w for w in doc["warnings"] if w["code"] == "non_utf8_names")
        assert warning["names"] == sorted(shown)
        assert doc["data"]["index"]["classes"] == 4
