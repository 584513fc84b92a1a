"""What the env-check modules share: decimal GB, the value texts and the GPU severity rule."""

from __future__ import annotations

from mlbaseline import formatting
from mlbaseline.config import Config

GB = 1e9  # thresholds in config are decimal GB, like the numbers printed on cards and DIMMs


def _gb(n: float | None) -> str:
    return formatting.gigabytes(n)


def _pct(x: float | None) -> str:
    return formatting.percent(x, 0, missing="?")


def _onoff(flag: bool | None) -> str:
    return "?" if flag is None else ("on" if flag else "off")


def _gpu_severity(cfg: Config) -> tuple[str, str]:
    """A busy or hot GPU spoils a GPU run; for a CPU run (workload.device: cpu) it is a warning."""
    if cfg.workload.device == "cpu":
        return "warn", " (workload.device is cpu: a warning only)"
    return "fail", ""
