"""The child side of a paired A/B of a script (`MLB_ATTACH_MODE=turns`): one arm's turns.

`mlb ab --attach` runs the user's unmodified script in long-lived processes, an A and a B
process at a time, and lets the arms take turns. This sink gets one step record per training
step from the attach hooks (`sink.on_step(record)`, called at each step's end, inside the
optimizer-step post hook). It feeds the steps to `measure.loop.StepLoop`, the warm-up detection
every path uses, and once the warm-up is over it says `{"event":"measuring"}` on the status fd
and blocks at that step's end, reading the control fd. Blocking there is safe: the script just
waits inside `optimizer.step()`, holding nothing another process needs.

- `{"cmd":"go","seconds":T}`: measure T seconds of steps (at least `min_steps`), then write
  `{"event":"turn","steps":[…]}` and block again. The step that spans the wait is not kept
  (the hooks hand a step over at the next step's first boundary, so the wait falls inside the
  next step's interval; and the other arm's turn evicted the caches): on the host clock it is
  the first step after the wait; on a GPU, whose steps reach the sink once their events have
  completed, steps queued before the wait may come first, so it is the first one at least
  half as long as the wait.
- `{"cmd":"stop"}`, or the control fd closing (the parent is gone): the script ends at once
  with exit code 0 (`SystemExit(0)`: its `finally` blocks and the DataLoader's shutdown run,
  and no traceback is printed, which a `KeyboardInterrupt` from inside the hook would do).
- The script ends on its own during a turn: `close()` (an `atexit` hook) writes the steps
  measured so far as a turn marked `"partial": true`, so a short script still gives a turn.

A step as written: `{"step": total s, "stages": {name: s}, "samples": n, "micro_batches": k,
"mem": {"peak": B, "reserved": B | null, "held": {stage: B}}}` (mem only where the record has
it: the hooks' `memory`, a `measure.memory_step.StepMemory`); `turn_memory` gives a turn's
medians of it back as one `StepMemory`, which `mlb ab`'s memory rule judges.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.loop import StepLoop, StopRule
from mlbaseline.measure.memory_step import StepMemory, median_memory

CONTROL_FD = "MLB_ATTACH_CONTROL_FD"
STATUS_FD = "MLB_ATTACH_STATUS_FD"
MIN_STEPS = 3  # a turn's median needs a few steps, whatever --turn-s is


class ProtocolError(Exception):
    """The parent sent something this sink cannot follow."""


def _field(record: Any, name: str, default: Any = None) -> Any:
    """A step record's field, whether the hooks give a mapping or an object."""
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def step_entry(record: Any) -> dict[str, Any]:
    """The JSON form of one step record in a turn event."""
    entry: dict[str, Any] = {
        "step": float(_field(record, "total_s")),
        "stages": {str(k): float(v) for k, v in (_field(record, "stages") or {}).items()},
        "samples": int(_field(record, "samples", 0) or 0),
        "micro_batches": int(_field(record, "micro_batches", 1) or 1),
    }
    mem = _field(record, "mem") or memory_entry(_field(record, "memory"))
    if mem:
        entry["mem"] = dict(mem)
    return entry


def memory_entry(memory: StepMemory | None) -> dict[str, Any] | None:
    """A step's memory as a turn's `"mem"`: the peak, the reserved pool, held bytes per stage."""
    if memory is None or memory.peak is None:
        return None
    held = {str(k): int(v) for k, v in memory.held.items()}
    return {"peak": int(memory.peak), "reserved": memory.reserved, "held": held}


def turn_memory(steps: Sequence[Mapping[str, Any]]) -> StepMemory | None:
    """A turn's memory: the median over its steps of the peak, the reserved pool and each
    stage's held bytes, over the steps whose memory was read (on the host clock one in
    several: `measure.step_cutter.MEMORY_EVERY`); None where none was."""
    mems = [m for m in (s.get("mem") for s in steps) if m and m.get("peak") is not None]
    if not mems:
        return None
    return median_memory(
        [StepMemory(dict(m.get("held") or {}), m["peak"], m.get("reserved")) for m in mems]
    )


class TurnSink:
    """Warm-up, then turns on command. `control`: the parent's commands (one JSON object a
    line), `status`: where events go (a callable taking one event dict; `fd_writer` makes one
    from a file descriptor). `exit` ends the script (default: raise SystemExit(0))."""

    def __init__(
        self,
        control: IO[str],
        status: Callable[[dict[str, Any]], None],
        clock: Clock | None = None,
        rule: StopRule | None = None,
        exit: Callable[[], None] | None = None,
    ) -> None:
        self.control = control
        self.status = status
        self.clock = clock or PerfClock()
        self.loop: StepLoop[None] = StepLoop(rule or StopRule(max_time_s=1e9), self.clock)
        self.exit = exit or _exit_cleanly
        self.steps: list[dict[str, Any]] = []
        self.collecting = False
        self.skip = False  # a step that spans the wait is still to come: not kept
        self.waited_s = 0.0  # how long the last wait was
        self.deadline_ns = 0
        self.min_steps = MIN_STEPS
        self.turns = 0
        self.seen = 0

    def on_step(self, record: Any) -> None:
        """One finished training step (called by the hooks at the step's end)."""
        self.seen += 1
        if self.loop.warmup is None:
            self.loop.begin()  # the loop only needs the values; the step's own time is given
            self.loop.end(None, float(_field(record, "total_s")))
            if self.loop.warmup is not None:
                self._say({"event": "measuring", "warmup_steps": self.loop.warmup})
                self._wait()
            return
        if not self.collecting:
            return
        if self.skip and float(_field(record, "total_s")) >= 0.5 * self.waited_s:
            self.skip = False  # the step the wait fell into
            return
        self.steps.append(step_entry(record))
        if self.clock.now_ns() >= self.deadline_ns and len(self.steps) >= self.min_steps:
            self._emit(partial=False)
            self._wait()

    def _emit(self, partial: bool) -> None:
        event: dict[str, Any] = {"event": "turn", "turn": self.turns, "steps": self.steps}
        if partial:
            event["partial"] = True
        self._say(event)
        self.turns += 1
        self.steps = []
        self.collecting = False

    def _say(self, event: dict[str, Any]) -> None:
        try:
            self.status(event)
        except BrokenPipeError:  # the parent is gone: nobody reads, nobody will say go
            self.exit()

    def _wait(self) -> None:
        """Block until the parent says go (→ a turn starts) or stop (→ the script ends)."""
        start = self.clock.now_ns()
        try:
            command = self._read()
        except ProtocolError as exc:
            self._say({"event": "error", "message": str(exc)})
            command = {"cmd": "stop"}
        if command.get("cmd") == "stop":
            self.exit()
            return
        self.min_steps = int(command.get("min_steps", MIN_STEPS))
        now = self.clock.now_ns()
        self.waited_s = (now - start) / 1e9
        self.deadline_ns = now + round(float(command["seconds"]) * 1e9)
        self.collecting, self.skip, self.steps = True, True, []

    def _read(self) -> dict[str, Any]:
        line = self.control.readline()
        if not line:  # the parent is gone: nobody will ever say go
            return {"cmd": "stop"}
        try:
            command = json.loads(line)
        except json.JSONDecodeError:
            raise ProtocolError(f"control: not JSON: {line.strip()[:80]!r}") from None
        if not isinstance(command, dict) or command.get("cmd") not in ("go", "stop"):
            raise ProtocolError(f"control: unknown command {line.strip()[:80]!r}")
        if command["cmd"] == "go":
            seconds = command.get("seconds")
            if not isinstance(seconds, int | float) or seconds <= 0:
                raise ProtocolError(f"control: go needs seconds > 0, got {seconds!r}")
        return command

    def close(self) -> None:
        """The script is ending: a turn under way is written with what it measured."""
        event: dict[str, Any] | None = None
        if self.collecting and self.steps:
            event = {"event": "turn", "turn": self.turns, "steps": self.steps, "partial": True}
        elif self.loop.warmup is None:
            why = f"the script ended after {self.seen} steps, before its warm-up was over"
            event = {"event": "error", "message": why}
        self.collecting, self.steps = False, []
        if event is not None:
            with contextlib.suppress(BrokenPipeError):  # at exit, a gone parent is no error
                self.status(event)


def _exit_cleanly() -> None:
    raise SystemExit(0)


def fd_writer(fd: int) -> Callable[[dict[str, Any]], None]:
    """An event writer on an inherited fd: one JSON line per event, written whole."""

    def write(event: dict[str, Any]) -> None:
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write


def start(environ: Mapping[str, str] | None = None) -> TurnSink:
    """The turn sink of this child (`from_env`), its `close` run when the script ends: what
    the attach boot installs the hooks with in turn mode."""
    sink = from_env(environ)
    atexit.register(sink.close)
    return sink


def from_env(environ: Mapping[str, str] | None = None) -> TurnSink:
    """The sink of a child started by `mlb ab --attach`: its fds from the environment."""
    env = os.environ if environ is None else environ
    try:
        control_fd, status_fd = int(env[CONTROL_FD]), int(env[STATUS_FD])
    except (KeyError, ValueError) as exc:
        raise ProtocolError(f"turn mode needs {CONTROL_FD} and {STATUS_FD}: {exc}") from None
    # line-buffered text over the inherited pipe; closefd: the fd is this sink's for good
    control = os.fdopen(control_fd, "r", buffering=1, encoding="utf-8")
    return TurnSink(control, fd_writer(status_fd))


__all__ = [
    "CONTROL_FD",
    "MIN_STEPS",
    "STATUS_FD",
    "TurnSink",
    "fd_writer",
    "from_env",
    "start",
    "step_entry",
    "turn_memory",
]
