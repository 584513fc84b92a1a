"""`mlb throughput` as one rank of an external `torchrun` (one or many nodes): who this process
is (`torchrun_env`), what is refused there (`check_torchrun`), the node layout in the
fingerprint, and how a rank that fails ends the run on every node within a bounded time.

A failed rank ends the run on every node:
- a rank that fails with a message (bad input, a crash, OOM) announces it in torchrun's own
  rendezvous store (`announce_failure`, key `mlb/failed`) before it exits;
- every rank watches that key while it measures (`Watchdog`, every `WATCH_EVERY_S`): a peer's
  failure, or the store itself gone (the node that hosted it ended), gives the rank
  `GRACE_S` to leave on its own (a collective whose peer left fails at once, and rank 0 then
  writes what was pooled); one still blocked then (e.g. waiting for a peer that never joined
  the process group) prints `Error: …` and exits 1. So a node ends within
  `WATCH_EVERY_S + GRACE_S` (about 11 s) of a failure on another node;
- rank 0 marks its result `failed` when a peer failed, and exits 1: its torchrun agent then
  skips torchrun's exit barrier (300 s) for the node that left.
A rank killed outright (SIGKILL) before it joined the process group announces nothing: the
process group's timeout bounds that case.

No torch at import: the CLI reads the rank before it loads anything.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from mlbaseline.config import Config
from mlbaseline.errors import ExitCode, MlbError, UsageError

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE")


class RankFailedError(MlbError):
    """This rank (not rank 0) could not finish its part of a torchrun measurement."""

    exit_code = ExitCode.FAILED


@dataclass(frozen=True)
class TorchrunEnv:
    """What torchrun told this process about the run it is one rank of."""

    rank: int
    world_size: int
    local_rank: int
    group_rank: int
    local_world_size: int
    nnodes: int
    run_id: str | None = None


def torchrun_env(environ: Mapping[str, str] | None = None) -> TorchrunEnv | None:
    """The torchrun environment of this process, or None when not launched by torchrun (all
    five variables must be set: a lone RANK left in a shell is not a launch)."""
    env = os.environ if environ is None else environ
    if not all(env.get(k) for k in TORCHRUN_VARS):
        return None
    try:
        v = {k: int(env[k]) for k in TORCHRUN_VARS}
        # GROUP_WORLD_SIZE: torchrun's number of nodes; without it, nodes are equal in size
        nnodes = int(env.get("GROUP_WORLD_SIZE") or v["WORLD_SIZE"] // v["LOCAL_WORLD_SIZE"])
    except ValueError:
        found = ", ".join(f"{k}={env[k]}" for k in TORCHRUN_VARS)
        raise UsageError(f"torchrun environment: expected integers, got {found}") from None
    return TorchrunEnv(
        v["RANK"],
        v["WORLD_SIZE"],
        v["LOCAL_RANK"],
        v["GROUP_RANK"],
        v["LOCAL_WORLD_SIZE"],
        nnodes,
        env.get("TORCHELASTIC_RUN_ID"),
    )


def check_torchrun(cfg: Config, launch: TorchrunEnv | None) -> None:
    """Under torchrun the world is torchrun's: no second launcher, no fresh-process children
    (they would inherit this rank's identity)."""
    if launch is None:
        return
    if cfg.throughput.nproc > 1:
        raise UsageError(
            f"throughput.nproc: {cfg.throughput.nproc} under torchrun, which already started "
            f"{launch.world_size} processes; leave --nproc at 1 (torchrun's --nproc-per-node "
            "sets the processes)"
        )
    if cfg.throughput.repeats not in (1, "auto"):  # auto runs one process per rank here
        raise UsageError("throughput.repeats: fresh-process replicates cannot run under torchrun")
    if cfg.throughput.trace:
        raise UsageError("throughput.trace: the profiler window is for one process, not torchrun")


def record_layout(result: Any, nnodes: int, nproc_per_node: int, hostnames: list[str]) -> None:
    """The node layout in the fingerprint: its shape is a blocking key (2 nodes × 1 process is
    another measurement than 1 × 2: the gradients cross the network), the hostnames per rank are
    recorded beside it (the same layout on other nodes of the same kind stays comparable)."""
    result.environment.setdefault("blocking", {})["node_layout"] = {
        "nnodes": nnodes,
        "nproc_per_node": nproc_per_node,
        "world_size": nnodes * nproc_per_node,
    }
    result.environment.setdefault("informational", {})["hostnames_by_rank"] = hostnames


# ---------------------------------------------------------------- a failed rank ends the run

FAILED_KEY = "mlb/failed"
WATCH_EVERY_S = 0.5
GRACE_S = 10.0
STORE_TIMEOUT_S = 5.0
LOST_AFTER = 3  # the store unreachable this many polls in a row: its node has ended


def _store(timeout_s: float = STORE_TIMEOUT_S) -> Any:
    """A client of torchrun's rendezvous store (MASTER_ADDR:MASTER_PORT, which torchrun gives
    every worker), or None when there is none to reach."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not (port or "").isdigit():
        return None
    from torch.distributed import TCPStore

    try:
        return TCPStore(addr, int(port or 0), is_master=False, timeout=timedelta(seconds=timeout_s))
    except Exception:  # torch raises RuntimeError/DistStoreError variants: no store, no watch
        return None


def announce_failure(launch: TorchrunEnv, message: str) -> None:
    """Tell the other ranks that this one failed (best effort: the failure is reported anyway
    on this rank's stderr and exit code)."""
    store = _store()
    if store is None:
        return
    text = f"rank {launch.rank} ({socket.gethostname()}): {message}"
    try:
        store.set(FAILED_KEY, text.encode("utf-8", "replace"))
    except Exception:  # the store went away meanwhile: the peers' watchdogs see that too
        return


@contextmanager
def failures_announced(launch: TorchrunEnv | None) -> Iterator[None]:
    """Run the block; a failure that leaves it (bad input, a crash, Ctrl-C is not one) is
    announced to the other ranks first. A non-zero exit code of a finished run is a verdict,
    not a failure of this rank."""
    try:
        yield
    except KeyboardInterrupt:
        raise
    except MlbError as exc:
        if launch is not None:
            announce_failure(launch, exc.message)
        raise
    except Exception as exc:
        if launch is not None:
            announce_failure(launch, f"{type(exc).__name__}: {exc}")
        raise


class Watchdog:
    """Watches the store for a peer's failure while this rank measures (see the module's
    docstring); `stop()` (the `with` block's end) when the collectives are over."""

    def __init__(self, launch: TorchrunEnv, grace_s: float = GRACE_S) -> None:
        self.launch, self.grace_s = launch, grace_s
        self.failure: str | None = None  # the peer's message, once seen
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watchdog:
        store = _store()
        if store is not None:
            self._thread = threading.Thread(
                target=self._watch, args=(store,), name="mlb-torchrun-watchdog", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopped.set()

    def _peer_failure(self, store: Any) -> str | None:
        lost = 0
        while not self._stopped.wait(WATCH_EVERY_S):
            try:
                if not store.check([FAILED_KEY]):
                    lost = 0
                    continue
                text = store.get(FAILED_KEY).decode("utf-8", "replace")
            except Exception:
                lost += 1
                if lost >= LOST_AFTER:
                    return "torchrun's rendezvous store is gone (the node that hosted it ended)"
                continue
            if not text.startswith(f"rank {self.launch.rank} "):
                return text
        return None

    def _watch(self, store: Any) -> None:
        failure = self._peer_failure(store)
        if failure is None:
            return
        self.failure = failure
        if self._stopped.wait(self.grace_s):
            return  # this rank left on its own (its collective failed): it reports itself
        sys.stderr.write(
            f"Error: rank {self.launch.rank}: stopped because another rank failed ({failure}); "
            "a failed rank ends a torchrun run on every node\n"
        )
        sys.stderr.flush()
        os._exit(int(ExitCode.FAILED))  # the main thread is blocked in a collective: no unwinding
