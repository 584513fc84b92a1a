"""The environment fingerprint: what a result was measured on.

Split into **blocking** keys (a difference makes two runs not comparable) and informational
ones. Readers of /proc and /sys take a `root` so tests can point them at fixture trees. Only
allow-listed environment variables are recorded (never tokens or secrets).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import platform
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbaseline.config import BLOCKING_CONFIG_KEYS, workload_identity
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

# The config paths in the blocking fingerprint (golden parameters, dtype, workload options and
# the workload identity) are config.BLOCKING_CONFIG_KEYS, imported here under the same name.


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


def cgroup_version(root: Path = Path("/")) -> int | None:
    """2 on a unified hierarchy, 1 when v1 controllers are mounted, None when neither is."""
    base = root / "sys/fs/cgroup"
    if (base / "cgroup.controllers").exists():
        return 2
    if any((base / name).is_dir() for name in ("memory", "cpu", "cpu,cpuacct")):
        return 1
    return None


def _own_cgroup_path(root: Path, controller: str | None) -> str:
    """This process's cgroup path from /proc/self/cgroup (`id:controllers:path` lines); the v2
    line has an empty controller list. "/" when unknown."""
    for line in (read_text(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = [c for c in parts[1].split(",") if c]
        if (controller is None and not controllers) or (controller in controllers):
            return parts[2] or "/"
    return "/"


def cgroup_dirs(root: Path, controller: str) -> list[Path]:
    """The cgroup directories that limit this process, deepest first, ending at the mount.

    A limit set on any ancestor applies too, so callers take the minimum over all of them.
    Inside a container the mount often *is* the container's cgroup while /proc/self/cgroup
    still names the host path; the path then does not exist under the mount and only the
    mount itself (and whatever ancestors do exist) is used.
    """
    version = cgroup_version(root)
    if version == 2:
        mount, own = root / "sys/fs/cgroup", _own_cgroup_path(root, None)
    elif version == 1:
        names = ("memory",) if controller == "memory" else ("cpu,cpuacct", "cpu")
        mount = next(
            (root / "sys/fs/cgroup" / n for n in names if (root / "sys/fs/cgroup" / n).is_dir()),
            None,
        )
        if mount is None:
            return []
        own = _own_cgroup_path(root, controller)
    else:
        return []
    parts = [p for p in own.strip("/").split("/") if p and p not in (".", "..")]
    dirs = [mount.joinpath(*parts[:i]) for i in range(len(parts), 0, -1)] + [mount]
    return [d for d in dirs if d.is_dir()]


def cgroup_cpu_quota(root: Path = Path("/")) -> float | None:
    """CPUs allowed by the cgroup quota (v2 `cpu.max`, else v1 cfs quota/period), the tightest
    over this process's cgroup and its ancestors; None = no limit."""
    quotas: list[float] = []
    version = cgroup_version(root)
    for d in cgroup_dirs(root, "cpu"):
        if version == 2:
            quota, _, period = (read_text(d / "cpu.max") or "max").partition(" ")
            q, per = _int_or_none(quota), _int_or_none(period or "100000")
        else:
            q = _int_or_none(read_text(d / "cpu.cfs_quota_us") or "")
            per = _int_or_none(read_text(d / "cpu.cfs_period_us") or "100000")
        if q is not None and per and q > 0 and per > 0:
            quotas.append(q / per)
    return min(quotas) if quotas else None


def cgroup_memory_limit(root: Path = Path("/")) -> int | None:
    """Bytes allowed by the cgroup (v2 `memory.max`, else v1 `memory.limit_in_bytes`), the
    tightest over this process's cgroup and its ancestors; None = no limit."""
    version = cgroup_version(root)
    name = "memory.max" if version == 2 else "memory.limit_in_bytes"
    limits = []
    for d in cgroup_dirs(root, "memory"):
        value = _int_or_none(read_text(d / name) or "")  # v2 "max" reads as None
        # v1 reports "no limit" as a huge page-aligned number near 2**63
        if value is not None and 0 < value < 2**60:
            limits.append(value)
    return min(limits) if limits else None


def cgroup_memory_usage(root: Path = Path("/")) -> int | None:
    """Bytes charged to this process's own cgroup (v2 `memory.current`, v1 `usage_in_bytes`)."""
    name = "memory.current" if cgroup_version(root) == 2 else "memory.usage_in_bytes"
    for d in cgroup_dirs(root, "memory"):
        value = _int_or_none(read_text(d / name) or "")
        if value is not None:
            return value
    return None


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


@dataclass(frozen=True)
class CpuTimes:
    """One /proc/stat `cpu` line, in clock ticks: idle includes iowait (the CPU was free)."""

    busy: int
    idle: int

    @property
    def total(self) -> int:
        return self.busy + self.idle


def cpu_times(root: Path = Path("/")) -> dict[str, CpuTimes]:
    """/proc/stat `cpu` (all CPUs) and `cpuN` lines. Guest time is already inside user/nice,
    so only the first eight fields are summed."""
    out: dict[str, CpuTimes] = {}
    for line in (read_text(root / "proc/stat") or "").splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        try:
            ticks = [int(v) for v in fields[1:9]]
        except ValueError:
            continue
        if len(ticks) < 4:
            continue
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        out[fields[0]] = CpuTimes(busy=sum(ticks) - idle, idle=idle)
    return out


def idle_fraction(
    before: dict[str, CpuTimes], after: dict[str, CpuTimes], cpus: list[int] | None = None
) -> float | None:
    """Share of CPU time spent idle between two `cpu_times` readings, over `cpus` when their
    per-CPU lines exist (the CPUs this process may run on), else over the whole machine.
    None when no time elapsed."""
    keys = [f"cpu{i}" for i in cpus or []]
    if not keys or not all(k in before and k in after for k in keys):
        keys = ["cpu"]
    if not all(k in before and k in after for k in keys):
        return None
    total = sum(after[k].total - before[k].total for k in keys)
    idle = sum(after[k].idle - before[k].idle for k in keys)
    if total <= 0:
        return None
    return min(1.0, max(0.0, idle / total))


def loadavg(root: Path = Path("/")) -> tuple[float, float, float] | None:
    """1, 5 and 15 minute load averages (system-wide, even inside a container)."""
    fields = (read_text(root / "proc/loadavg") or "").split()
    try:
        return float(fields[0]), float(fields[1]), float(fields[2])
    except (IndexError, ValueError):
        return None


def meminfo(root: Path = Path("/")) -> dict[str, int]:
    """/proc/meminfo in bytes (the file says kB and means KiB)."""
    out: dict[str, int] = {}
    for line in (read_text(root / "proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if not fields:
            continue
        value = _int_or_none(fields[0])
        if value is not None:
            out[key.strip()] = value * 1024 if len(fields) > 1 and fields[1] == "kB" else value
    return out


def swaps_used(root: Path = Path("/")) -> int | None:
    """Bytes in use across /proc/swaps devices (KiB columns); None when unreadable."""
    text = read_text(root / "proc/swaps")
    if text is None:
        return None
    used = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 4 and (value := _int_or_none(fields[3])) is not None:
            used += value * 1024
    return used


def cpu_governors(root: Path = Path("/")) -> dict[int, str]:
    """cpufreq scaling governor per CPU id; empty where cpufreq is not exposed (VMs, containers)."""
    out: dict[int, str] = {}
    base = root / "sys/devices/system/cpu"
    for path in sorted(base.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        cpu = _int_or_none(path.parent.parent.name.removeprefix("cpu"))
        governor = read_text(path)
        if cpu is not None and governor:
            out[cpu] = governor
    return out


def turbo_state(root: Path = Path("/")) -> tuple[bool, str] | None:
    """(turbo enabled, the file that says so): intel_pstate `no_turbo` (1 = off) or cpufreq
    `boost` (1 = on, acpi-cpufreq and amd-pstate); None when neither is readable."""
    base = root / "sys/devices/system/cpu"
    no_turbo = read_text(base / "intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        return no_turbo == "0", "intel_pstate/no_turbo"
    boost = read_text(base / "cpufreq/boost")
    if boost in ("0", "1"):
        return boost == "1", "cpufreq/boost"
    return None


def affinity_list() -> list[int]:
    """CPU ids this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def parse_cpus(text: str, flag: str = "--cpus") -> frozenset[int]:
    """CPU ids in taskset's list form ("1", "0,2", "2-3"), each one this process may run on."""
    from mlbaseline.errors import UsageError

    allowed = affinity_list()
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            lo, hi = int(first), int(last or first)
            if lo > hi:
                raise ValueError(part)
            cpus.update(range(lo, hi + 1))
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a CPU list like 1, 0,2 or 2-3") from None
    outside = sorted(cpus - set(allowed))
    if not cpus or outside:
        raise UsageError(
            f"{flag}: {text!r}: CPU(s) {', '.join(map(str, outside)) or 'none'} not among "
            f"those this process may use ({', '.join(map(str, allowed))})"
        )
    return frozenset(cpus)


def pin_tree(pid: int, cpus: frozenset[int]) -> int:
    """Move a running process, every thread of it and every process under it (a DataLoader's
    workers) onto `cpus`; threads and processes started later inherit it from their parent
    thread. Those that end meanwhile are skipped. Returns how many threads were moved."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0
    moved = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error, OSError):
            for thread in proc.threads():
                with contextlib.suppress(OSError):  # ended since it was listed
                    os.sched_setaffinity(thread.id, cpus)
                    moved += 1
    return moved


def _torchvision_version() -> str | None:
    """torchvision's version without importing it (the import costs a second or more): read
    the literal `__version__` from its version.py; fall back to the import."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        try:
            tree = ast.parse((Path(location) / "version.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant)
            ):
                return str(node.value.value)
    import torchvision

    return str(torchvision.__version__)


def torch_info() -> dict[str, Any]:
    """Software stack facts from torch (imported here, lazily)."""
    import torch

    cuda_ok = torch.cuda.is_available()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch": torch.__version__,
        "torchvision": _torchvision_version(),
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
    probe: GpuProbe | None,
    device: str = "cpu",
    subset_sha256: str | None = None,
) -> dict[str, dict[str, Any]]:
    """The fingerprint of this machine for a run on `device` with `config`. With `probe` None,
    the default NVML probe is opened for this call and closed again."""
    if probe is None:
        from mlbaseline.measure.gpu import default_probe

        own = default_probe()
        try:
            return fingerprint(config, own, device, subset_sha256)
        finally:
            own.close()
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
    # the workload identity by the rules compare and history rebuild it with for older results
    blocking.update(workload_identity(config))
    informational = _informational(sw, driver, gpus)
    return {"blocking": blocking, "informational": informational}


def _informational(sw: dict[str, Any], driver: str | None, gpus: list[Any]) -> dict[str, Any]:
    """The fingerprint's informational half: recorded, never blocking a comparison."""
    import psutil

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
    return informational
