"""env-check: the GPU checks (present, cool, idle, big enough, not throttled; modes as facts).

Pure functions of what a `GpuProbe` reads and the `env_check` thresholds.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlbaseline.config import Config
from mlbaseline.measure.gpu import GpuInfo, GpuProbe, GpuProbeError
from mlbaseline.results import Check
from mlbaseline.runners.envcheck_common import GB, _gb, _gpu_severity, _onoff, _pct

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


def _mode(name: str, flag: bool | None, unknown: str, on: str, off: str) -> Check:
    """A GPU mode as information: skip when not reported, else on/off with its advice."""
    if flag is None:
        return Check(name, "skip", None, None, unknown)
    return Check(name, "pass", _onoff(flag), None, on if flag else off)


def _persistence(d: GpuInfo) -> Check:
    return _mode(
        f"gpu{d.index}.persistence",
        d.persistence_mode,
        "persistence mode not reported",
        "the driver stays loaded between runs",
        "off: the first CUDA call of each run reloads the driver (slower start; warm-up "
        "absorbs it)",
    )


def _mig(d: GpuInfo) -> Check:
    return _mode(
        f"gpu{d.index}.mig",
        d.mig_mode,
        "MIG not supported or not reported",
        "MIG on: a run gets one slice; compare only against runs on the same slice profile",
        "MIG off: the whole GPU",
    )


def _ecc(d: GpuInfo) -> Check:
    return _mode(
        f"gpu{d.index}.ecc",
        d.ecc_enabled,
        "ECC not supported or not reported",
        "ECC on: a little memory bandwidth goes to error correction; keep it equal across runs",
        "ECC off",
    )
