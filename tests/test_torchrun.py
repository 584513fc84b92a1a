"""`mlb throughput` as the ranks of an external torchrun: detection, checks, the node layout
in the fingerprint, and a real 2-"node" run (two torchrun invocations on 127.0.0.1, gloo)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mlbaseline.comparison.matching import environment_differences
from mlbaseline.config import resolve
from mlbaseline.errors import UsageError
from mlbaseline.measure.step import DIST_STAGES
from mlbaseline.report.markdown import render_markdown
from mlbaseline.report.render import build_context
from mlbaseline.results import Result
from mlbaseline.runners.distributed import (
    TorchrunEnv,
    check_torchrun,
    record_layout,
    torchrun_env,
)

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
}


def test_torchrun_env_read_from_the_five_variables():
    launch = torchrun_env({**ENV, "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job7"})
    assert launch == TorchrunEnv(3, 4, 1, 1, 2, 2, "job7")
    # without GROUP_WORLD_SIZE the nodes are taken as equal in size
    assert torchrun_env(ENV).nnodes == 2


@pytest.mark.parametrize("missing", sorted(ENV))
def test_no_torchrun_without_all_five(missing):
    assert torchrun_env({k: v for k, v in ENV.items() if k != missing}) is None
    assert torchrun_env({}) is None


def test_torchrun_env_with_garbage_is_bad_input():
    with pytest.raises(UsageError, match="torchrun environment: expected integers"):
        torchrun_env({**ENV, "RANK": "x"})


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"throughput.nproc": 2}, "throughput.nproc: 2 under torchrun"),
        ({"throughput.repeats": 2}, "throughput.repeats: fresh-process replicates"),
        ({"throughput.trace": True}, "the profiler window is for one process, not torchrun"),
    ],
)
def test_no_second_launcher_under_torchrun(over, message):
    cfg = resolve(None, "demo", over)
    check_torchrun(cfg, None)  # not under torchrun: nothing to say
    with pytest.raises(UsageError, match=message):
        check_torchrun(cfg, torchrun_env(ENV))


def test_node_layout_is_a_blocking_key():
    def result(nnodes: int, per_node: int, hosts: list[str]) -> Result:
        r = Result(kind="throughput", config={})
        r.environment = {"blocking": {"device": "cpu"}, "informational": {}}
        record_layout(r, nnodes, per_node, hosts)
        return r

    two_nodes = result(2, 1, ["a", "b"])
    blocking, _ = environment_differences(two_nodes, result(1, 2, ["a", "a"]))
    assert {row["key"] for row in blocking} == {
        "node_layout.nnodes",
        "node_layout.nproc_per_node",
    }
    # the same layout on other hosts stays comparable; the hostnames are only informational
    blocking, info = environment_differences(two_nodes, result(2, 1, ["c", "d"]))
    assert blocking == [] and any(r["key"].startswith("hostnames_by_rank") for r in info)


# ---------------------------------------------------------------- a real 2-node run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


MLB_ARGS = [
    "throughput",
    "--profile",
    "demo",
    "--batch-sizes",
    "4",
    "--mode",
    "both",
    "--quiet",
    "-o",
    "tp.json",
    *("--set", "workload.model=builtin:tiny_cnn", "--set", "workload.image_size=16"),
    *("--set", "golden.subset_size=64", "--set", "throughput.min_time_s=0"),
    *("--set", "throughput.min_steps=4", "--set", "throughput.max_steps=4"),
    *("--set", "throughput.window=2", "--set", "throughput.warmup_min=1"),
    *("--set", "throughput.warmup_max=2", "--set", "throughput.telemetry=false"),
]


class TwoNodes:
    """Two torchrun invocations (2 nodes × 1 process) rendezvousing on 127.0.0.1, each in its
    own folder (two "machines": no shared file system), their output read by threads."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        port = _free_port()
        self.written = threading.Event()  # a rank 0 said "result written to"
        self.ended = threading.Event()  # one torchrun closed its output (it is exiting)
        self.done: list[subprocess.Popen] = []
        self.procs, self.logs, self.readers = [], [], []
        for node in (0, 1):
            cwd = tmp_path / f"node{node}"
            cwd.mkdir()
            launcher = [
                *_torchrun(),
                *("--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node)),
                *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
                *("--rdzv-conf", "join_timeout=60", "--max-restarts", "0"),
            ]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [ROOT, ROOT / "tests"]))}
            proc = subprocess.Popen(
                [*launcher, "-m", "mlbaseline", *args],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: killed whole at the end
            )
            self.procs.append(proc)
            self.logs.append([])
            reader = threading.Thread(target=self._read, args=(proc, self.logs[-1]), daemon=True)
            reader.start()
            self.readers.append(reader)

    def _read(self, proc: subprocess.Popen, lines: list[str]) -> None:
        for line in proc.stdout:
            lines.append(line)
            if "result written to" in line:
                self.written.set()
        self.done.append(proc)
        self.ended.set()

    def log(self) -> str:
        return "\n".join("".join(lines) for lines in self.logs)

    def wait(self, timeout: float = 240) -> list[int | None]:
        for reader in self.readers:
            reader.join(timeout)
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(30))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def results(self, tmp_path: Path) -> list[Path]:
        return [f for f in (tmp_path / f"node{n}" / "tp.json" for n in (0, 1)) if f.exists()]


@pytest.mark.slow
def test_two_torchrun_nodes_pool_into_one_result_on_rank_0(tmp_path):
    nodes = TwoNodes(tmp_path, MLB_ARGS)
    try:
        codes = nodes.wait()
    finally:
        nodes.kill()
    assert codes == [0, 0], nodes.log()
    written = nodes.results(tmp_path)
    assert len(written) == 1, "only rank 0 writes the result"
    doc = json.loads(written[0].read_text())
    d = doc["data"]["distributed"]
    assert d["launcher"] == "torchrun (external)" and d["backend"] == "gloo"
    assert (d["nnodes"], d["nproc_per_node"], d["world_size"]) == (2, 1, 2)
    assert sorted(r["group_rank"] for r in d["ranks"]) == [0, 1]
    assert doc["environment"]["blocking"]["node_layout"] == {
        "nnodes": 2,
        "nproc_per_node": 1,
        "world_size": 2,
    }
    assert len(doc["environment"]["informational"]["hostnames_by_rank"]) == 2
    ms = doc["measurements"]
    step = ms["train.bs4.step"]
    assert step["meta"]["stages"] == list(DIST_STAGES)
    assert step["rank"] == [0] * 4 + [1] * 4  # every rank of every node, in rank order
    assert all(v > 0 for v in ms["train.bs4.grad_sync"]["values"])
    assert sorted(set(ms["train.bs4.ddp.step"]["rank"])) == [0, 1]
    entry = doc["data"]["batch_sizes"]["4"]
    assert entry["train"]["ranks"] == [0, 1] and "inference" in entry  # inference: rank 0


@pytest.mark.slow
def test_a_failing_rank_ends_the_run_and_rank_0_keeps_what_was_pooled(tmp_path):
    # both ranks run out of memory at batch size 8 (a fake OOM above 4): the run stops there
    args = [
        *(a for a in MLB_ARGS if a not in ("--quiet",)),
        *("--batch-sizes", "2,8,4", "--mode", "train", "--set", "throughput.sync_mode=allreduce"),
        *("--set", "workload.model=workloads_slow:slow_model"),
        *("--set", "workload.model_kwargs={oom_above: 4}"),
        *("--set", "workload.dataset=workloads_slow:slow_dataset"),
        *("--set", "workload.dataset_kwargs={n: 64}"),
    ]
    nodes = TwoNodes(tmp_path, args)
    try:
        # rank 0 writes before torchrun's exit barrier, where its agent waits for the failed
        # node's agent (torchrun's own 300 s): the test ends both then
        assert nodes.written.wait(240), nodes.log()
        assert nodes.ended.wait(60), nodes.log()
        first = nodes.done[0].wait(30)  # the node whose rank failed
    finally:
        nodes.kill()
    assert first == 1, nodes.log()
    assert "Error: rank 1: OutOfMemoryError" in nodes.log()
    (written,) = nodes.results(tmp_path)
    doc = json.loads(written.read_text())
    sizes = doc["data"]["batch_sizes"]
    assert sizes["2"]["status"] == "ok" and sizes["2"]["train"]["ranks"] == [0, 1]
    assert sizes["8"]["status"] == "oom"
    assert sizes["4"]["status"] == "error" and "not measured" in sizes["4"]["train"]["error"]
    stopped = [w for w in doc["warnings"] if w["code"] == "torchrun_stopped"]
    assert len(stopped) == 1 and stopped[0]["batch_size"] == 8
    assert sorted(set(doc["measurements"]["train.bs2.step"]["rank"])) == [0, 1]


def test_the_report_shows_the_nodes():
    r = Result(kind="throughput", config={})
    r.environment = {"blocking": {"device": "cpu"}, "informational": {}}
    record_layout(r, 2, 1, ["a", "b"])
    assert "2 × 1 processes (a, b)" in render_markdown(build_context([r]))
