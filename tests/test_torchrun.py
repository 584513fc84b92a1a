"""`mlb throughput` as the ranks of an external torchrun: detection, checks, the node layout
in the fingerprint, and a real 2-"node" run (two torchrun invocations on 127.0.0.1, gloo)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mlbaseline.comparison.matching import environment_differences
from mlbaseline.config import resolve
from mlbaseline.errors import UsageError
from mlbaseline.measure.step import DIST_STAGES
from mlbaseline.results import Result
from mlbaseline.runners.distributed import (
    TorchrunEnv,
    check_torchrun,
    record_layout,
    torchrun_env,
)

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


@pytest.mark.slow
def test_two_torchrun_nodes_pool_into_one_result_on_rank_0(tmp_path):
    port = _free_port()
    procs = []
    for node in (0, 1):
        cwd = tmp_path / f"node{node}"  # two "machines": no shared folder
        cwd.mkdir()
        launcher = [
            *_torchrun(),
            *("--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node)),
            *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
            *("--rdzv-conf", "join_timeout=60", "--max-restarts", "0"),
        ]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
        procs.append(
            subprocess.Popen(
                [*launcher, "-m", "mlbaseline", *MLB_ARGS],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: killed whole on a timeout
            )
        )
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    written = [tmp_path / f"node{n}" / "tp.json" for n in (0, 1)]
    assert sum(p.exists() for p in written) == 1, "only rank 0 writes the result"
    doc = json.loads(next(p for p in written if p.exists()).read_text())
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
