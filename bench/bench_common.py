"""What every bench section shares: the table row, fresh-process runs, interleaving, formatting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
T = TypeVar("T")


@dataclass
class Row:
    section: str
    figure: str
    value: str
    target: str
    met: bool | None  # None: informational

    @property
    def mark(self) -> str:
        return {True: "met", False: "MISSED", None: "info"}[self.met]


def machine_class() -> str:
    """The CPU and its usable count: the "machine class" the reproducibility promise is about
    (the bench header adds RAM and the OS; the repro ledger pools runs by this string)."""
    from mlbaseline.envinfo import cpu_model, usable_cpus

    return f"{cpu_model()}, {usable_cpus()} usable CPUs"


def child_env() -> dict[str, str]:
    """The environment of a fresh child: ours, with the repository and bench/ importable."""
    env = dict(os.environ)
    paths = [str(ROOT), str(BENCH), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


@dataclass(frozen=True)
class ChildRun:
    wall_s: float
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """The child's stdout as JSON; a RuntimeError with its last stderr line otherwise."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            tail = (self.stderr.strip().splitlines() or [f"exit code {self.returncode}"])[-1]
            raise RuntimeError(f"child printed no JSON (exit {self.returncode}): {tail}") from None


def run_child(args: Sequence[str], timeout_s: float = 300.0, cwd: Path = ROOT) -> ChildRun:
    """`python ARGS...` in a fresh process; wall time from just before the start to the exit."""
    cmd = [sys.executable, *args]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=child_env()
    )
    return ChildRun(time.perf_counter() - start, proc.returncode, proc.stdout, proc.stderr)


def interleave(arms: dict[str, Callable[[], T]], rounds: int) -> dict[str, list[T]]:
    """Run every arm once per round, alternating the order each round (A B, B A, A B, …), so that
    a drift in the machine's load hits every arm alike. Returns each arm's results in order."""
    names = list(arms)
    out: dict[str, list[T]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(arms[name]())
    return out


def spread(values: Sequence[float]) -> float:
    """max / min − 1: how far apart the best and the worst of repeated runs are."""
    return max(values) / min(values) - 1.0


def cv(values: Sequence[float]) -> float:
    x = np.asarray(values, dtype=np.float64)
    return float(np.std(x, ddof=1) / np.mean(x)) if x.size > 1 else 0.0


def pct(x: float, signed: bool = False) -> str:
    return f"{x * 100:+.2f}%" if signed else f"{x * 100:.2f}%"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.1f} s"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"
