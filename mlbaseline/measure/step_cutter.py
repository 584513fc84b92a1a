"""The step cutter of `mlb attach` (pure Python, no torch): boundary events in, one step
record per training step out (`measure.hooks` feeds it from torch's hooks; tests feed it on a
fake clock).

Each boundary is a `Marker` mark (the host clock, or a CUDA event read once it has completed:
nothing waits for the device). The marks cut the step's interval (previous step end → this
step end) into contiguous segments, each labelled with a stage or `residual`, so the stages and
the residual add up to the interval exactly; eval and the sink's own time are cut out. The
rules that label the segments are in `measure.hooks`' docstring.

Memory (issue 28): the recorder of `measure.memory_step` (the stage timer's) is read right after
the mark at every boundary of a read step, so a stage's held bytes are the sum over its segments
of end − start; its step (the peak, the reserved pool) runs from one close to the next. On the
host clock a reading's own time is mlb's, cut out like the sink's (`Seg.c`, `memread`), not
residual (there it was 3–10% of a small script's step); CUDA events see no host-side reads.

The hot path (a sink with `handover_every` > 1 on the host clock, once steps are optimizer
steps) logs each boundary, with a read step's readings, and the log is cut later by the same
code (`Recorder._replay`; when: `measure.step_log`). The records are the same either way
(`tests/test_step_cutter_log.py`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mlbaseline.measure.marks import CpuMarker, CudaMarker, Marker
from mlbaseline.measure.memory_step import StepMemoryRecorder
from mlbaseline.measure.step_handover import HandOver
from mlbaseline.measure.step_log import (
    _BEGIN,
    _BEGIN_CLOSURE,
    _CLOSURE_END,
    _END,
    _HELD,
    _MLB,
    _READ,
    HANDOVER_GAP_NS,
    HANDOVER_GAP_S,
    MAX_LOG,
    MAX_SETTLE_LOG,
    MEMORY_DENSE,
    MEMORY_EVERY,
    MEMORY_GAP_S,
    MemoryCadence,
    entry,
    open_tally,
    tally,
    unpack,
)
from mlbaseline.measure.step_types import (
    EVAL,
    LABEL,
    MEMREAD,
    MLB,
    RESIDUAL,
    STAGES,
    Closed,
    HookStep,
    OpenStep,
    Seg,
    Sink,
)

_UPDATE = ("opt", "aux")  # an optimizer step, or a zero_grad / clipping / scheduler step
_OPT_BEGIN = ("opt", "begin")
_OPT_END = entry(_END, "opt")  # an optimizer step's end's code in the log


class Recorder(HandOver):
    """The step cutter, fed boundary events by the hooks (or by a test, on a fake marker):
    `begin(kind)` / `end()` around an interval (`data`, `h2d`, `fwd`, `efwd`, `lossmod`,
    `bwd`, `opt`, `aux`), `optimizer_created()`. Pure Python, no torch. `memory_for(kind)`:
    the memory recorder for a marker's kind ("cpu", "cuda"; None: no memory)."""

    # Slots, not an instance dict: the hooks read and set these on every boundary, and past
    # 30 attributes CPython 3.11 gives an instance a dict of its own (each access a hinted
    # lookup in a ~2 KB table, cold after a training step's torch work: `make bench`'s attach
    # overhead); a slot is a fixed offset in the one object. The first six, the ones each of
    # the hooks' wrappers reads, share the object's first cache line with its header (a
    # boundary comes after torch's work has evicted them: each line is a miss). (A test may
    # still set another attribute: the hand-over half keeps an instance dict.)
    __slots__ = (  # noqa: RUF023 (in layout order: the hot ones first)
        "busy", "hot", "open", "tid", "log", "now", "max_log", "off", "inner",
        "_cadence", "_closure", "_due", "_eval", "_every", "_given", "_handover_at", "_held",
        "_hot_closing", "_hot_next", "_hot_read", "_in_loss", "_last", "_lazy", "_logged",
        "_memory_for", "_memory_src", "_pending", "_prev", "_queue", "_read_next", "_settle",
        "_settling", "_step", "_stops", "_tallied", "_tally_state", "_training", "_undo",
        "_unfilled", "_window", "aux", "marker", "marker_chosen", "memory", "mode",
        "optimizers", "sink",
    )  # fmt: skip

    def __init__(
        self,
        sink: Sink,
        marker: Marker,
        memory_for: Callable[[str], StepMemoryRecorder | None] | None = None,
    ) -> None:
        self.sink, self.marker = sink, marker
        self._every = max(1, int(getattr(sink, "handover_every", 1)))
        self._cadence = MemoryCadence(sink)  # which steps' memory is read
        self._memory_for = memory_for
        self.memory = memory_for(marker.kind) if memory_for is not None else None
        self._memory_src = self.memory  # the recorder; `memory` is it on a read step, or None
        self._held = 0  # the recorder's reading at the last boundary
        self.off = False
        self.open: str | None = None  # the outermost interval now open
        # an interval is open that nothing else may cut (an optimizer step may: its
        # closure); every patched call reads it first
        self.busy = False
        self.inner = 0  # module calls nested inside it
        self.mode = "undecided"  # "optimizer" | "backward" once known
        self.optimizers = 0
        self.marker_chosen = False
        self.tid: int | None = None  # the thread that records (set by the hooks)
        self._step = OpenStep()
        self._last: Any = None  # the last boundary's mark
        self._prev = ("start", "end")  # the last boundary: (kind, "begin" | "end")
        self._eval = False
        self._pending: int | None = None  # first data segment since the last other interval
        self._queue: deque[Closed] = deque()
        # a step closed since the hand-over was last looked at, or one waits for its marks:
        # the boundaries look again (one attribute read each, not the hand-over's tests)
        self._due = False
        self._closure = False  # an optimizer step's closure is running
        self._init_log(sink)
        self._read_next = False  # the step that begins next has its memory read
        self._in_loss = False  # after a train forward, before its backward
        self._training = False  # a backward or an optimizer step has been seen
        self._window: int | None = None  # the first segment since the last backward's end
        self._undo: tuple[tuple[str, str], int | None] = (self._prev, None)

    def _init_log(self, sink: Sink) -> None:
        """The hot path's state: its log, its memory readings, settling at the end."""
        # the hot path's log (`measure.step_log`: a code and a mark an entry), cut by `_replay`, the
        # objects its entries name (`aux`); `_lazy`: boundaries are logged, not cut; `hot`
        # (`_rehot`): logged, on, no readings due, so that a boundary is a mark (`now()`) and
        # an append, which `measure.hooks`' wrappers do themselves
        self.log: list[int] = []
        self.aux: list[Any] = []
        self._lazy = False
        self.hot = False
        # the marker's mark function (the wrappers read it into a local and call that: a
        # method call on a slot is a generic lookup each time)
        self.now: Callable[[], Any] = self.marker.mark
        self.max_log = 2 * MAX_LOG  # (its items: two an entry)
        # the hot path's readings (`_log_boundary`): the step read (its recorder), whether
        # the next one is, and whether the next boundary that is no update closes the step
        self._hot_read: StepMemoryRecorder | None = None
        self._hot_next = False
        self._hot_closing = False
        # a `_READ` entry's readings, for the close that follows it (`_close`, `_apart`)
        self._given: tuple[Any, Any, Any] | None = None
        # settling at the end (MAX_SETTLE_LOG): the entries tallied, the open step's tally
        # (`open_tally`), the records handed over and not yet filled
        self._settle = bool(getattr(sink, "settle_at_end", False))
        self._settling = False
        self._tallied = 0
        # the entries where a tally does more than note the mark (`tally`'s stops)
        self._stops: list[int] = []
        self._tally_state: list[Any] = []
        self._unfilled: deque[HookStep] = deque()
        self._logged = 0  # optimizer steps in the log
        self._handover_at = 0  # the mark by which they are handed over (HANDOVER_GAP_NS)

    # ------------------------------------------------------------ events

    def add_samples(self, samples: int | None) -> None:
        """The batch size of the open forward, found at its end (keyword inputs)."""
        step = self._step
        if samples and step.need_samples:
            step.samples.append(samples)
            step.need_samples = False

    def optimizer_created(self) -> None:
        self.optimizers += 1

    def switch_marker(self, marker: Marker | None) -> None:
        """Another clock from here (the first train forward found the loop on a GPU): what
        was cut so far on the old one is dropped (the first step: warm-up anyway). None:
        keep this one."""
        self.marker_chosen = True
        if marker is None or marker is self.marker:
            return
        self.log.clear()  # the old clock's marks: dropped
        self.aux.clear()
        self._stops.clear()
        self._lazy, self._logged, self._tallied = False, 0, 0
        self._read_next = self._hot_next = self._hot_closing = False
        self._hot_read = self._given = None
        self.marker, self._last, self._step = marker, None, OpenStep()
        self.now = marker.mark
        if self._memory_for is not None:
            self.memory = self._memory_src = self._memory_for(marker.kind)
            self._cadence.restart()
        self._pending = None
        self._queue.clear()  # marks of the old clock: this one cannot read them
        self._due = False
        self._rehot()

    def turn_off(self) -> None:  # nothing more recorded (the hooks pass every call through)
        self.off, self.hot = True, False

    def _rehot(self) -> None:
        self.hot = self._lazy and not self.off and not self._hot_closing and self._hot_read is None

    def begin(self, kind: str, samples: int | None = None) -> bool:
        """An interval of `kind` starts; nested in an open one it is counted, not timed
        (`end()` must follow either way). False: the recorder is off."""
        if self._lazy and self.open is None and not self.off:
            # the hot path (logging, an outermost interval): the fewest steps, each in the
            # cold caches a training step leaves (`make bench`'s attach overhead)
            self.open, self.busy = kind, kind != "opt"
            log = self.log
            if self._hot_closing or self._hot_read is not None:
                self._log_boundary(_BEGIN, kind, samples)
            else:
                now = self.now  # (the marker's mark, without the marker's own lines)
                log += (entry(_BEGIN, kind, samples or 0), now())
            if len(log) >= self.max_log:
                self._replay()
            return True
        if self.off:
            return False
        closure = False
        if self.open is not None:
            if self.open != "opt" or self.inner or kind == "opt":
                self.inner += 1
                return True
            # optimizer.step(closure) runs the forward and backward itself (Lightning): they
            # are cut as usual, and the step's end closes the optimizer stage
            self._closure = closure = True
        self.open, self.busy = kind, kind != "opt"
        if self._lazy:
            self._log_boundary(_BEGIN_CLOSURE, kind, samples)
            if len(self.log) >= self.max_log:
                self._replay()
            return True
        self._begin_cut(kind, samples, closure, None)
        self._after_event()
        return True

    def end(self, keep: bool = True) -> None:
        """The open interval ends (`keep=False`: an h2d that moved nothing: residual)."""
        if self.off or self.open is None:
            return
        if self.inner:
            self.inner -= 1
            return
        kind, self.open, self.busy = self.open, None, False
        if self._lazy:
            if self._hot_read is None:
                if kind == "opt":  # (an optimizer step that ends inside another's)
                    self._stops.append(len(self.log))
                now = self.now
                self.log += (entry(_END, kind, 0 if keep else 1), now())
            else:
                self._log_boundary(_END, kind, keep)
            return
        self._end_cut(kind, keep, None)
        self._after_event()

    def opt_post(self) -> None:
        """An optimizer step returned (its post hook); on the host clock, once steps are
        optimizer steps, the step's end: is the next step's memory read, and are the logged
        steps due to be cut and handed over (or tallied)? (One function: it runs every step.)"""
        if self._lazy and self.open == "opt" and not self.inner and not self.off:
            # the hot path: the step's end, logged (as `end()` would) and decided at once
            self.open = None
            if self._hot_read is None:
                now = self.now
                mark = now()
                self._stops.append(len(self.log))
                self.log += (_OPT_END, mark)
            else:
                mark = self._log_boundary(_END, "opt", True)
        else:
            mark = self._opt_end()
            if mark is None:
                return
        read = False
        if self._memory_src is not None:
            # the cadence's "not yet" (most steps), without the call
            cad = self._cadence
            since = cad.at
            if since is None or cad.skip + 1 >= cad.every or mark - since >= cad.gap_ns:
                read = cad.due(mark)
            else:
                cad.skip += 1
        if self._lazy:  # the hot path takes the close's readings (`_log_boundary`)
            # (a second optimizer's step in the same step keeps the first one's "read");
            # the close takes readings only where a step on either side of it is read
            self._hot_next = self._hot_next or read
            closing = self._hot_read is not None or self._hot_next
            if closing != self._hot_closing:
                self._hot_closing = closing
                self._rehot()
        elif read:
            self._read_next = True
        if len(self.log) > self._tallied:
            self._logged += 1
            if self._logged == 1:  # the oldest waiting entry's: handed over by this time
                self._handover_at = self.log[self._tallied + 1] + HANDOVER_GAP_NS
            if self._logged >= self._every or mark >= self._handover_at:
                if self._settling:
                    self._tally()
                else:
                    self._replay()

    def _opt_end(self) -> Any:
        """`opt_post` off the hot path: the step's end cut (or logged); its mark where it ends
        a step on the host clock, else None."""
        if self.off:
            return None
        if self.open == "opt":
            self.end()
        elif self.open is None and self._closure:
            # the step ran a closure: the optimizer stage is its last backward's end to here
            self._closure = False
            if self._lazy:
                self._log_boundary(_CLOSURE_END, "opt", None)
            else:
                self._closure_end_cut(None)
                self._after_event()
        else:
            return None
        if self.mode != "optimizer" or self.marker.kind != "cpu":
            return None
        return self.marker.mark()

    # ------------------------------------------------------------ the hot path's log

    def _after_event(self) -> None:
        """After a boundary cut as it came: the hand-over, and whether the next boundaries
        may be logged (see `_replay`)."""
        if self._due:
            self._drain()
        lazy = (
            self._every > 1  # a sink that takes each step at the next step's first boundary
            and self.mode == "optimizer"
            and self.marker.kind == "cpu"
        )
        if lazy and not self._lazy:
            self._take_over()
        self._lazy = lazy
        self._rehot()

    def _take_over(self) -> None:
        """The hot path logs from here on: it carries on the cutter's memory readings (the
        step being read, the next one's decision, a close to come), and a sink that settles at
        the end has the steps cut so far handed over and the open step's tally begun."""
        self._hot_read, self._hot_next = self.memory, self._read_next
        self._read_next = False
        self._hot_closing = self._step.candidate is not None and (
            self._hot_read is not None or self._hot_next
        )
        if not self._settle or self.off:
            return
        if self._queue:
            self._handover()
        self._settling, self.max_log, self._tallied = True, 2 * MAX_SETTLE_LOG, len(self.log)
        self._tally_state = open_tally(self._step.segs, self._step.candidate, self._last)

    def _log_boundary(self, op: int, kind: str, arg: Any) -> Any:
        """Log a boundary where the hot path does more than append it: a step's close (the
        first boundary after an optimizer step that is no update: its readings, `_log_close`),
        or a read step's reading after the mark (a `_HELD` entry after it). Returns the mark.
        `arg`: a begin's batch size, an end's `keep`."""
        if self._hot_closing and op in (_BEGIN, _BEGIN_CLOSURE) and kind != "aux":
            self._hot_closing = False  # an optimizer step: the step goes on, else it closes
            if kind != "opt" and (self._hot_read is not None or self._hot_next):
                self._log_close()
            self._rehot()
        mark = self.marker.mark()
        reading = self._hot_read
        log = self.log
        self._stops.append(len(log))
        log += (entry(op, kind, (0 if arg else 1) if op == _END else arg or 0), mark)
        if reading is not None:
            held = reading.current()
            self._stops.append(len(log))
            log += (entry(_HELD, "", held), self.marker.mark())
        return mark

    def _log_close(self) -> None:
        """The readings `_close` takes where memory is read on either side of a close (the
        closed step's peak; the next step's start), then `_apart`'s mark: a `_READ` entry."""
        closing = self._hot_read
        upcoming = self._memory_src if self._hot_next else None
        self._hot_next = False
        memory = closing.end_step() if closing is not None else None
        held = None
        if upcoming is not None:
            upcoming.begin_step()
            if closing is None:
                held = upcoming.current()
        self._hot_read = upcoming
        self.aux.append((memory, held, upcoming is not None))
        self._stops.append(len(self.log))
        self.log += (entry(_READ, "", len(self.aux) - 1), self.marker.mark())

    def _replay(self) -> None:
        """Cut the logged boundaries, in order, at their logged marks (a read step's
        readings with them), then cut the time this took out of the step (mlb's). When the
        log is cut, and why it is logged at all: `measure.step_log`. A replay ends settling
        at the end: the records handed over by their totals are filled in (`flush`)."""
        # a copy, the log cleared in place: one list for the recorder's life
        log, aux = self.log[:], self.aux[:]
        self.log.clear()
        self.aux.clear()
        self._stops.clear()
        self._logged = self._tallied = 0
        if self._settling:  # settled: hand-overs from here go on as for any batched sink
            self._settling, self.max_log = False, 2 * MAX_LOG
        i, n = 0, len(log)
        while i < n:
            code, mark = log[i], log[i + 1]
            i += 2
            op, kind, arg = unpack(code)
            extra = None  # a read step's reading after the mark: the next entry
            if op <= _BEGIN_CLOSURE and i < n and (log[i] >> 4) & 15 == _HELD:
                extra, i = (log[i] >> 8, log[i + 1]), i + 2
            if op in (_BEGIN, _BEGIN_CLOSURE):
                self._begin_cut(kind, arg or None, op == _BEGIN_CLOSURE, mark, extra)
            elif op == _END:
                self._end_cut(kind, arg == 0, mark, extra)
            elif op == _CLOSURE_END:
                self._closure_end_cut(mark, extra)
            elif op == _READ:  # the next close's readings, taken when it came
                memory, held, self._read_next = aux[arg]
                self._given = (memory, held, mark)
            else:  # _MLB: a tally's time (`_drain`'s reading after it, where memory is read)
                held = aux[arg]
                if held is not None:
                    self._held = held
                if self._last is not None:
                    self._step.segs.append(Seg(MLB, self._last, mark))
                self._last = mark
        self._given = None
        if self._last is not None and not self.off:
            mark = self.marker.mark()
            self._step.segs.append(Seg(MLB, self._last, mark))
            self._last = mark
        self._after_event()

    def _tally(self) -> None:
        """Settling at the end: the steps closed since the last tally go to the sink by their
        totals (`step_log.tally`), records the cut fills in (`flush`); its time is mlb's."""
        log = self.log
        totals = tally(log, self._tallied, self._tally_state, self._stops)
        self._tallied, self._logged = len(log), 0
        records = [HookStep(total / 1e9, {}) for total in totals]
        self._unfilled.extend(records)  # (a record past a stop rule met: filled, not handed)
        take = getattr(self.sink, "on_steps", None)  # several at once, where it takes them so
        if take is not None:
            take(records)
        else:
            for record in records:
                self.sink.on_step(record)
                if not self._settling:
                    break
        if not self._settling:  # the sink settled the log (its stop rule was met)
            return
        self.aux.append(self._hot_read.current() if self._hot_read is not None else None)
        self._stops.append(len(log))
        log += (entry(_MLB, "", len(self.aux) - 1), self.marker.mark())

    # ------------------------------------------------------------ cutting one boundary

    def _begin_cut(
        self, kind: str, samples: int | None, closure: bool, mark: Any, extra: Any = None
    ) -> None:
        """The cut at an outermost interval's start (`mark`: its logged mark; None: now)."""
        if closure:
            self._prev = _OPT_BEGIN
        step = self._step
        if step.candidate is not None:
            if kind == "opt":  # a second optimizer in the same step: the step goes on
                for seg in step.segs[step.candidate :]:
                    if seg.label == RESIDUAL:
                        seg.label = "optimizer"
                step.candidate = None
            elif kind != "aux":
                self._close(step.candidate, "optimizer")
                step = self._step
        # each helper called only where it may act (this runs ~5 times a step): an eval edge
        # at an eval forward or inside an eval stretch, a window before an update, a label
        # other than residual in one of `_gap`'s cases
        if kind == "efwd":
            self._eval_edge(kind)  # the time up to an eval forward is eval's
        if kind in _UPDATE:
            self._open_window(kind)
        if self._in_loss or kind in _UPDATE or self.mode == "backward" or self._prev == _OPT_BEGIN:
            self._cut(self._gap(kind), mark, extra)
        else:
            self._cut(RESIDUAL, mark, extra)
        if self._eval and kind != "efwd":
            self._eval_edge(kind)  # the time up to a train forward's data is eval's
        self._undo = (self._prev, self._pending)  # an h2d that moves nothing was none
        if kind in ("data", "h2d") and self._pending is None:
            self._pending = len(self._step.segs)
        if kind in ("bwd", "data", "fwd", "efwd", "opt"):
            self._in_loss = False
        if kind in ("data", "fwd", "efwd", "lossmod"):
            self._window = None  # the next micro-batch: what came since was no update
        if kind == "fwd":
            step.forward_seen = True
            self.add_samples(samples)
        self._prev = (kind, "begin")

    def _end_cut(self, kind: str, keep: bool, mark: Any, extra: Any = None) -> None:
        """The cut at an outermost interval's end."""
        if not keep:  # the time goes to whatever it interrupted
            label = next(
                (g.label for g in reversed(self._step.segs) if g.label not in (MEMREAD, MLB)), None
            )
            self._cut(label or RESIDUAL, mark, extra)
            self._prev, self._pending = self._undo
            return
        self._cut(LABEL[kind], mark, extra)
        self._prev = (kind, "end")
        if kind == "fwd":
            self._in_loss = True
        if kind not in ("data", "h2d"):
            self._pending = None
        if kind == "bwd":
            self._backward_end()
        elif kind == "opt":
            self._optimizer_end()

    def _closure_end_cut(self, mark: Any, extra: Any = None) -> None:
        self._open_window("opt")
        self._cut(self._gap("opt"), mark, extra)
        self._prev, self._pending = ("opt", "end"), None
        self._optimizer_end()

    def _trained(self) -> None:
        """The first backward or optimizer step: training has begun (a sink may say so before
        the first step is whole: accumulation or a manual update take more than one)."""
        self._training = True
        started = getattr(self.sink, "on_training_started", None)
        if started is not None:
            started()

    def _optimizer_end(self) -> None:
        if not self._training:
            self._trained()
        self.mode = "optimizer"
        self._step.candidate = len(self._step.segs)

    def _gap(self, kind: str) -> str:
        """The label of the time between the last boundary and this `kind`'s start."""
        prev, step = self._prev, self._step
        if self._in_loss and kind in ("bwd", "lossmod", "aux", "h2d"):
            return "loss"  # a forward's end to its backward's start (a zero_grad is cut out)
        if self.mode == "backward" and not step.forward_seen:
            return "optimizer"  # the manual update: backward's end to the next forward
        if prev == _OPT_BEGIN:
            return "optimizer"  # inside optimizer.step(closure), before the closure's forward
        if kind in ("opt", "aux") and self._window is not None and step.candidate is None:
            return "optimizer"  # the last backward's end to the update (an h2d cut out)
        return RESIDUAL

    def _open_window(self, kind: str) -> None:
        """Before an optimizer step or a zero_grad / clipping after a backward: the time since
        that backward's end is the optimizer's (a `.to()` in between cut out as h2d)."""
        if kind in ("opt", "aux") and self._window is not None and self._step.candidate is None:
            for seg in self._step.segs[self._window :]:
                if seg.label == RESIDUAL:
                    seg.label = "optimizer"

    def _eval_edge(self, kind: str) -> None:
        """An eval forward opens an eval stretch (the data drawn for it included); a train
        forward, backward, optimizer step or zero_grad closes it (the data drawn for that
        forward, and what came after it, is the step's again)."""
        segs = self._step.segs
        if kind == "efwd" and not self._eval:
            self._eval = True
            for seg in segs[self._pending :] if self._pending is not None else ():
                seg.eval = True
        elif kind in ("fwd", "bwd", "opt", "aux") and self._eval:
            self._eval = False
            if kind == "fwd" and self._pending is not None:
                for seg in segs[self._pending :]:
                    seg.eval = False

    def _cut(self, label: str, mark: Any = None, extra: Any = None) -> None:
        """A segment up to this boundary. `extra`: the reading the hot path took after the
        logged mark, and the mark after it (else read now, on a read step)."""
        if mark is None:
            mark = self.marker.mark()
        mem = self.memory
        if mem is None:
            if self._last is not None:
                self._step.segs.append(Seg(label, self._last, mark, self._eval))
            self._last = mark
            return
        if self._last is None:  # the first boundary (on this marker): the first step starts
            mem.begin_step()
        held, after = extra if extra is not None else (mem.current(), None)
        seg = None
        if self._last is not None:
            seg = Seg(label, self._last, mark, self._eval, self._held, held)
            self._step.segs.append(seg)
        self._last, self._held = mark, held
        if self.marker.kind == "cpu":  # the reading's own time: the segment's tail, cut out
            self._last = after if after is not None else self.marker.mark()
            if seg is not None:
                seg.c = self._last

    def _apart(self) -> None:
        """On the host clock: the memory reading since the last mark, cut out of the step."""
        if self.marker.kind == "cpu" and self._last is not None:
            given, self._given = self._given, None
            mark = given[2] if given is not None else self.marker.mark()
            held = self._held
            self._step.segs.append(Seg(MEMREAD, self._last, mark, self._eval, held, held))
            self._last = mark

    def _backward_end(self) -> None:
        if not self._training:
            self._trained()
        step = self._step
        step.backwards += 1
        step.need_samples = True
        if self.mode == "backward":
            self._close(len(step.segs), "backward")
        elif self.mode == "undecided":
            if step.cut is None:
                step.cut = len(step.segs)
            elif self.optimizers == 0:
                # a second backward and no torch.optim optimizer: a manual update; the step
                # starts at the first backward's end (what came before it is dropped)
                self.mode = "backward"
                step.segs = step.segs[step.cut :]
                step.backwards, step.samples = 1, step.samples[-1:]
                self._close(len(step.segs), "backward")
        self._window = len(self._step.segs)

    def _close(self, upto: int, boundary: str) -> None:
        step = self._step
        if upto == 0:
            return
        micro = step.backwards if boundary == "optimizer" else 1
        given = self._given  # the hot path's readings of this close (`_log_close`)
        memory = None
        if self.memory is not None:  # the step's peak; the next step's begins here
            memory = given[0] if given is not None else self.memory.end_step()
        upcoming = self._next_memory()
        if upcoming is not None:
            if given is None:
                upcoming.begin_step()
            if self.memory is None:  # not read at the last boundaries: the start, read now
                self._held = given[1] if given is not None else upcoming.current()
        self.memory = upcoming
        closed = Closed(step.segs[:upto], max(micro, 1), step.samples, boundary, memory)
        rest = OpenStep(segs=step.segs[upto:])
        self._step, self._pending, self._window = rest, None, None
        self._queue.append(closed)
        self._due = True
        if memory is not None or upcoming is not None:
            self._apart()

    def _next_memory(self) -> StepMemoryRecorder | None:
        """The memory recorder for the step that begins now, or None where it is not read
        (host clock: see MEMORY_EVERY, decided at the step's optimizer step once a step is
        one (`opt_post`), else here; on CUDA events every step is read, its reads being
        host-side counters that take no device time)."""
        src = self._memory_src
        if src is None or self.marker.kind != "cpu":
            return src
        if self.mode == "optimizer":
            read, self._read_next = self._read_next, False
            return src if read else None
        return src if self._cadence.due(self._last) else None


__all__ = [
    "EVAL",
    "HANDOVER_GAP_S",
    "LABEL",
    "MEMORY_DENSE",
    "MEMORY_EVERY",
    "MEMORY_GAP_S",
    "MEMREAD",
    "MLB",
    "RESIDUAL",
    "STAGES",
    "CpuMarker",
    "CudaMarker",
    "HookStep",
    "Marker",
    "Recorder",
    "Sink",
]
