"""env-check: the host readings (/proc, /sys, cgroups) and the CPU and memory checks.

Reading never changes the machine: governors and turbo are reported with advice, never set.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline import envinfo
from mlbaseline.config import Config
from mlbaseline.results import Check
from mlbaseline.runners.envcheck_common import GB, _gb, _onoff, _pct

# Environment variables that change what the checks mean (thread counts, visible GPUs).
ENV_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


# ---------------------------------------------------------------- readings


@dataclass(frozen=True)
class HostReadings:
    """What the CPU and memory checks look at, read once (see `read_host`)."""

    cpu_before: dict[str, envinfo.CpuTimes] = field(default_factory=dict)
    cpu_after: dict[str, envinfo.CpuTimes] = field(default_factory=dict)
    window_s: float = 0.0
    loadavg: tuple[float, float, float] | None = None
    logical_cpus: int = 1
    affinity: list[int] = field(default_factory=lambda: [0])
    cgroup_version: int | None = None
    cgroup_cpu_quota: float | None = None
    governors: dict[int, str] = field(default_factory=dict)
    turbo: tuple[bool, str] | None = None
    meminfo: dict[str, int] = field(default_factory=dict)
    swaps_used: int | None = None
    cgroup_memory_limit: int | None = None
    cgroup_memory_usage: int | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def usable_cpus(self) -> int:
        """Affinity, further capped by the cgroup quota (as `envinfo.usable_cpus`)."""
        n = max(1, len(self.affinity))
        if self.cgroup_cpu_quota is not None:
            n = max(1, min(n, int(self.cgroup_cpu_quota)))
        return n

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_host(
    root: Path = Path("/"),
    window_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    affinity: list[int] | None = None,
    env: Mapping[str, str] | None = None,
) -> HostReadings:
    """Read /proc and /sys under `root`. CPU idle needs two /proc/stat readings `window_s`
    apart; `sleep` is a parameter so that tests swap the file instead of waiting."""
    before = envinfo.cpu_times(root)
    if before:
        sleep(window_s)
    after = envinfo.cpu_times(root) if before else {}
    environ = os.environ if env is None else env
    per_cpu = [k for k in before if k != "cpu"]
    return HostReadings(
        cpu_before=before,
        cpu_after=after,
        window_s=window_s,
        loadavg=envinfo.loadavg(root),
        logical_cpus=len(per_cpu) or os.cpu_count() or 1,
        affinity=affinity if affinity is not None else envinfo.affinity_list(),
        cgroup_version=envinfo.cgroup_version(root),
        cgroup_cpu_quota=envinfo.cgroup_cpu_quota(root),
        governors=envinfo.cpu_governors(root),
        turbo=envinfo.turbo_state(root),
        meminfo=envinfo.meminfo(root),
        swaps_used=envinfo.swaps_used(root),
        cgroup_memory_limit=envinfo.cgroup_memory_limit(root),
        cgroup_memory_usage=envinfo.cgroup_memory_usage(root),
        env={k: environ[k] for k in ENV_KEYS if k in environ},
    )


# ---------------------------------------------------------------- CPU


def cpu_checks(cfg: Config, host: HostReadings) -> list[Check]:
    return [
        _cpu_idle(cfg, host),
        _cpu_load(cfg, host),
        _cpu_usable(host),
        _cpu_governor(host),
        _cpu_turbo(host),
    ]


def _cpu_idle(cfg: Config, host: HostReadings) -> Check:
    limit = cfg.env_check.cpu_min_idle
    idle = envinfo.idle_fraction(host.cpu_before, host.cpu_after, host.affinity)
    if idle is None:
        return Check("cpu.idle", "skip", None, limit, "/proc/stat unreadable or no time elapsed")
    over = f"over {host.window_s:g} s on the {len(host.affinity)} CPU(s) this process may use"
    if idle >= limit:
        return Check("cpu.idle", "pass", idle, limit, f"{_pct(idle)} idle {over}")
    return Check(
        "cpu.idle",
        "fail",
        idle,
        limit,
        f"only {_pct(idle)} idle {over}: other work competes with data loading and the "
        "Python side of each step; wait for it or stop it, then re-check",
    )


def _cpu_load(cfg: Config, host: HostReadings) -> Check:
    limit = cfg.env_check.cpu_max_load
    if host.loadavg is None:
        return Check("cpu.load", "skip", None, limit, "/proc/loadavg unreadable")
    per_cpu = host.loadavg[0] / max(1, host.logical_cpus)
    text = (
        f"load {host.loadavg[0]:.2f} / {host.loadavg[1]:.2f} / {host.loadavg[2]:.2f} (1/5/15 min)"
    )
    if per_cpu <= limit:
        return Check("cpu.load", "pass", per_cpu, limit, f"{text} on {host.logical_cpus} CPUs")
    return Check(
        "cpu.load",
        "warn",
        per_cpu,
        limit,
        f"{text} on {host.logical_cpus} CPUs: the machine has been busy; results taken now "
        "may be slow and noisy",
    )


def _cpu_usable(host: HostReadings) -> Check:
    quota = host.cgroup_cpu_quota
    parts = [f"affinity {len(host.affinity)} of {host.logical_cpus} logical CPUs"]
    parts.append(f"cgroup quota {quota:g} CPUs" if quota is not None else "no cgroup CPU quota")
    text = ", ".join(parts)
    if quota is not None and quota < len(host.affinity):
        return Check(
            "cpu.usable",
            "warn",
            host.usable_cpus,
            None,
            f"{text}: threads beyond the quota are throttled in bursts; keep "
            f"workload.threads and dataloader workers at or below {host.usable_cpus}",
        )
    return Check("cpu.usable", "pass", host.usable_cpus, None, text)


def _cpu_governor(host: HostReadings) -> Check:
    mine = {c: g for c, g in host.governors.items() if c in host.affinity} or host.governors
    if not mine:
        return Check("cpu.governor", "skip", None, "performance", "cpufreq not exposed here")
    kinds = sorted(set(mine.values()))
    value = ", ".join(kinds)
    if kinds == ["performance"]:
        return Check("cpu.governor", "pass", value, "performance", "fixed high frequency")
    slow = sum(1 for g in mine.values() if g != "performance")
    return Check(
        "cpu.governor",
        "warn",
        value,
        "performance",
        f"{slow} CPU(s) not on 'performance': frequency scaling adds variance; ask the "
        "administrator to set it for the run (mlb never changes it)",
    )


def _cpu_turbo(host: HostReadings) -> Check:
    if host.turbo is None:
        return Check("cpu.turbo", "skip", None, None, "turbo state not exposed here")
    enabled, source = host.turbo
    advice = (
        "turbo on: clocks follow temperature and load; compare runs with the same setting"
        if enabled
        else "turbo off: steadier clocks"
    )
    return Check("cpu.turbo", "pass", _onoff(enabled), None, f"{advice} ({source})")


# ---------------------------------------------------------------- memory


def memory_checks(cfg: Config, host: HostReadings) -> list[Check]:
    return [_memory_available(cfg, host), _memory_cgroup(host), _memory_swap(host)]


def available_ram(host: HostReadings) -> int | None:
    """MemAvailable, further limited by the room left under the cgroup limit."""
    avail = host.meminfo.get("MemAvailable")
    if avail is None and "MemFree" in host.meminfo:  # kernels before 3.14
        avail = host.meminfo["MemFree"] + host.meminfo.get("Cached", 0)
    if host.cgroup_memory_limit is not None:
        room = host.cgroup_memory_limit - (host.cgroup_memory_usage or 0)
        avail = room if avail is None else min(avail, room)
    return max(0, avail) if avail is not None else None


def _memory_available(cfg: Config, host: HostReadings) -> Check:
    need = cfg.env_check.min_ram_gb * GB
    avail = available_ram(host)
    if avail is None:
        return Check("memory.available", "skip", None, need, "/proc/meminfo unreadable")
    if avail >= need:
        return Check("memory.available", "pass", avail, need, f"{_gb(avail)} available")
    return Check(
        "memory.available",
        "warn",
        avail,
        need,
        f"{_gb(avail)} available < {_gb(need)}: pinned (page-locked) batches may not fit; "
        "use pin_memory=False (dataloader.pin_memory: [false])",
    )


def _memory_cgroup(host: HostReadings) -> Check:
    if host.cgroup_version is None:
        return Check("memory.cgroup_limit", "skip", None, None, "no cgroup filesystem found")
    version = f"cgroup v{host.cgroup_version}"
    limit = host.cgroup_memory_limit
    if limit is None:
        return Check("memory.cgroup_limit", "pass", None, None, f"no memory limit ({version})")
    used = f", {_gb(host.cgroup_memory_usage)} in use" if host.cgroup_memory_usage else ""
    total = host.meminfo.get("MemTotal")
    below = (
        "; the OOM killer acts at this limit, below the machine's RAM"
        if total is not None and limit < total
        else ""
    )
    return Check(
        "memory.cgroup_limit", "pass", limit, None, f"limit {_gb(limit)} ({version}){used}{below}"
    )


def _memory_swap(host: HostReadings) -> Check:
    total, free = host.meminfo.get("SwapTotal"), host.meminfo.get("SwapFree")
    used = total - free if total is not None and free is not None else host.swaps_used
    if used is None:
        return Check("memory.swap", "skip", None, 0, "swap usage unreadable")
    if used > 0:
        return Check(
            "memory.swap",
            "warn",
            used,
            0,
            f"{_gb(used)} swapped out: paging causes latency spikes; free memory (close "
            "other jobs) before measuring",
        )
    return Check("memory.swap", "pass", 0, 0, "no swap in use" if total else "no swap configured")
