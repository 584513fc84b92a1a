"""What the attach tests turn in the five scripts, through the environment.

- `MLB_TEST_BUSY=stage:seconds[:calls][,…]`: busy-wait that long (a `perf_counter` spin, so the
  wait is wall time whatever the load) at the named place inside the script, on every other
  optimizer step: the first `calls` passes there (the passes of one step, default 1: the
  micro-batches, for a loss), not the next `calls`, and so on. The steps without it are the
  same run's own "without": the with/without difference sees the same load and process. A
  stage the script does not offer is an error, so a test can never inject into nothing.
- `MLB_TEST_EXIT=N`: the script prints `TRAINING DONE …` and exits with N (default 0).
- `MLB_TEST_STEPS=N`: optimizer steps to train (each script has its default).
- `MLB_TEST_BUSY_LOG=PATH`: each busy-wait's stage and actual length in seconds, one a line, e.g.
  `loss 0.0025013` (a spin ends at the first clock reading past its end: on a loaded machine it
  can overrun; the tests take what it really lasted as the truth). Written in batches, so that
  the log costs nothing per spin.
Not part of the scripts' "public example" style: the test's own instrument, kept out of them.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

_BUSY: dict[str, tuple[float, int]] = {}  # stage -> (seconds, passes per step)
_PASSES: dict[str, int] = {}
_SPUN: list[tuple[str, float]] = []  # actual spin lengths not yet written to the log
_LOG_FD: int | None = None
_LOG_EVERY = 8


def configure(offered: set[str]) -> None:
    """Read MLB_TEST_BUSY; refuse a stage this script cannot busy-wait in."""
    spec = os.environ.get("MLB_TEST_BUSY", "").strip()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        stage, seconds, *calls = item.split(":")
        if stage not in offered:
            sys.exit(f"MLB_TEST_BUSY: {stage!r} is not one of {sorted(offered)}")
        _BUSY[stage] = (float(seconds), int(calls[0]) if calls else 1)
    log = os.environ.get("MLB_TEST_BUSY_LOG")
    if log and _BUSY:
        global _LOG_FD
        _LOG_FD = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        atexit.register(_write_log)


def _write_log() -> None:
    if _LOG_FD is not None and _SPUN:
        os.write(_LOG_FD, "".join(f"{stage} {s!r}\n" for stage, s in _SPUN).encode())
        _SPUN.clear()


def busy(stage: str) -> None:
    """Spin for the configured seconds of this stage, on every other step's passes.

    The scripts call it at their stage's very end, right before the call that starts the next
    stage: work that runs right after a long spin runs slower (0.8 ms of MLP took +27% after a
    10 ms spin and +63% after 20 ms on the test machine; a 0.8 ms LSTM backward +12-22%: caches
    and predictors cooled by the machine's other programs), and that slowdown, real time in
    whichever stage runs it, is not the spin's; right before the boundary it is the next
    stage's. A spin inside a loss function, say, left the framework's code on the way to
    backward cooled in the loss stage: +3% of the spin on the CI machine."""
    if stage not in _BUSY:
        return
    seconds, calls = _BUSY[stage]
    passes = _PASSES[stage] = _PASSES.get(stage, 0) + 1
    if (passes - 1) // calls % 2:
        return
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        now = time.perf_counter()
    if _LOG_FD is not None:
        _SPUN.append((stage, now - start))
        if len(_SPUN) >= _LOG_EVERY:
            _write_log()


def steps(default: int) -> int:
    return int(os.environ.get("MLB_TEST_STEPS", default))


def finish(summary: str) -> None:
    """The known last line and exit code the tests compare with and without `mlb attach`."""
    print(f"TRAINING DONE {summary}", flush=True)
    print("script stderr: finished", file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("MLB_TEST_EXIT", "0")))
