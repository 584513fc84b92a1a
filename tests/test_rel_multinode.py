"""Multi-node (docs/RELIABILITY.md 5.4): two torchrun "nodes" (two torchrun invocations
rendezvousing on 127.0.0.1, gloo, CPU) started in ONE folder, as docs/REFERENCE.md shows: only
rank 0 writes, and a rank that fails ends the run on every node within a bounded time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from test_torchrun import MLB_ARGS, ROOT, _free_port, _torchrun

from mlbaseline.runners.torchrun import GRACE_S, WATCH_EVERY_S

START_S = 240  # two torch imports and a rendezvous on a busy 2-core machine
# a node ends this long after the other failed: the watchdog's poll and grace, torchrun's
# agent, and slack for the machine (without the watchdog it waited 300 s, then the barrier)
BOUND_S = WATCH_EVERY_S + GRACE_S + 60


def _clean(args: list[str]) -> list[str]:
    """MLB_ARGS less `--set throughput.telemetry=false`: the telemetry CSV on, the file the
    second node used to refuse as "already exists"."""
    out: list[str] = []
    for a in args:
        if a == "throughput.telemetry=false":
            out.pop()  # its --set
            continue
        out.append(a)
    return [*out, "--no-history"]


def _node(folder: Path, node: int, port: int, args: list[str]) -> subprocess.Popen[str]:
    launcher = [
        *_torchrun(),
        *("--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node)),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
        *("--rdzv-conf", "join_timeout=60", "--max-restarts", "0"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [ROOT, ROOT / "tests"]))}
    env["MLB_HISTORY"] = ""
    return subprocess.Popen(
        [*launcher, "-m", "mlbaseline", *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: killed whole if the test fails
    )


def _finish(procs: list[subprocess.Popen[str]], timeout: float) -> list[tuple[int | None, str]]:
    """Each node's exit code (None: still running after `timeout`) and output."""
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
            out.append((p.returncode, text))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            text, _ = p.communicate()
            out.append((None, text))
    return out


@pytest.mark.slow
def test_two_nodes_in_one_folder_only_rank_0_writes(tmp_path: Path):
    port = _free_port()
    procs = [_node(tmp_path, n, port, _clean(MLB_ARGS)) for n in (0, 1)]
    (code0, log0), (code1, log1) = _finish(procs, START_S)
    assert (code0, code1) == (0, 0), log0 + log1
    assert "already exists" not in log0 + log1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tp.json", "tp.telemetry.csv"]
    doc = json.loads((tmp_path / "tp.json").read_text())
    assert doc["status"] == "complete"
    assert sorted(set(doc["measurements"]["train.bs4.step"]["rank"])) == [0, 1]


@pytest.mark.slow
def test_a_node_that_fails_early_ends_the_other_within_the_bound(tmp_path: Path):
    # node 1 is given a config error: it fails before it joins the process group, where the
    # other node's rank waits for it (before: 300 s of the process group's timeout, then
    # torchrun's exit barrier, in practice a hang until SIGKILL)
    port = _free_port()
    good = _node(tmp_path, 0, port, _clean(MLB_ARGS))
    bad = _node(tmp_path, 1, port, [*_clean(MLB_ARGS), "--set", "throughput.min_steps=-1"])
    ((bad_code, bad_log),) = _finish([bad], START_S)
    ((good_code, good_log),) = _finish([good], BOUND_S)
    assert bad_code == 1 and "Error: throughput.min_steps" in bad_log, bad_log
    assert good_code == 1, good_log  # ended (None: still running after the bound)
    assert "stopped because another rank failed" in good_log and "min_steps" in good_log
    assert not (tmp_path / "tp.json").exists()  # nothing was measured: no result
