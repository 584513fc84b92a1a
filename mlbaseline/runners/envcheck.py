"""`mlb env-check`: is this machine fit to record a baseline right now?

Every check is a pure function of *readings* (GPU facts from a `GpuProbe`, host facts in a
`HostReadings`, software facts from `envinfo.torch_info()`) and the `env_check` thresholds, so
tests feed fakes and fixture trees. Reading never changes the machine: governors, turbo, clocks
and GPU modes are reported with advice, never set.

Entry point for commands (`mlb env-check`, and the env-check phase of `mlb run`):
`run_env_check(cfg, probe, readings=None, software=None, root=Path("/")) -> Result`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from mlbaseline import envinfo
from mlbaseline.config import Config
from mlbaseline.errors import ConfigError, UsageError
from mlbaseline.measure.gpu import GpuInfo, GpuProbe, GpuProbeError
from mlbaseline.results import Check, Result

GB = 1e9  # thresholds in config are decimal GB, like the numbers printed on cards and DIMMs
PIN_KEYS = ("torch", "torchvision", "cuda", "cudnn", "driver")
GPU_CHECK_KINDS = (
    "present",
    "temperature",
    "memory_used",
    "processes",
    "memory_total",
    "throttle",
    "persistence",
    "mig",
    "ecc",
)
# Throttle reasons that slow the GPU down right now (measurements would be wrong) versus
# ones that only say which clock policy is in force.
THROTTLE_SEVERE = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
THROTTLE_WARN = ("sw_power_cap",)
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


# ---------------------------------------------------------------- helpers


def _gb(n: float | None) -> str:
    return "?" if n is None else f"{n / GB:.1f} GB"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def _onoff(flag: bool | None) -> str:
    return "?" if flag is None else ("on" if flag else "off")


def _gpu_severity(cfg: Config) -> tuple[str, str]:
    """A busy or hot GPU spoils a GPU run; for a CPU run (workload.device: cpu) it is a warning."""
    if cfg.workload.device == "cpu":
        return "warn", " (workload.device is cpu: a warning only)"
    return "fail", ""


def visible_gpus(devices: list[GpuInfo], cuda_visible: str | None) -> list[GpuInfo]:
    """The devices a CUDA program here would see: NVML lists all of them, CUDA_VISIBLE_DEVICES
    (indices or UUID prefixes) narrows the set."""
    if cuda_visible is None:
        return devices
    wanted = [w.strip() for w in cuda_visible.split(",") if w.strip()]
    out: list[GpuInfo] = []
    for token in wanted:
        for d in devices:
            match = token == str(d.index) if token.isdigit() else d.uuid.startswith(token)
            if match and d not in out:
                out.append(d)
    return out


# ---------------------------------------------------------------- GPU


def _gpu_skips(reason: str) -> list[Check]:
    return [Check(f"gpu.{kind}", "skip", None, None, reason) for kind in GPU_CHECK_KINDS]


def gpu_checks(
    cfg: Config, probe: GpuProbe, env: Mapping[str, str] | None = None
) -> tuple[list[Check], list[GpuInfo]]:
    """GPU state through the probe: present, cool, idle, big enough, not throttled; persistence,
    MIG and ECC as information. Everything is `skip` with the reason when no driver answers."""
    ok, reason = probe.available()
    if not ok:
        return _gpu_skips(f"no GPU checks: {reason or 'no NVIDIA driver'}"), []
    try:
        devices = probe.devices()
    except GpuProbeError as exc:
        checks = _gpu_skips(f"NVML error: {exc}")
        checks[0] = Check("gpu.present", "warn", None, None, f"the driver answers but: {exc}")
        return checks, []
    cuda_visible = (env or {}).get("CUDA_VISIBLE_DEVICES")
    shown = visible_gpus(devices, cuda_visible)
    if not shown:
        why = (
            f"CUDA_VISIBLE_DEVICES={cuda_visible!r} hides all {len(devices)} GPU(s)"
            if devices
            else "the driver answers but lists no GPU"
        )
        return _gpu_skips(why), []
    names = ", ".join(f"{d.index}: {d.name}" for d in shown)
    checks = [
        Check("gpu.present", "pass", len(shown), None, f"{len(shown)} GPU(s) visible ({names})")
    ]
    for d in shown:
        checks += device_checks(cfg, d)
    return checks, shown


def device_checks(cfg: Config, d: GpuInfo) -> list[Check]:
    """The checks for one GPU, named `gpu{index}.{kind}`."""
    return [
        _temperature(cfg, d),
        _memory_used(cfg, d),
        _processes(cfg, d),
        _memory_total(cfg, d),
        _throttle(cfg, d),
        _persistence(d),
        _mig(d),
        _ecc(d),
    ]


def _temperature(cfg: Config, d: GpuInfo) -> Check:
    name, limit = f"gpu{d.index}.temperature", cfg.env_check.gpu_max_temp_c
    if d.temperature_c is None:
        return Check(name, "skip", None, limit, "temperature not reported by the driver")
    if d.temperature_c <= limit:
        return Check(name, "pass", d.temperature_c, limit, f"{d.temperature_c:.0f} °C")
    bad, note = _gpu_severity(cfg)
    return Check(
        name,
        bad,
        d.temperature_c,
        limit,
        f"{d.temperature_c:.0f} °C > {limit:.0f} °C: a hot GPU lowers its clocks mid-run; "
        f"let it cool (check airflow, earlier jobs) before measuring{note}",
    )


def _memory_used(cfg: Config, d: GpuInfo) -> Check:
    name, limit = f"gpu{d.index}.memory_used", cfg.env_check.gpu_max_memory_used
    if d.memory_total_bytes <= 0:
        return Check(name, "skip", None, limit, "memory size not reported by the driver")
    used = d.memory_used_bytes / d.memory_total_bytes
    if used <= limit:
        return Check(name, "pass", used, limit, f"{_gb(d.memory_used_bytes)} in use")
    bad, note = _gpu_severity(cfg)
    return Check(
        name,
        bad,
        used,
        limit,
        f"{_pct(used)} of GPU memory already in use ({_gb(d.memory_used_bytes)}): another job "
        f"shares this GPU; wait for it or select a free GPU with CUDA_VISIBLE_DEVICES{note}",
    )


def _processes(cfg: Config, d: GpuInfo) -> Check:
    name = f"gpu{d.index}.processes"
    if d.compute_processes == 0:
        return Check(name, "pass", 0, 0, "no other compute processes")
    bad, note = _gpu_severity(cfg)
    return Check(
        name,
        bad,
        d.compute_processes,
        0,
        f"{d.compute_processes} other compute process(es) on this GPU compete for it; "
        f"wait for them (nvidia-smi lists them) or use another GPU{note}",
    )


def _memory_total(cfg: Config, d: GpuInfo) -> Check:
    """The need scales with the batch: gpu_min_memory_gb is for batch 64."""
    batch = cfg.golden.batch_size
    need = cfg.env_check.gpu_min_memory_gb * GB * batch / 64
    name = f"gpu{d.index}.memory_total"
    basis = f"{cfg.env_check.gpu_min_memory_gb:g} GB × batch {batch}/64"
    if d.memory_total_bytes >= need:
        return Check(
            name,
            "pass",
            d.memory_total_bytes,
            need,
            f"{_gb(d.memory_total_bytes)} ≥ {_gb(need)} needed ({basis})",
        )
    bad, note = _gpu_severity(cfg)
    return Check(
        name,
        bad,
        d.memory_total_bytes,
        need,
        f"{_gb(d.memory_total_bytes)} < {_gb(need)} needed ({basis}): the run may run out of "
        f"memory; lower golden.batch_size or use a larger GPU{note}",
    )


def _throttle(cfg: Config, d: GpuInfo) -> Check:
    name = f"gpu{d.index}.throttle"
    reasons = list(d.throttle_reasons)
    severe = [r for r in reasons if r in THROTTLE_SEVERE]
    power = [r for r in reasons if r in THROTTLE_WARN]
    # 'gpu_idle' only says the clocks are low because nothing runs: not a throttle.
    shown = ", ".join(reasons) if reasons else "none"
    if severe:
        bad, note = _gpu_severity(cfg)
        return Check(
            name,
            bad,
            reasons,
            "no thermal/hardware slowdown",
            f"clocks held down now ({', '.join(severe)}): measurements would be slow and "
            f"noisy; let the GPU cool, check power and cooling (never reclock it){note}",
        )
    if power:
        return Check(
            name,
            "warn",
            reasons,
            "no thermal/hardware slowdown",
            "software power cap active while idle: check for a lowered power limit "
            "(nvidia-smi -q -d POWER); results depend on it",
        )
    return Check(name, "pass", reasons, "no thermal/hardware slowdown", f"reasons: {shown}")


def _persistence(d: GpuInfo) -> Check:
    name = f"gpu{d.index}.persistence"
    if d.persistence_mode is None:
        return Check(name, "skip", None, None, "persistence mode not reported")
    advice = (
        "the driver stays loaded between runs"
        if d.persistence_mode
        else "off: the first CUDA call of each run reloads the driver (slower start; warm-up "
        "absorbs it)"
    )
    return Check(name, "pass", _onoff(d.persistence_mode), None, advice)


def _mig(d: GpuInfo) -> Check:
    name = f"gpu{d.index}.mig"
    if d.mig_mode is None:
        return Check(name, "skip", None, None, "MIG not supported or not reported")
    advice = (
        "MIG on: a run gets one slice; compare only against runs on the same slice profile"
        if d.mig_mode
        else "MIG off: the whole GPU"
    )
    return Check(name, "pass", _onoff(d.mig_mode), None, advice)


def _ecc(d: GpuInfo) -> Check:
    name = f"gpu{d.index}.ecc"
    if d.ecc_enabled is None:
        return Check(name, "skip", None, None, "ECC not supported or not reported")
    advice = (
        "ECC on: a little memory bandwidth goes to error correction; keep it equal across runs"
        if d.ecc_enabled
        else "ECC off"
    )
    return Check(name, "pass", _onoff(d.ecc_enabled), None, advice)


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


# ---------------------------------------------------------------- software


def validate_expect(expect: Mapping[str, str]) -> None:
    """`env_check.expect` keys are a closed set: a typo must not silently disable a pin."""
    for key in expect:
        if key not in PIN_KEYS:
            close = get_close_matches(key, PIN_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"env_check.expect.{key}: unknown key{hint}; known: {', '.join(PIN_KEYS)}"
            )


def version_matches(version: str, pin: str) -> bool:
    """Prefix match on version components: '2.14' matches '2.14.1+cu130', not '2.140'."""
    return version == pin or (version.startswith(pin) and version[len(pin)] in ".+-")


def cudnn_version_text(raw: str | int | None) -> str | None:
    """torch reports cuDNN as an int: 8.9.2 is 8902 (major·1000), 9.1.0 is 90100 (major·10000)."""
    if raw is None:
        return None
    try:
        v = int(raw)
    except (TypeError, ValueError):
        return str(raw)
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def _version(key: str, value: str | None, pin: str | None, absent: str) -> Check:
    name = f"software.{key}"
    if pin is None:
        if value is None:
            return Check(name, "skip", None, None, absent)
        return Check(name, "pass", value, None, "no pin (env_check.expect)")
    if value is None:
        return Check(name, "fail", None, pin, f"pinned {pin} but {absent}")
    if version_matches(value, pin):
        return Check(name, "pass", value, pin, "matches the pin")
    return Check(
        name,
        "fail",
        value,
        pin,
        f"{value} does not match the pin {pin}: results would not be comparable; install "
        f"{key} {pin} or update env_check.expect",
    )


def software_checks(
    cfg: Config,
    sw: Mapping[str, Any],
    driver: str | None,
    gpus: list[GpuInfo],
    usable_cpus: int,
    env: Mapping[str, str] | None = None,
) -> list[Check]:
    """Versions against pins, the torch build against the hardware, flags and threads."""
    pins = cfg.env_check.expect
    return [
        _version("torch", sw.get("torch"), pins.get("torch"), "torch is not installed"),
        _version("torchvision", sw.get("torchvision"), pins.get("torchvision"), "not installed"),
        _version("cuda", sw.get("cuda_build"), pins.get("cuda"), "torch is a CPU-only build"),
        _version(
            "cudnn", cudnn_version_text(sw.get("cudnn")), pins.get("cudnn"), "no cuDNN in torch"
        ),
        _version("driver", driver, pins.get("driver"), "no NVIDIA driver"),
        _torch_build(cfg, sw, gpus),
        _cudnn_flags(cfg, sw),
        _tf32(sw),
        _threads(cfg, sw, usable_cpus, env or {}),
    ]


def _torch_build(cfg: Config, sw: Mapping[str, Any], gpus: list[GpuInfo]) -> Check:
    name, device = "software.torch_build", cfg.workload.device
    cuda_build, cuda_ok = sw.get("cuda_build"), bool(sw.get("cuda_available"))
    value = f"CUDA {cuda_build}" if cuda_build else "CPU-only"
    wants_cuda = device.startswith("cuda")
    if gpus and not cuda_build:
        bad, note = _gpu_severity(cfg)
        return Check(
            name,
            bad,
            value,
            "CUDA build",
            "a CPU-only torch on a machine with an NVIDIA GPU: install the CUDA build "
            f"(pip install torch --index-url https://download.pytorch.org/whl/cuXXX){note}",
        )
    if (gpus or wants_cuda) and cuda_build and not cuda_ok:
        return Check(
            name,
            "fail",
            value,
            "CUDA usable",
            f"torch is built for CUDA {cuda_build} but sees no usable GPU: the driver may be "
            "older than that CUDA, or CUDA_VISIBLE_DEVICES hides the GPUs",
        )
    if wants_cuda and not gpus:
        return Check(
            name,
            "fail",
            value,
            "a CUDA device",
            f"workload.device is '{device}' but no NVIDIA GPU is visible here",
        )
    if not cuda_build:
        return Check(name, "pass", value, None, "CPU-only build on a machine without a GPU")
    usable = "CUDA usable" if cuda_ok else "no GPU here, runs on CPU"
    return Check(name, "pass", value, None, usable)


def _cudnn_flags(cfg: Config, sw: Mapping[str, Any]) -> Check:
    """The flags the run will set (workload config), not this process's defaults."""
    bench, det = cfg.workload.cudnn_benchmark, cfg.workload.deterministic
    value = f"benchmark={bench}, deterministic={det}"
    if not sw.get("cuda_available"):
        return Check("software.cudnn_flags", "pass", value, None, "no effect on CPU; recorded")
    if bench:
        return Check(
            "software.cudnn_flags",
            "warn",
            value,
            "benchmark=False",
            "cudnn.benchmark picks kernels by timing them, so two runs may use different "
            "kernels; set workload.cudnn_benchmark: false for a baseline",
        )
    if not det:
        return Check(
            "software.cudnn_flags",
            "warn",
            value,
            "deterministic=True",
            "non-deterministic cuDNN kernels: numerics may differ run to run; "
            "set workload.deterministic: true for a baseline",
        )
    return Check("software.cudnn_flags", "pass", value, None, "fixed kernels, recorded")


def _tf32(sw: Mapping[str, Any]) -> Check:
    matmul, conv = bool(sw.get("tf32_matmul")), bool(sw.get("tf32_cudnn"))
    value = f"matmul={_onoff(matmul)}, cudnn={_onoff(conv)}"
    if not sw.get("cuda_available"):
        return Check("software.tf32", "pass", value, None, "no effect on CPU; recorded")
    if matmul:
        return Check(
            "software.tf32",
            "warn",
            value,
            "matmul=off",
            "TF32 matmuls trade float32 precision for speed; keep the setting identical "
            "across compared runs (it is recorded in the fingerprint)",
        )
    return Check("software.tf32", "pass", value, None, "PyTorch defaults; recorded")


def _threads(cfg: Config, sw: Mapping[str, Any], usable: int, env: Mapping[str, str]) -> Check:
    threads = cfg.workload.threads or sw.get("torch_threads")
    source = "workload.threads" if cfg.workload.threads else "torch default"
    omp = env.get("OMP_NUM_THREADS")
    text = f"{threads} intra-op threads ({source}), {usable} usable CPUs"
    text += f", OMP_NUM_THREADS={omp}" if omp else ""
    omp_n = int(omp) if omp and omp.isdigit() else None
    if threads is None:
        return Check("software.threads", "skip", None, usable, "torch thread count unknown")
    if threads > usable or (omp_n is not None and omp_n > usable):
        return Check(
            "software.threads",
            "warn",
            threads,
            usable,
            f"{text}: more threads than CPUs oversubscribes them and adds jitter; set "
            f"workload.threads: {usable} (and OMP_NUM_THREADS={usable})",
        )
    return Check("software.threads", "pass", threads, usable, text)


# ---------------------------------------------------------------- the command


_DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d+)?")


def _fingerprint_device(device: str, sw: Mapping[str, Any]) -> str:
    if device == "auto":
        return "cuda" if sw.get("cuda_available") else "cpu"
    return device


def read_software() -> dict[str, Any]:
    return envinfo.torch_info()


def run_env_check(
    cfg: Config,
    probe: GpuProbe,
    readings: HostReadings | None = None,
    software: Mapping[str, Any] | None = None,
    root: Path = Path("/"),
    sleep: Callable[[float], None] = time.sleep,
) -> Result:
    """Run every check and return an `env-check` result (verdict checks = the checks,
    environment = the fingerprint, data = the raw readings). Bad config raises ConfigError or
    UsageError; nothing on the machine is changed."""
    validate_expect(cfg.env_check.expect)
    if not _DEVICE_RE.fullmatch(cfg.workload.device):
        raise UsageError(
            f"workload.device: unknown device '{cfg.workload.device}' "
            "(use auto, cpu, cuda or cuda:N)"
        )
    # Host first: the CPU-idle window must not include this process importing torch.
    host = readings or read_host(root, cfg.env_check.cpu_idle_window_s, sleep)
    gpu, gpus = gpu_checks(cfg, probe, host.env)
    sw = dict(software) if software is not None else read_software()
    driver = probe.driver_version()
    checks = gpu
    checks += cpu_checks(cfg, host)
    checks += memory_checks(cfg, host)
    checks += software_checks(cfg, sw, driver, gpus, host.usable_cpus, host.env)
    result = Result(kind="env-check", config=cfg.to_dict())
    result.environment = envinfo.fingerprint(
        cfg.to_dict(), probe, device=_fingerprint_device(cfg.workload.device, sw)
    )
    result.verdict.checks = checks
    result.data = {
        "host": host.to_dict(),
        "software": sw,
        "driver": driver,
        "gpus": [g.to_dict() for g in gpus],
    }
    return result


# ---------------------------------------------------------------- display


# How the table shows a value, by the last part of the check name.
_BYTES = {"memory_total", "available", "cgroup_limit", "swap"}
_SHARES = {"memory_used", "idle"}


def display(check: Check) -> tuple[str, str]:
    """(value, threshold) as the table shows them; the JSON keeps SI numbers."""
    kind = check.name.rsplit(".", 1)[-1]
    ops = {"temperature": "≤", "memory_used": "≤", "idle": "≥", "load": "≤", "swap": "≤"}
    ops |= {"memory_total": "≥", "available": "≥", "processes": "≤", "threads": "≤"}

    def fmt(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, list):
            return ", ".join(map(str, v)) or "none"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return str(v)
        if kind in _BYTES:
            return _gb(v)
        if kind in _SHARES:
            return _pct(v)
        if kind == "temperature":
            return f"{v:.0f} °C"
        if kind == "load":
            return f"{v:.2f}/CPU"
        return f"{v:g}"

    threshold = "—" if check.threshold is None else f"{ops.get(kind, '')} {fmt(check.threshold)}"
    return fmt(check.value), threshold.strip()
