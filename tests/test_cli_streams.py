"""A reader that leaves (`mlb … 2>&1 | head -4`) costs the run nothing: the screen's output is
dropped once nobody reads it, and the result is still written."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlbaseline.cli.streams import ScreenStream


class GoneReader(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_the_screen_drops_what_a_gone_reader_would_have_read(monkeypatch: pytest.MonkeyPatch):
    silenced = []
    monkeypatch.setattr("mlbaseline.cli.streams.silence", silenced.append)
    screen = ScreenStream()
    live = io.StringIO()
    monkeypatch.setattr(sys, "stderr", live)
    screen.write("read\n")
    assert live.getvalue() == "read\n" and not screen.gone
    gone = GoneReader()
    monkeypatch.setattr(sys, "stderr", gone)
    assert screen.write("lost\n") == 5  # no exception: the run goes on
    assert screen.gone and silenced == [gone]
    screen.write("more\n")
    screen.flush()
    assert silenced == [gone]  # once


TINY = ["--profile", "demo", "--set", "workload.model=builtin:tiny_mlp"]
TINY += ["--set", "workload.image_size=8", "--set", "workload.dataset_size=32"]
TINY += ["--set", "throughput.warmup_min=1", "--batch-sizes", "4", "--repeats", "1"]


def test_a_run_whose_reader_left_still_writes_its_result(tmp_path: Path):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write meets EPIPE
    out = tmp_path / "t.json"
    cmd = [sys.executable, "-m", "mlbaseline", "throughput", *TINY, "--no-history", "-o", out]
    try:
        done = subprocess.run(cmd, stdout=write, stderr=write, cwd=tmp_path, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 0
    assert out.is_file() and out.with_suffix(".telemetry.csv").is_file()
