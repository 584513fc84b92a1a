"""What the attach tests turn in the five scripts, through the environment.

- `MLB_TEST_BUSY=stage:seconds[,stage:seconds]`: busy-wait that long (a `perf_counter` spin, so
  the wait is wall time whatever the load) at the named place inside the script; a stage the
  script does not offer is an error, so a test can never inject into nothing.
- `MLB_TEST_EXIT=N`: the script prints `TRAINING DONE …` and exits with N (default 0).
- `MLB_TEST_STEPS=N`: optimizer steps to train (each script has its default).
Not part of the scripts' "public example" style: the test's own instrument, kept out of them.
"""

from __future__ import annotations

import os
import sys
import time

_BUSY: dict[str, float] = {}


def configure(offered: set[str]) -> None:
    """Read MLB_TEST_BUSY; refuse a stage this script cannot busy-wait in."""
    spec = os.environ.get("MLB_TEST_BUSY", "").strip()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        stage, _, seconds = item.partition(":")
        if stage not in offered:
            sys.exit(f"MLB_TEST_BUSY: {stage!r} is not one of {sorted(offered)}")
        _BUSY[stage] = float(seconds)


def busy(stage: str) -> None:
    """Spin for the configured seconds of this stage (nothing when none is configured)."""
    seconds = _BUSY.get(stage)
    if not seconds:
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def steps(default: int) -> int:
    return int(os.environ.get("MLB_TEST_STEPS", default))


def finish(summary: str) -> None:
    """The known last line and exit code the tests compare with and without `mlb attach`."""
    print(f"TRAINING DONE {summary}", flush=True)
    print("script stderr: finished", file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("MLB_TEST_EXIT", "0")))
