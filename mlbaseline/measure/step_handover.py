"""The step cutter's hand-over of closed steps to its sink (`measure.step_cutter.Recorder`,
which is this class with the cutting): once their marks can be read (a CUDA event's once it
has completed), N at a time for a sink with `handover_every`, the sink's own time cut out as
mlb's (a segment in no step)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mlbaseline.measure.marks import CpuMarker, Marker
from mlbaseline.measure.step_log import HANDOVER_GAP_S
from mlbaseline.measure.step_types import MLB, Closed, HookStep, OpenStep, Seg, Sink, resolve

MAX_PENDING = 64  # steps whose CUDA events have not completed; past it the oldest is waited for


class HandOver:
    """The hand-over half of the recorder (its state is the recorder's)."""

    sink: Sink
    marker: Marker
    memory: Any
    off: bool
    log: list[Any]
    _queue: deque[Closed]
    _unfilled: deque[HookStep]
    _due: bool
    _every: int
    _last: Any
    _held: Any
    _step: OpenStep
    _replay: Callable[[], None]  # the cutting's (`Recorder._replay`)

    def flush(self, block: bool = False) -> None:
        """Hand every step whose marks can be read to the sink (`block`: wait for them)."""
        if self.log:
            self._replay()
        while self._queue:
            closed = self._queue[0]
            last = closed.segs[-1].b
            if not self.marker.ready(last):
                if not block and len(self._queue) <= MAX_PENDING:
                    return
                self.marker.wait(last)
            self._queue.popleft()
            # the host clock's marks are nanoseconds: subtracted there, no call a segment
            record = resolve(
                closed, None if isinstance(self.marker, CpuMarker) else self.marker.seconds
            )
            release = getattr(self.marker, "release", None)
            if release is not None:  # the step's last mark begins the next step: kept
                release([seg.a for seg in closed.segs])
            if self._unfilled:  # handed over already, by its total (`_tally`): filled in
                given = self._unfilled.popleft()
                for name in HookStep.__slots__:
                    setattr(given, name, getattr(record, name))
                continue
            self.sink.on_step(record)

    # ------------------------------------------------------------ cutting

    def _drain(self) -> None:
        """Hand the steps whose marks can be read to the sink, from inside a hook: the sink's
        own time (the stop rule's tests, say) is cut out as a segment no step counts. Looked at
        once after each step closes, and at every boundary while marks are awaited."""
        queue = self._queue
        if not queue:
            self._due = False
            return
        if len(queue) <= MAX_PENDING and not self.marker.ready(queue[0].segs[-1].b):
            return  # the device is not there yet: looked at again at the next boundary
        if len(queue) < self._every and not self._handover_due(queue[0].segs[-1].b):
            self._due = False  # looked at again when the next step closes
            return
        self._handover()

    def _handover(self) -> None:
        """Hand the closed steps over now; the sink's time is mlb's, in no step."""
        self.flush()
        self._due = bool(self._queue)
        if self._last is not None and not self.off:
            if self.memory is not None:  # what the sink allocated is in no stage
                self._held = self.memory.current()
            mark = self.marker.mark()
            self._step.segs.append(Seg(MLB, self._last, mark))
            self._last = mark

    def _handover_due(self, oldest_end: Any) -> bool:
        """The oldest waiting step ended HANDOVER_GAP_S or more before the last boundary (a
        slow step is not held back for the next N)."""
        last = self._last
        return last is None or self.marker.seconds(oldest_end, last) >= HANDOVER_GAP_S
