"""The measurement loop: run a step function until warm-up is over and the stop rule is met.

Warm-up is detected, not assumed: after at least `warmup_min` steps, the newest window of
`warmup_window` step values is tested with `stats.detect_warmup` (a split-half test); the first
window that settles ends the warm-up. If none settles by `warmup_max`, warm-up is capped there
(`warmup_capped`, a warning for the result).

Stop rule, over the measured (post-warm-up) steps: minimum time AND minimum steps AND stability
(`stats.windows_stable` over the last `n_windows` windows); capped by `max_steps` measured steps
and `max_time_s` since the first step. `LoopResult.stop_reason` says which one ended the run:
"stable", "max_steps", "max_time" or "interrupted" (Ctrl-C; the steps so far are kept).

In a multi-process run every rank must take the same decision at the same step, or collectives
deadlock: `agree` maps this process's `Decision` to the one all ranks follow (rank 0's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from mlbaseline import stats
from mlbaseline.measure.clock import Clock, PerfClock

T = TypeVar("T")

STOP_REASONS = ("stable", "max_steps", "max_time", "interrupted")


@dataclass(frozen=True)
class StopRule:
    """Warm-up and stop-rule parameters (seconds and step counts)."""

    min_time_s: float = 0.0
    min_steps: int = 16
    max_steps: int = 500
    max_time_s: float = 120.0
    tolerance: float = 0.03
    n_windows: int = 3
    window: int = 8
    warmup_min: int = 3
    warmup_max: int = 50
    warmup_window: int = 8
    warmup_tolerance: float = 0.05

    def __post_init__(self) -> None:
        if self.warmup_window < 4:
            raise ValueError("warmup_window must be >= 4 (two values per half)")

    @classmethod
    def from_config(cls, t: Any) -> StopRule:
        """From a `ThroughputConfig` (or anything with the same field names)."""
        return cls(
            min_time_s=t.min_time_s,
            min_steps=t.min_steps,
            max_steps=t.max_steps,
            max_time_s=t.max_time_s,
            tolerance=t.stability_tolerance,
            n_windows=t.stability_windows,
            window=t.window,
            warmup_min=t.warmup_min,
            warmup_max=max(t.warmup_min, t.warmup_max),
            warmup_window=max(4, t.window),
            warmup_tolerance=getattr(t, "warmup_tolerance", 0.05),
        )


@dataclass(frozen=True)
class Decision:
    """What the loop decided after one step: the warm-up length once known, and whether to
    stop (with the reason)."""

    warmup: int | None = None
    warmup_capped: bool = False
    stop: str | None = None


_UNDECIDED = Decision()  # frozen: one for every step still warming up


@dataclass
class LoopResult(Generic[T]):
    """Every step's record, split by `warmup` into warm-up and measured steps."""

    records: list[T]
    warmup: int
    stop_reason: str
    warmup_capped: bool = False
    warmup_settled: bool = True
    # the measured steps' own time: each step from begin() to end(), summed; what runs
    # between steps (the user's loop outside them, a save() long after) is not counted
    measured_time_s: float = 0.0
    total_time_s: float = 0.0
    values: list[float] = field(default_factory=list)

    @property
    def warmup_records(self) -> list[T]:
        return self.records[: self.warmup]

    @property
    def measured(self) -> list[T]:
        return self.records[self.warmup :]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop_reason": self.stop_reason,
            "warmup_steps": self.warmup,
            "measured_steps": len(self.records) - self.warmup,
            "warmup_capped": self.warmup_capped,
            "warmup_settled": self.warmup_settled,
            "measured_time_s": self.measured_time_s,
            "total_time_s": self.total_time_s,
        }


class _Decider:
    """The pure decision logic, separate from running steps so it can be tested alone."""

    def __init__(self, rule: StopRule) -> None:
        self.rule = rule

    def warmup(self, values: list[float], elapsed_s: float) -> Decision:
        r = self.rule
        j = len(values) - r.warmup_window  # start of the newest full window
        if j >= r.warmup_min:
            tail = values[j:]
            k = stats.detect_warmup(tail, 0, r.warmup_window, r.warmup_tolerance)
            if k == 0:
                return Decision(warmup=j)
            if j >= r.warmup_max:
                return Decision(warmup=r.warmup_max, warmup_capped=True)
        if elapsed_s >= r.max_time_s:
            # the time cap ends warm-up too; keep at least one measured step
            return Decision(
                warmup=min(r.warmup_min, max(len(values) - 1, 0)),
                warmup_capped=True,
                stop="max_time",
            )
        return _UNDECIDED

    def stop(
        self, values: list[float], warmup: int, measured_s: float, elapsed_s: float
    ) -> str | None:
        """Stop or not, over the measured steps `values[warmup:]`. Only the newest windows are
        tested, and only they are copied: a step's decision costs the same at step 10 as at
        step 10,000 (the library API runs it in the user's loop)."""
        r = self.rule
        n = len(values) - warmup
        if n >= r.min_steps and measured_s >= r.min_time_s:  # (the copy only where it is tested)
            tail = values[max(warmup, len(values) - r.n_windows * r.window) :]
            if stats.windows_stable(tail, r.n_windows, r.window, r.tolerance):
                return "stable"
        if n >= r.max_steps:
            return "max_steps"
        if elapsed_s >= r.max_time_s:
            return "max_time"
        return None


def _decide(
    decider: _Decider, held: Decision, values: list[float], starts: list[int], now: int, t0: int
) -> Decision:
    """This step's decision: the warm-up held so far (`held`), or the decider's verdict on it;
    then, once warm, whether to stop."""
    elapsed = (now - t0) / 1e9
    decision = held
    if held.warmup is None:
        decision = decider.warmup(values, elapsed)
    if decision.warmup is not None and decision.stop is None:
        measured_s = (now - starts[decision.warmup]) / 1e9 if decision.warmup < len(values) else 0
        stop = decider.stop(values, decision.warmup, measured_s, elapsed)
        if stop is not None:  # (a Decision made only when it says more: this runs every step)
            decision = Decision(decision.warmup, decision.warmup_capped, stop)
    return decision


class StepLoop(Generic[T]):
    """The warm-up and stop decisions, fed one step at a time: `begin()` before a step,
    `end(record, value)` after it (→ this step's `Decision`), `drop()` for a step that failed,
    `end_early(reason)` when the loop ends without the rule (Ctrl-C), `result()` at the end.
    `run_steps` drives one around a step function; the library API (`mlbaseline.api`) feeds
    it the steps of the user's own loop, so both take the same decisions at the same steps."""

    def __init__(
        self,
        rule: StopRule,
        clock: Clock | None = None,
        agree: Callable[[Decision], Decision] | None = None,
    ) -> None:
        self.rule = rule
        self.clock = clock or PerfClock()
        self.agree = agree
        self.records: list[T] = []
        self.values: list[float] = []
        self.starts: list[int] = []
        self.ends: list[int] = []  # each recorded step's end, beside its start
        self.warmup: int | None = None
        self.capped = False
        self.reason = ""  # set once the loop is over: a STOP_REASONS entry or end_early's
        self._decider = _Decider(rule)
        self._held = _UNDECIDED  # the warm-up so far, as a Decision (made again when it moves)
        self._t0 = self.clock.now_ns()

    @property
    def done(self) -> bool:
        return self.reason != ""

    def begin(self) -> None:
        self.starts.append(self.clock.now_ns())

    def end(self, record: T, value: float) -> Decision:
        """Record one finished step; `value` is the number the warm-up and stability tests look
        at (the step time)."""
        self.records.append(record)
        self.values.append(float(value))
        now = self.clock.now_ns()
        self.ends.append(now)
        held = self._held
        if held.warmup != self.warmup or held.warmup_capped != self.capped:
            held = self._held = Decision(self.warmup, self.capped)
        decision = _decide(self._decider, held, self.values, self.starts, now, self._t0)
        if self.agree is not None:
            decision = self.agree(decision)
        if decision.warmup is not None and self.warmup is None:
            self.warmup, self.capped = decision.warmup, decision.warmup_capped
        if decision.stop is not None:
            self.reason = decision.stop
        return decision

    def end_quiet(self, records: list[T], values: list[float]) -> bool:
        """Several finished steps at once, recorded as `end()` one by one would where none of
        them can take a decision: the warm-up known, and the last of them short of each stop
        threshold (steps, measured time, the time cap: they only grow from one step to the
        next, and the stability test runs only past the first two). False, nothing recorded,
        where one could: then `end()` each (`runners.attach_child`'s hand-over of 16)."""
        warmup, r = self.warmup, self.rule
        if warmup is None or self.agree is not None or self.reason:
            return False
        now = self.clock.now_ns()
        n = len(self.values) + len(values) - warmup
        measured_s = (now - self.starts[warmup]) / 1e9 if warmup < len(self.starts) else 0.0
        if (
            (n >= r.min_steps and measured_s >= r.min_time_s)
            or n >= r.max_steps
            or (now - self._t0) / 1e9 >= r.max_time_s
        ):
            return False
        k = len(records)
        self.records.extend(records)
        self.values.extend(float(v) for v in values)
        self.starts.extend([now] * k)
        self.ends.extend([now] * k)
        return True

    def drop(self) -> None:
        """A step begun and not ended (it failed, or an epoch ended inside it) is no step."""
        if len(self.starts) > len(self.records):
            self.starts.pop()

    def end_early(self, reason: str) -> None:
        """The loop ends without the rule: a step begun and not ended is dropped, and a step
        `end()` was recording when the interrupt came (some of its lists longer) too."""
        self.drop()
        n = min(len(self.records), len(self.values), len(self.ends))
        del self.records[n:], self.values[n:], self.ends[n:], self.starts[n:]
        self.reason = self.reason or reason

    def result(self) -> LoopResult[T]:
        end = self.clock.now_ns()
        warmup, records = self.warmup, self.records
        settled = warmup is not None and not self.capped
        if warmup is None:  # ended during warm-up: keep what there is, say so
            warmup = min(self.rule.warmup_min, len(records))
        # recorded steps only (a step begun and not ended has no end): their own time
        pairs = zip(self.starts[warmup:], self.ends[warmup:], strict=False)
        measured_s = sum(e - s for s, e in pairs) / 1e9
        return LoopResult(
            records=records,
            warmup=warmup,
            stop_reason=self.reason,
            warmup_capped=self.capped,
            warmup_settled=settled,
            measured_time_s=measured_s,
            total_time_s=(end - self._t0) / 1e9,
            values=self.values,
        )


def run_steps(
    step: Callable[[], T],
    rule: StopRule,
    value: Callable[[T], float],
    clock: Clock | None = None,
    on_step: Callable[[int, bool], None] | None = None,
    agree: Callable[[Decision], Decision] | None = None,
) -> LoopResult[T]:
    """Call `step()` until the stop rule says stop; `value(record)` is the number the warm-up
    and stability tests look at (the step time). `on_step(n_steps, measuring)` reports
    progress. Ctrl-C ends the loop with stop_reason "interrupted" and keeps the steps so far;
    any other exception propagates (the caller records it, e.g. an out-of-memory)."""
    loop: StepLoop[T] = StepLoop(rule, clock, agree)
    # the whole iteration, not only the step: a Ctrl-C or SIGTERM that lands between steps
    # (in the stop rule, or the progress bar's redraw: a busy CI runner's window) also ends
    # the loop with the steps so far, where it used to escape and take them all with it
    try:
        while not loop.done:
            loop.begin()
            record = step()
            loop.end(record, value(record))
            if on_step is not None:
                on_step(len(loop.records), loop.warmup is not None)
    except KeyboardInterrupt:
        loop.end_early("interrupted")
    return loop.result()
