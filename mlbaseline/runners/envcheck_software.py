"""env-check: the software checks (versions against pins, the torch build, flags, threads)."""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from mlbaseline.config import Config
from mlbaseline.errors import ConfigError
from mlbaseline.measure.gpu import GpuInfo
from mlbaseline.results import Check
from mlbaseline.runners.envcheck_common import _gpu_severity, _onoff

PIN_KEYS = ("torch", "torchvision", "cuda", "cudnn", "driver")


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
