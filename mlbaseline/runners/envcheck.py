"""`mlb env-check`: is this machine fit to record a baseline right now?

Every check is a pure function of *readings* (GPU facts from a `GpuProbe`, host facts in a
`HostReadings`, software facts from `envinfo.torch_info()`) and the `env_check` thresholds, so
tests feed fakes and fixture trees. Reading never changes the machine: governors, turbo, clocks
and GPU modes are reported with advice, never set. The checks live by what they read:
`envcheck_gpu`, `envcheck_host` (CPU and memory) and `envcheck_software`.

Entry point for commands (`mlb env-check`, and the env-check phase of `mlb run`):
`run_env_check(cfg, probe, readings=None, software=None, root=Path("/")) -> Result`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlbaseline import envinfo
from mlbaseline.config import Config
from mlbaseline.errors import UsageError
from mlbaseline.measure.gpu import GpuProbe
from mlbaseline.report.checks import display  # the table's texts, for callers of this module
from mlbaseline.results import Result
from mlbaseline.runners.envcheck_gpu import GPU_CHECK_KINDS, device_checks, gpu_checks
from mlbaseline.runners.envcheck_host import HostReadings, cpu_checks, memory_checks, read_host
from mlbaseline.runners.envcheck_software import (
    cudnn_version_text,
    software_checks,
    validate_expect,
    version_matches,
)

# the names the checks are known by, for callers and tests that reach them through this module
__all__ = [
    "GPU_CHECK_KINDS",
    "HostReadings",
    "cpu_checks",
    "cudnn_version_text",
    "device_checks",
    "display",
    "gpu_checks",
    "memory_checks",
    "read_host",
    "run_env_check",
    "software_checks",
    "version_matches",
]


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
