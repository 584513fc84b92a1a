"""Multi-process training throughput (`--nproc N`) through torch.distributed's own launcher API
(`torch.distributed.launcher.api.elastic_launch`, what `torchrun` uses), gloo on CPU and NCCL on
GPU, the model wrapped in DDP.

Gradient sync is timed two ways, as two metric groups:
- explicit all-reduce (`train.bs{B}`, stage `grad_sync`): forward and backward under
  `model.no_sync()` (no DDP hooks fire), then one all-reduce of all gradients as one flat tensor,
  timed on its own; the all-reduce bus bandwidth is gradient bytes / time × 2(n−1)/n;
- DDP's overlapped mode (`train.bs{B}.ddp`): plain DDP, the all-reduce overlapping backward; its
  step time is the second figure (there is no separate sync stage to time).

Every rank measures; rank 0 takes the warm-up and stop decisions and broadcasts them each step so
that all ranks run the same number of steps. Each rank writes its raw values to a file after each
batch size (so a crash or Ctrl-C loses at most the size in progress); the parent pools them into
one result with rank ids. A failure at one batch size (OOM in any rank) is recorded and the sweep
is relaunched from the next size.

Under an external `torchrun` (one or many nodes: `torchrun_env()` finds RANK, WORLD_SIZE,
LOCAL_RANK, GROUP_RANK and LOCAL_WORLD_SIZE), `mlb throughput` is itself one rank
(`train_torchrun`): the same worker core measures each batch size, the ranks' raw values are
gathered to rank 0 over torch.distributed after each size (no shared file system needed) and
pooled there; only rank 0 writes the result. The node layout is a blocking fingerprint key.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from mlbaseline import scratch
from mlbaseline.config import Config, build
from mlbaseline.envinfo import usable_cpus
from mlbaseline.measure.loop import STOP_REASONS, Decision
from mlbaseline.measure.pooling import group_summary, pool_metrics
from mlbaseline.measure.step import DIST_STAGES, TRAIN_STAGES, is_oom, short_error
from mlbaseline.results import Metric
from mlbaseline.runners.sweep import SweepState, train_one_size
from mlbaseline.runners.throughput_records import SizeRecord
from mlbaseline.runners.torchrun import RankFailedError as RankFailedError
from mlbaseline.runners.torchrun import TorchrunEnv as TorchrunEnv
from mlbaseline.runners.torchrun import Watchdog
from mlbaseline.runners.torchrun import check_torchrun as check_torchrun
from mlbaseline.runners.torchrun import record_layout as record_layout
from mlbaseline.runners.torchrun import torchrun_env as torchrun_env
from mlbaseline.safewrite import write_text
from mlbaseline.workloads.factory import build_dataset

SYNC_MODES = {"allreduce": ("allreduce",), "ddp": ("ddp",), "both": ("allreduce", "ddp")}
PART = {"allreduce": "train", "ddp": "train_ddp"}
_STOP_CODES = (None, *STOP_REASONS)
PROGRESS_EVERY_S = 0.2


# ---------------------------------------------------------------- inside a worker


class FlatAllReduce:
    """All gradients as one flat tensor, one all-reduce, averaged, copied back."""

    def __init__(self, model: nn.Module, world_size: int) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.numels = [p.numel() for p in self.params]
        self.nbytes = sum(p.numel() * p.element_size() for p in self.params)
        self.world_size = world_size

    def __call__(self) -> None:
        import torch.distributed as dist

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        for p, chunk in zip(self.params, flat.split(self.numels), strict=True):
            if p.grad is None:
                p.grad = chunk.view_as(p).clone()
            else:
                p.grad.copy_(chunk.view_as(p))


class AllReduceParallel:
    """DDP-wrapped model, DDP hooks off (`no_sync`), explicit timed all-reduce."""

    suffix = ""
    stages = DIST_STAGES

    def __init__(
        self,
        rank: int,
        world_size: int,
        device: str,
        seed: int,
        interrupted: Callable[[], bool] = lambda: False,
    ) -> None:
        self.rank, self.world_size, self.device, self.seed = rank, world_size, device, seed
        self.interrupted = interrupted

    def wrap(self, model: nn.Module, device: str) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        if device.startswith("cuda"):
            return DDP(model, device_ids=[torch.device(device).index])
        return DDP(model)

    def sampler(self, dataset: Any) -> Any:
        from torch.utils.data.distributed import DistributedSampler

        return DistributedSampler(
            dataset, self.world_size, self.rank, shuffle=True, seed=self.seed, drop_last=True
        )

    def grad_sync(self, model: nn.Module) -> FlatAllReduce | None:
        return FlatAllReduce(model, self.world_size)

    def no_sync(self, model: nn.Module) -> Any:
        return model.no_sync()  # type: ignore[operator]

    def agree(self, decision: Decision) -> Decision:
        """Rank 0's decision, broadcast (outside the timed step). A Ctrl-C becomes a
        decision too, so that every rank stops at the same step instead of one rank waiting
        forever in a collective the others left."""
        import torch.distributed as dist

        if self.rank == 0 and self.interrupted():
            decision = Decision(decision.warmup, decision.warmup_capped, "interrupted")
        code = _STOP_CODES.index(decision.stop)
        warm = -1 if decision.warmup is None else decision.warmup
        t = torch.tensor([warm, int(decision.warmup_capped), code], dtype=torch.int64)
        t = t.to(self.device)
        dist.broadcast(t, src=0)
        warm, capped, code = (int(v) for v in t.tolist())
        return Decision(None if warm < 0 else warm, bool(capped), _STOP_CODES[code])


class DdpParallel(AllReduceParallel):
    """Plain DDP: the all-reduce overlaps backward; no separate sync stage."""

    suffix = ".ddp"
    stages = TRAIN_STAGES

    def grad_sync(self, model: nn.Module) -> FlatAllReduce | None:
        return None

    def no_sync(self, model: nn.Module) -> Any:
        return contextlib.nullcontext()


PARALLEL = {"allreduce": AllReduceParallel, "ddp": DdpParallel}


def _progress_writer(path: Path, batch_size: int, mode: str) -> Callable[[int, bool], None]:
    last = [0.0]

    def on_step(n: int, measuring: bool) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        doc = {"batch_size": batch_size, "mode": mode, "steps": n, "measuring": measuring}
        with contextlib.suppress(OSError):
            write_text(path, json.dumps(doc), force=True)

    return on_step


@record
def _worker(cfg_doc: dict[str, Any], device_kind: str, sizes: list[int], out_dir: str) -> dict:
    """One rank: measure every (batch size, sync mode), writing its raw values after each."""
    import torch.distributed as dist

    cfg: Config = build(Config, cfg_doc)
    payload, backend = _rank_setup(cfg, device_kind)
    # Ctrl-C (from the terminal or the agent) sets a flag; rank 0 turns it into a stop decision
    flag = {"interrupted": False}
    signal.signal(signal.SIGINT, lambda *_: flag.__setitem__("interrupted", True))
    timeout = timedelta(seconds=max(300.0, 4 * cfg.throughput.max_time_s))
    dist.init_process_group(backend, timeout=timeout)
    try:
        _measure_sizes(cfg, sizes, Path(out_dir), payload, lambda: flag["interrupted"])
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    if flag["interrupted"]:
        # The agent is shutting down and will not collect a return value (the worker would
        # wait for it until killed); the raw values are saved, so leave now.
        os._exit(130)
    return payload


def _rank_setup(cfg: Config, device_kind: str) -> tuple[dict[str, Any], str]:
    """This rank's device and thread share; (its payload, the process-group backend)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    if device_kind == "cuda":
        torch.cuda.set_device(local)
        device, backend = f"cuda:{local}", "nccl"
    else:
        device, backend = "cpu", "gloo"
    # the processes of one node share its CPUs: one thread share each unless the config says
    # otherwise (LOCAL_WORLD_SIZE: the processes on this node; torchrun and the launcher set it)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    threads = cfg.workload.threads or max(1, usable_cpus() // local_world)
    torch.set_num_threads(threads)
    payload: dict[str, Any] = {
        "rank": rank,
        "world_size": world,
        "local_rank": local,
        "group_rank": int(os.environ.get("GROUP_RANK", 0)),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "device": device,
        "backend": backend,
        "threads": threads,
        "runs": [],
    }
    return payload, backend


def _measure_sizes(
    cfg: Config,
    sizes: list[int],
    out: Path,
    payload: dict[str, Any],
    interrupted: Callable[[], bool],
) -> None:
    """Every (batch size, sync mode) in turn, until done, a failure or Ctrl-C."""
    rank, world, device = payload["rank"], payload["world_size"], payload["device"]
    spec = build_dataset(cfg)
    for batch_size in sizes:
        if _any_rank(interrupted(), device):
            return
        for mode in SYNC_MODES[cfg.throughput.sync_mode]:
            par = PARALLEL[mode](rank, world, device, cfg.golden.seed, interrupted)
            on_step = _progress_writer(out / "progress.json", batch_size, mode)
            record: dict[str, Any] = {"batch_size": batch_size, "mode": mode}
            try:
                run = train_one_size(
                    cfg, spec, batch_size, device, par, on_step=on_step if rank == 0 else None
                )
            except Exception as exc:
                record.update(status="oom" if is_oom(exc) else "error", error=short_error(exc))
                payload["runs"].append(record)
                _save(out, payload)
                raise  # the agent stops the other ranks; the parent relaunches after this size
            record.update(status="ok", metrics=[asdict(m) for m in run.metrics()], info=run.info())
            payload["runs"].append(record)
            _save(out, payload)
            if run.loop.stop_reason == "interrupted":
                return


def _any_rank(flag: bool, device: str) -> bool:
    import torch.distributed as dist

    t = torch.tensor([int(flag)], dtype=torch.int64).to(device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _save(out: Path, payload: dict[str, Any]) -> None:
    write_text(out / f"rank{payload['rank']}.json", json.dumps(payload), force=True)


# ---------------------------------------------------------------- in the parent


def _launch(cfg: Config, device: str, sizes: list[int], out: Path) -> tuple[str | None, bool]:
    """Run the workers once; returns (error or None, interrupted)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=cfg.throughput.nproc,
        run_id=f"mlb-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # standalone: a free local port
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        shutdown_timeout=10,
        logs_specs=DefaultLogsSpecs(log_dir=str(out / "logs"), redirects=Std.ALL),
    )
    kind = "cuda" if device.startswith("cuda") else "cpu"
    try:
        elastic_launch(config, _worker)(cfg.to_dict(), kind, sizes, str(out))
    except ChildFailedError as exc:
        return _failure_text(exc), False
    except (KeyboardInterrupt, SignalException):
        return None, True
    return None, False


def _failure_text(exc: Any) -> str:
    failures = getattr(exc, "failures", {}) or {}
    for failure in failures.values():
        message = getattr(failure, "message", "") or ""
        if isinstance(message, dict):
            message = message.get("message", "")
        line = str(message).strip().splitlines()
        if line:
            return f"rank {failure.local_rank} exited {failure.exitcode}: {line[-1][:300]}"
        return f"rank {failure.local_rank} exited with code {failure.exitcode}"
    return short_error(exc)


class _Poller:
    """Follow rank 0's progress file from a thread (the launcher owns the main thread)."""

    def __init__(self, path: Path, task: Any) -> None:
        self.path, self.task = path, task
        self.stop = threading.Event()
        self.steps, self.key = 0, None
        self.thread = threading.Thread(target=self._run, name="mlb-dist-progress", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(PROGRESS_EVERY_S):
            try:
                doc = json.loads(self.path.read_text())
            except (OSError, ValueError):
                continue
            key = (doc["batch_size"], doc["mode"], doc["measuring"])
            if key != self.key:
                phase = "measuring" if doc["measuring"] else "warm-up"
                self.task.update(description=f"train bs{doc['batch_size']} {doc['mode']}: {phase}")
                if key[:2] != (self.key or (None, None))[:2]:
                    self.steps = 0
                self.key = key
            self.task.advance(max(0, doc["steps"] - self.steps))
            self.steps = max(self.steps, doc["steps"])

    def __enter__(self) -> _Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _read_payloads(out: Path, world: int) -> list[dict[str, Any]]:
    payloads = []
    for rank in range(world):
        path = out / f"rank{rank}.json"
        try:
            payloads.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return payloads


def train_distributed(run: SweepState) -> None:
    """Measure every batch size with `nproc` processes; pool the ranks into `run.records`.
    Raises KeyboardInterrupt after recording what was measured if Ctrl-C stopped it."""
    cfg, records = run.cfg, run.records
    world = cfg.throughput.nproc
    remaining = list(cfg.throughput.batch_sizes)
    record_layout(records.facts, 1, world, [socket.gethostname()] * world)
    launches: list[dict[str, Any]] = []
    records.blocks["distributed"] = {
        "launcher": "torch.distributed.launcher.api.elastic_launch",
        "backend": "nccl" if run.device.startswith("cuda") else "gloo",
        "world_size": world,
        "sync_modes": list(SYNC_MODES[cfg.throughput.sync_mode]),
        "decisions": "rank 0's warm-up and stop decisions, broadcast each step",
        "busbw_factor": "2(n-1)/n",
        "launches": launches,
    }
    with (
        scratch.folder("dist") as tmp,
        run.progress.task(f"train, {world} processes", total=None) as task,
    ):
        attempt = 0
        while remaining:
            out = Path(tmp) / f"launch{attempt}"
            out.mkdir()
            with _Poller(out / "progress.json", task):
                error, interrupted = _launch(cfg, run.device, remaining, out)
            payloads = _read_payloads(out, world)
            done = _pool(run, payloads, world)
            launches.append(
                {
                    "sizes": remaining,
                    "error": error,
                    "ranks": [{k: p[k] for k in ("rank", "pid", "device", "threads")}
                              for p in payloads],
                }
            )  # fmt: skip
            if interrupted or _was_interrupted(payloads):
                raise KeyboardInterrupt
            if error is None:
                return
            failed = next((b for b in remaining if b not in done), None)
            if failed is None:
                return
            if not any(
                run.size(failed).parts.get(PART[m]) for m in SYNC_MODES[cfg.throughput.sync_mode]
            ):
                run.failed(failed, "train", RuntimeError(error))
            remaining = remaining[remaining.index(failed) + 1 :]
            attempt += 1


def _was_interrupted(payloads: list[dict[str, Any]]) -> bool:
    return any(
        r.get("info", {}).get("stop_reason") == "interrupted"
        for p in payloads
        for r in p.get("runs", [])
    )


def _pool(run: SweepState, payloads: list[dict[str, Any]], world: int) -> set[int]:
    """Pool each (batch size, mode) over ranks; returns the batch sizes fully measured."""
    if not payloads:
        return set()
    modes = SYNC_MODES[run.cfg.throughput.sync_mode]
    by_key: dict[tuple[int, str], list[tuple[int, dict[str, Any]]]] = {}
    for p in payloads:
        for r in p["runs"]:
            by_key.setdefault((r["batch_size"], r["mode"]), []).append((p["rank"], r))
    complete: dict[int, int] = {}
    for (batch_size, mode), recs in by_key.items():
        bad = next((r for _, r in recs if r["status"] != "ok"), None)
        if bad is not None:
            exc = (
                MemoryError(bad["error"]) if bad["status"] == "oom" else RuntimeError(bad["error"])
            )
            run.failed(batch_size, PART[mode], exc)
            continue
        if len(recs) < world:
            continue  # a rank did not finish this size: the launcher error covers it
        metrics = pool_metrics(
            [(rank, {m["name"]: Metric(**m) for m in r["metrics"]}) for rank, r in recs], "rank"
        )
        for m in metrics.values():
            run.records.add_metric(m)
        info0 = next(r for rank, r in recs if rank == 0)["info"]
        prefix = f"train.bs{batch_size}{PARALLEL[mode].suffix}"
        size = run.size(batch_size)
        size.parts[PART[mode]] = {
            **group_summary(run.records.metrics, prefix),
            **info0,
            "peak_memory_bytes": max(r["info"]["peak_memory_bytes"] for _, r in recs),
            "peak_memory_bytes_per_rank": {str(k): r["info"]["peak_memory_bytes"] for k, r in recs},
            "ranks": sorted(k for k, _ in recs),
        }
        busbw = run.records.metrics.get(f"{prefix}.allreduce_busbw")
        if busbw is not None and busbw.values:
            from mlbaseline import stats

            size.parts[PART[mode]]["allreduce_busbw_Bps"] = stats.summarize(busbw.values).median
        if mode == "allreduce" or size.stop_reason is None:
            size.stop_reason = info0["stop_reason"]
        if info0["stop_reason"] == "interrupted":
            size.status = "interrupted"
        complete[batch_size] = complete.get(batch_size, 0) + 1
        _overlap(size)
    return {b for b, n in complete.items() if n == len(modes)}


def _overlap(size: SizeRecord) -> None:
    """DDP's overlapped step next to the explicit all-reduce step."""
    a, d = size.parts.get("train"), size.parts.get("train_ddp")
    if not (isinstance(a, dict) and isinstance(d, dict) and a.get("n") and d.get("n")):
        return
    sa, sd = a["time_s"]["median"], d["time_s"]["median"]
    size.ddp_overlap = {
        "allreduce_step_s": sa,
        "ddp_step_s": sd,
        "ddp_over_allreduce": sd / sa if sa else None,
        "grad_sync_s": a.get("stage_median_s", {}).get("grad_sync"),
        "meaning": "DDP overlaps the all-reduce with backward; the difference between the two "
        "step times is the sync time that overlap hid",
    }


# ---------------------------------------------------------------- under an external torchrun


def _handle_stop_signals(flag: dict[str, bool]) -> dict[int, Any]:
    """Ctrl-C reaches every rank of a node, and torchrun's agent then sends SIGTERM: both
    become a flag that rank 0 turns into a stop decision (and every rank checks before each
    batch size), so the ranks leave at the same step and rank 0 still pools and writes."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: flag.__setitem__("interrupted", True))
    return previous


def train_torchrun(run: SweepState, launch: TorchrunEnv) -> bool:
    """Measure every batch size as one rank of an external torchrun; rank 0 pools every rank
    of every node into `run.records`. Returns whether this process is rank 0 (only rank 0 goes
    on to inference and writes the result). Raises KeyboardInterrupt on rank 0 after pooling
    if Ctrl-C stopped it; RankFailedError on another rank that failed."""
    import torch.distributed as dist

    cfg = run.cfg
    payload, backend = _rank_setup(cfg, "cuda" if run.device.startswith("cuda") else "cpu")
    flag = {"interrupted": False}
    previous = _handle_stop_signals(flag)
    timeout = timedelta(seconds=max(300.0, 4 * cfg.throughput.max_time_s))
    # a peer's failure ends this rank within a bounded time, even blocked in a collective
    dog = Watchdog(launch).__enter__()
    gathered: list[dict[str, Any]] = []
    error = None
    try:
        dist.init_process_group(backend, timeout=timeout)
        ranks = _gather({k: payload[k] for k in payload if k != "runs"}, launch, all_ranks=True)
        _describe_torchrun(run, launch, backend, ranks)
        with scratch.folder("torchrun") as tmp:
            for batch_size in cfg.throughput.batch_sizes:
                _measure_sizes(cfg, [batch_size], Path(tmp), payload, lambda: flag["interrupted"])
                gathered = _gather(payload, launch)
                if _was_interrupted([payload]):
                    break
    except Exception as exc:  # OOM or a crash here, or a peer that left a collective
        why = short_error(exc) if dog.failure is None else f"another rank failed: {dog.failure}"
        if launch.rank != 0:
            raise RankFailedError(f"rank {launch.rank}: {why}") from exc
        error = why
    finally:
        dog.stop()
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if launch.rank != 0:
        return False
    # rank 0's own latest part replaces its gathered one: it holds the size that failed
    parts = sorted([p for p in gathered if p["rank"] != 0] + [payload], key=lambda p: p["rank"])
    _pool(run, parts, launch.world_size)
    if error is not None:
        _stopped_by(run, error)
    if _was_interrupted([payload]):
        raise KeyboardInterrupt
    return True


def _gather(obj: Any, launch: TorchrunEnv, all_ranks: bool = False) -> list[Any]:
    """Every rank's `obj` (a picklable dict) on rank 0 (`all_ranks`: on every rank), in rank
    order, over the process group: ranks on other nodes share no file system."""
    import torch.distributed as dist

    out: list[Any] = [None] * launch.world_size
    if all_ranks:
        dist.all_gather_object(out, obj)
        return out
    dist.gather_object(obj, out if launch.rank == 0 else None, dst=0)
    return out if launch.rank == 0 else []


def _describe_torchrun(
    run: SweepState, launch: TorchrunEnv, backend: str, ranks: list[dict[str, Any]]
) -> None:
    world = launch.world_size
    hostnames = [r["hostname"] for r in ranks]
    facts = run.records.facts
    record_layout(facts, launch.nnodes, launch.local_world_size, hostnames)
    facts.nproc, facts.stages = world, list(DIST_STAGES)
    keys = ("rank", "group_rank", "local_rank", "hostname", "pid", "device", "threads")
    run.records.blocks["distributed"] = {
        "launcher": "torchrun (external)",
        "run_id": launch.run_id,
        "backend": backend,
        "world_size": world,
        "nnodes": launch.nnodes,
        "nproc_per_node": launch.local_world_size,
        "sync_modes": list(SYNC_MODES[run.cfg.throughput.sync_mode]),
        "decisions": "rank 0's warm-up and stop decisions, broadcast each step",
        "pooling": "every rank's raw values gathered to rank 0 (gather_object) after each "
        "batch size",
        "busbw_factor": "2(n-1)/n",
        "ranks": [{k: r[k] for k in keys} for r in ranks],
    }


def _stopped_by(run: SweepState, error: str) -> None:
    """A failure ends a torchrun measurement on every node (it cannot be relaunched from the
    next size as the own launcher does): record where, and what was not measured."""
    sizes = list(run.cfg.throughput.batch_sizes)
    modes = SYNC_MODES[run.cfg.throughput.sync_mode]

    def pooled(b: int) -> bool:
        size = run.records.sizes.get(str(b))
        parts = [size.parts.get(PART[m]) if size is not None else None for m in modes]
        return all(isinstance(p, dict) and p.get("status") is None for p in parts)

    at = next((b for b in sizes if not pooled(b)), None)
    if at is None:
        return
    if not any(isinstance(run.size(at).parts.get(PART[m]), dict) for m in modes):
        run.failed(at, "train", RuntimeError(error))
    rest = sizes[sizes.index(at) + 1 :]
    for b in rest:  # recorded as not measured, not left looking like a size that went well
        run.failed(b, "train", RuntimeError(f"not measured: the run stopped at batch size {at}"))
    # failed, and so exit 1: rank 0's torchrun agent then skips its exit barrier (300 s), where
    # it would wait for the node that left
    run.records.fault("failed", f"torchrun: the run stopped at batch size {at} ({error})")
    run.records.note(
        "torchrun_stopped",
        f"torchrun: the run stopped at batch size {at} ({error}); not measured after it: "
        f"{', '.join(map(str, rest)) or 'none'} (a failed rank ends a torchrun run on every "
        "node: torchrun cannot restart one batch size)",
        error=error,
        batch_size=at,
    )
