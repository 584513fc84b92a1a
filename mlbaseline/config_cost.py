"""The `cost` section of the config: the price of the machine, which turns the measured
throughput into cost per 1k samples and per epoch (`comparison.cost`). Optional: with no price,
no cost is shown anywhere (never a made-up one).

Its own module because config.py is at its size limit; config.py registers it as `Config.cost`.
Nothing here imports config.py (config.py imports this): plain fields with help metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlbaseline.errors import ConfigError


@dataclass(frozen=True)
class CostConfig:
    """What the machine costs (an hour of it, in `currency`); unset: no cost figures."""

    per_hour: float | None = field(
        default=None,
        metadata={"help": "Price of an hour of this machine (unset: no cost figures).", "gt": 0},
    )
    currency: str = field(
        default="USD", metadata={"help": "Currency of the prices, as shown (e.g. USD, EUR)."}
    )
    per_hour_by_gpu: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "help": "Price per hour by machine: a GPU (or CPU) name substring -> price, e.g. "
            "{H100: 2.5}; the longest matching name wins over per_hour."
        },
    )

    def __post_init__(self) -> None:
        # the config builder checks ranges of scalars and lists, not a mapping's values
        for name, price in self.per_hour_by_gpu.items():
            if not name.strip():
                raise ConfigError("cost.per_hour_by_gpu: an empty machine name matches everything")
            if not (math.isfinite(price) and price > 0):
                raise ConfigError(f"cost.per_hour_by_gpu.{name}: must be > 0, got {price}")
        if not self.currency.strip():
            raise ConfigError("cost.currency: must not be empty")
