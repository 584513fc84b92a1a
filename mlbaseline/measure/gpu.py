"""GPU state through a small probe interface over nvidia-ml-py (module `pynvml`).

`pynvml` is imported lazily, only by `NvmlProbe`; everything else sees the `GpuProbe` protocol,
so tests pass a fake and CPU-only machines never import NVML. The probe only reads: it never
resets, reclocks or reconfigures a GPU.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class GpuProbeError(Exception):
    """An NVML call failed; callers record a gap or a `skip` instead of dying."""


@dataclass(frozen=True)
class GpuInfo:
    """Static and slow-changing facts about one device."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    temperature_c: float | None
    throttle_reasons: list[str] = field(default_factory=list)
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_enabled: bool | None = None
    compute_processes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuSample:
    """One telemetry reading. `kernel_active_pct` is NVML's 'utilization.gpu': the share of the
    sample period during which at least one kernel was running — not SM or Tensor Core load."""

    index: int
    kernel_active_pct: float
    memory_used_bytes: int
    temperature_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    throttle_reasons: list[str] = field(default_factory=list)


class GpuProbe(Protocol):
    def available(self) -> tuple[bool, str]:
        """(True, "") when a driver answers; else (False, reason)."""
        ...

    def driver_version(self) -> str | None: ...

    def devices(self) -> list[GpuInfo]: ...

    def sample(self, index: int) -> GpuSample: ...

    def total_energy_mj(self, index: int) -> int | None:
        """Energy used since the driver loaded, in mJ (NVML's total-energy counter, Volta and
        newer); None where the device or driver has no such counter."""
        ...

    def close(self) -> None: ...


class NullProbe:
    """No GPU here (or GPU probing disabled)."""

    def __init__(self, reason: str = "no NVIDIA driver found") -> None:
        self.reason = reason

    def available(self) -> tuple[bool, str]:
        return False, self.reason

    def driver_version(self) -> str | None:
        return None

    def devices(self) -> list[GpuInfo]:
        return []

    def sample(self, index: int) -> GpuSample:
        raise GpuProbeError(self.reason)

    def total_energy_mj(self, index: int) -> int | None:
        return None

    def close(self) -> None:
        pass


# NVML throttle-reason bits (nvmlClocksEventReason*); names kept short for reports.
_THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def decode_throttle(mask: int) -> list[str]:
    """Bit mask → names; idle is not a throttle worth warning about, but is listed."""
    return [name for bit, name in _THROTTLE_BITS.items() if mask & bit]


class NvmlProbe:
    """The real probe. Every NVML error becomes GpuProbeError at this boundary."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._reason = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
        except ImportError:
            self._reason = "nvidia-ml-py (pynvml) is not installed"
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self._reason = f"no NVIDIA driver ({exc.__class__.__name__}: {exc})"

    def available(self) -> tuple[bool, str]:
        return (self._nvml is not None, self._reason)

    def _call(self, fn: str, *args: Any) -> Any:
        if self._nvml is None:
            raise GpuProbeError(self._reason)
        try:
            return getattr(self._nvml, fn)(*args)
        except Exception as exc:
            raise GpuProbeError(f"{fn}: {exc}") from exc

    def _optional(self, fn: str, *args: Any) -> Any:
        try:
            return self._call(fn, *args)
        except GpuProbeError:
            return None

    def driver_version(self) -> str | None:
        v = self._optional("nvmlSystemGetDriverVersion")
        return v.decode() if isinstance(v, bytes) else v

    def _handle(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def _throttle(self, h: Any) -> list[str]:
        mask = self._optional("nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is None:
            mask = self._optional("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return decode_throttle(int(mask)) if mask is not None else []

    def devices(self) -> list[GpuInfo]:
        if self._nvml is None:
            return []
        out = []
        for i in range(int(self._call("nvmlDeviceGetCount"))):
            h = self._handle(i)
            name = self._call("nvmlDeviceGetName", h)
            uuid = self._optional("nvmlDeviceGetUUID", h) or ""
            mem = self._call("nvmlDeviceGetMemoryInfo", h)
            temp = self._optional("nvmlDeviceGetTemperature", h, 0)  # NVML_TEMPERATURE_GPU
            mig = self._optional("nvmlDeviceGetMigMode", h)
            ecc = self._optional("nvmlDeviceGetEccMode", h)
            procs = self._optional("nvmlDeviceGetComputeRunningProcesses", h) or []
            persistence = self._optional("nvmlDeviceGetPersistenceMode", h)
            out.append(
                GpuInfo(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    memory_total_bytes=int(mem.total),
                    memory_used_bytes=int(mem.used),
                    temperature_c=float(temp) if temp is not None else None,
                    throttle_reasons=self._throttle(h),
                    persistence_mode=bool(persistence) if persistence is not None else None,
                    mig_mode=bool(mig[0]) if mig is not None else None,
                    ecc_enabled=bool(ecc[0]) if ecc is not None else None,
                    compute_processes=len(procs),
                )
            )
        return out

    def sample(self, index: int) -> GpuSample:
        h = self._handle(index)
        util = self._call("nvmlDeviceGetUtilizationRates", h)
        mem = self._call("nvmlDeviceGetMemoryInfo", h)
        temp = self._optional("nvmlDeviceGetTemperature", h, 0)
        power = self._optional("nvmlDeviceGetPowerUsage", h)  # milliwatts
        clock = self._optional("nvmlDeviceGetClockInfo", h, 1)  # NVML_CLOCK_SM
        return GpuSample(
            index=index,
            kernel_active_pct=float(util.gpu),
            memory_used_bytes=int(mem.used),
            temperature_c=float(temp) if temp is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            throttle_reasons=self._throttle(h),
        )

    def total_energy_mj(self, index: int) -> int | None:
        # NOT_SUPPORTED before Volta, on some vGPU and MIG setups: None, and the caller falls
        # back to integrating the sampled power draw
        value = self._optional("nvmlDeviceGetTotalEnergyConsumption", self._handle(index))
        return int(value) if value is not None else None

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down: nothing useful to report
                self._nvml.nvmlShutdown()
            self._nvml = None


def default_probe() -> GpuProbe:
    """The real NVML probe if a driver answers, else a NullProbe saying why."""
    probe = NvmlProbe()
    ok, reason = probe.available()
    return probe if ok else NullProbe(reason)
