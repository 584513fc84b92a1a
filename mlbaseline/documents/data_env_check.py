"""The `data` payload of an `env-check` result: the raw readings the checks judged.

Written by `runners/envcheck.py` (`run_env_check`): the host readings (`HostReadings.to_dict`),
the software facts (`envinfo.torch_info`), the NVIDIA driver version and one entry per GPU
(`GpuInfo.to_dict`). Readings a machine does not have are null (no cgroup, no turbo switch, no
NVML), so they are optional here.
"""

from __future__ import annotations

from pydantic import Field

from mlbaseline.documents.base import FiniteFloat, Strict, TorchFacts


class CpuTimes(Strict):
    """One /proc/stat `cpu` line, in clock ticks (`envinfo.CpuTimes`)."""

    busy: int
    idle: int


class Host(Strict):
    """`HostReadings`: what the CPU and memory checks read, once."""

    cpu_before: dict[str, CpuTimes] = Field(default_factory=dict)
    cpu_after: dict[str, CpuTimes] = Field(default_factory=dict)
    window_s: FiniteFloat = 0.0
    loadavg: tuple[FiniteFloat, FiniteFloat, FiniteFloat] | None = None
    logical_cpus: int = 1
    affinity: list[int] = Field(default_factory=list)
    cgroup_version: int | None = None
    cgroup_cpu_quota: FiniteFloat | None = None
    # keys are CPU numbers; JSON makes them strings, the model gives them back as ints
    governors: dict[int, str] = Field(default_factory=dict)
    turbo: tuple[bool, str] | None = None  # (enabled, the sysfs file that said so)
    meminfo: dict[str, int] = Field(default_factory=dict)
    swaps_used: int | None = None
    cgroup_memory_limit: int | None = None
    cgroup_memory_usage: int | None = None
    env: dict[str, str] = Field(default_factory=dict)


class Software(TorchFacts):
    """`envinfo.torch_info()`: the torch version and the facts the fingerprint also holds."""

    torch: str | None = None


class Gpu(Strict):
    """`measure.gpu.GpuInfo.to_dict()`: one device's static and slow-changing facts."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    temperature_c: FiniteFloat | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_enabled: bool | None = None
    compute_processes: int = 0


class Data(Strict):
    """`data` of an env-check result."""

    host: Host
    software: Software
    driver: str | None = None  # no NVML, no driver version
    gpus: list[Gpu] = Field(default_factory=list)
