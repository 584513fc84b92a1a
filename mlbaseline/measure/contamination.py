"""Foreign CPU share and load at each phase boundary: was the machine ours while we measured?

At the start and end of each phase (one batch size's training or inference, one replicate, the
pairs of an A/B run) a snapshot records, on one monotonic clock:

- the system's busy CPU seconds (psutil.cpu_times: user + nice + system + irq + softirq; guest
  time is already inside user/nice, idle, iowait and steal are not busy);
- the CPU seconds of mlb's own process tree (this process and every descendant, live ones by
  psutil, reaped ones through their parent's children_user/children_system);
- the 1/5/15-minute load averages (os.getloadavg).

Foreign CPU over a phase = (Δ busy − Δ own) / Δ wall, in cores (1.0 = one core fully used by
something else), clipped at 0. A phase above `threshold_cores` marks the run **contaminated**
(`data["contamination"]["contaminated"]` and a `contaminated` warning): its figures include
other programs' load. Tests inject the readers and the clock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from mlbaseline.measure.clock import Clock, PerfClock

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")
METHOD = (
    "foreign cores = (Δ system busy CPU s − Δ CPU s of mlb's own process tree) / Δ wall s "
    "per phase (psutil); load averages at each boundary (os.getloadavg)"
)


def system_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (sum over cores)."""
    import psutil

    t = psutil.cpu_times()
    return float(sum(getattr(t, f, 0.0) for f in BUSY_FIELDS))


def own_tree_s(root: int | None = None) -> float:
    """CPU seconds of `root` (default: this process) and all its descendants, reaped ones
    included through their parents' children_* counters."""
    import psutil

    try:
        proc = psutil.Process(root or os.getpid())
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass(frozen=True)
class Snapshot:
    t_s: float
    busy_s: float
    own_s: float
    load: tuple[float, float, float]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "load": list(self.load)}


@dataclass
class CpuAccount:
    """Snapshots and per-phase foreign CPU; every reader can be replaced (tests)."""

    threshold_cores: float
    clock: Clock = field(default_factory=PerfClock)
    busy: Callable[[], float] = system_busy_s
    own: Callable[[], float] = own_tree_s
    loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg
    phases: list[dict[str, Any]] = field(default_factory=list)
    advice: str = "rerun on a quiet machine or compare with `mlb ab`"

    def snapshot(self) -> Snapshot:
        try:
            load = tuple(float(x) for x in self.loadavg())
        except OSError:
            load = (float("nan"),) * 3
        return Snapshot(self.clock.now_ns() / 1e9, self.busy(), self.own(), load)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record one phase from its start to its end (also when it raises)."""
        start = self.snapshot()
        try:
            yield
        finally:
            self.phases.append(phase_record(name, start, self.snapshot()))

    @property
    def worst(self) -> dict[str, Any] | None:
        return max(self.phases, key=lambda p: p["foreign_cores"], default=None)

    @property
    def contaminated(self) -> bool:
        worst = self.worst
        return worst is not None and worst["foreign_cores"] > self.threshold_cores

    def to_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "threshold_cores": self.threshold_cores,
            "contaminated": self.contaminated,
            "max_foreign_cores": worst["foreign_cores"] if worst else None,
            "worst_phase": worst["phase"] if worst else None,
            "phases": list(self.phases),
            "method": METHOD,
            "advice": self.advice,  # what the path that measured it advises when contaminated
        }

    def message(self) -> str | None:
        """The warning text when contaminated, else None."""
        worst = self.worst
        if not self.contaminated or worst is None:
            return None
        load = worst["end"]["load"][0]
        return (
            f"contaminated: other programs used {worst['foreign_cores']:.2f} cores during "
            f"{worst['phase']} (limit {self.threshold_cores:g}; load {load:.2f}): these figures "
            f"include their load; {self.advice}"
        )


def phase_record(name: str, start: Snapshot, end: Snapshot) -> dict[str, Any]:
    wall = max(end.t_s - start.t_s, 1e-9)
    busy = max(end.busy_s - start.busy_s, 0.0)
    own = max(end.own_s - start.own_s, 0.0)
    return {
        "phase": name,
        "duration_s": wall,
        "busy_cores": busy / wall,
        "own_cores": own / wall,
        "foreign_cores": max(busy - own, 0.0) / wall,
        "start": start.to_dict(),
        "end": end.to_dict(),
    }


def record(result: Any, account: CpuAccount) -> None:
    """Write the account into a result: `data["contamination"]` and, when contaminated, a
    `contaminated` warning."""
    result.data["contamination"] = account.to_dict()
    msg = account.message()
    if msg is not None:
        worst = account.worst or {}
        result.warn(
            "contaminated",
            msg,
            value=worst.get("foreign_cores"),
            threshold=account.threshold_cores,
            phase=worst.get("phase"),
        )


__all__ = [
    "METHOD",
    "CpuAccount",
    "Snapshot",
    "own_tree_s",
    "phase_record",
    "record",
    "system_busy_s",
]
