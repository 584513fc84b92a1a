"""The environment fingerprint: what a result was measured on.

Split into **blocking** keys (a difference makes two runs not comparable) and informational
ones. Readers of /proc and /sys take a `root` so tests can point them at fixture trees. Only
allow-listed environment variables are recorded (never tokens or secrets).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from mlbaseline.measure.gpu import GpuProbe, GpuProbeError

# Environment variables that change performance and are safe to record. Nothing else is kept.
ENV_ALLOWLIST = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUBLAS_WORKSPACE_CONFIG",
    "PYTORCH_CUDA_ALLOC_CONF",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NCCL_DEBUG",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE",
    "TORCH_CUDNN_V8_API_ENABLED",
)

# Config paths whose values are part of the blocking fingerprint (the golden parameters and
# what defines the workload's numeric behaviour).
BLOCKING_CONFIG_KEYS = (
    "golden.seed",
    "golden.batch_size",
    "golden.subset_size",
    "golden.telemetry_interval_s",
    "workload.dtype",
)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def cpu_model(root: Path = Path("/")) -> str:
    text = read_text(root / "proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cgroup_cpu_quota(root: Path = Path("/")) -> float | None:
    """CPUs allowed by the cgroup quota (v2 `cpu.max`, else v1 cfs quota); None: no limit."""
    v2 = read_text(root / "sys/fs/cgroup/cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        if quota == "max":
            return None
        try:
            return int(quota) / int(period or 100000)
        except ValueError:
            return None
    quota_s = read_text(root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us") or read_text(
        root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"
    )
    period_s = read_text(root / "sys/fs/cgroup/cpu/cpu.cfs_period_us") or read_text(
        root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"
    )
    try:
        quota, period = int(quota_s or "-1"), int(period_s or "100000")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_memory_limit(root: Path = Path("/")) -> int | None:
    """Bytes allowed by the cgroup (v2 `memory.max`, else v1 `memory.limit_in_bytes`)."""
    v2 = read_text(root / "sys/fs/cgroup/memory.max")
    if v2 is not None:
        return None if v2 == "max" else _int_or_none(v2)
    v1 = _int_or_none(read_text(root / "sys/fs/cgroup/memory/memory.limit_in_bytes") or "")
    # v1 reports "no limit" as a huge page-aligned number near 2**63
    return v1 if v1 is not None and v1 < 2**60 else None


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(root: Path = Path("/")) -> int:
    """CPUs this process may really use: affinity, further capped by the cgroup quota."""
    n = affinity_cpus()
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        n = max(1, min(n, int(quota)))
    return n


def torch_info() -> dict[str, Any]:
    """Software stack facts from torch (imported here, lazily)."""
    import torch
    import torchvision

    cuda_ok = torch.cuda.is_available()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": cuda_ok,
        "cudnn": str(cudnn) if cudnn else None,
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
    }


def _get(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def fingerprint(
    config: dict[str, Any],
    probe: GpuProbe,
    device: str = "cpu",
    subset_sha256: str | None = None,
) -> dict[str, dict[str, Any]]:
    """The fingerprint of this machine for a run on `device` with `config`."""
    import psutil

    sw = torch_info()
    gpus = []
    try:
        gpus = probe.devices()
    except GpuProbeError:
        gpus = []
    driver = probe.driver_version()
    gpu0 = gpus[0] if gpus else None
    blocking: dict[str, Any] = {
        "device": device,
        "torch": sw["torch"],
        "cuda": sw["cuda_build"] if device.startswith("cuda") else None,
        "cudnn": sw["cudnn"] if device.startswith("cuda") else None,
        "gpu_name": gpu0.name if gpu0 and device.startswith("cuda") else None,
        "driver_major": driver.split(".")[0] if driver and device.startswith("cuda") else None,
        # on CPU the CPU is the accelerator: another model is another machine class
        "cpu_model": cpu_model() if device == "cpu" else None,
        "subset_sha256": subset_sha256,
    }
    for key in BLOCKING_CONFIG_KEYS:
        blocking[key] = _get(config, key)
    vm = psutil.virtual_memory()
    informational: dict[str, Any] = {
        **{k: v for k, v in sw.items() if k not in ("torch",)},
        "python": platform.python_version(),
        "python_implementation": sys.implementation.name,
        "os": f"{platform.system()} {platform.release()}",
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_logical": os.cpu_count(),
        "cpu_affinity": affinity_cpus(),
        "cgroup_cpu_quota": cgroup_cpu_quota(),
        "usable_cpus": usable_cpus(),
        "ram_total_bytes": vm.total,
        "cgroup_memory_limit_bytes": cgroup_memory_limit(),
        "driver": driver,
        "gpus": [
            {"index": g.index, "name": g.name, "uuid": g.uuid, "memory_total": g.memory_total_bytes}
            for g in gpus
        ],
        "env": {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ},
    }
    return {"blocking": blocking, "informational": informational}
