"""The log of `mlb attach`'s hot path (`measure.step_cutter.Recorder`): what an entry is,
how many wait, when they are handed over, on which steps memory is read, and the tally that
gives each logged step's total from the marks alone.

An entry is two items of the log, a code and a mark: the code `arg << 8 | op << 4 | kind`
(`entry`, `unpack`) with `op` one of the codes below, `kind` the interval's index in KINDS
(`data`, `fwd`, `opt`, …) and `arg` a forward's batch size (0: none), 1 on an end that moved
nothing (`keep=False`), a close's readings or a tally's reading (an index into the recorder's
`aux` list), or on a `_HELD` entry the held bytes read right after the boundary before it; the
mark the boundary's (nanoseconds on the host clock; a `_HELD` entry's: the mark after that
reading, whose own time is in no step). Both go in at once (`log += (code, mark)`: an
interrupt between two appends would leave half an entry). Not a tuple kept an entry: ints are
objects the garbage collector never tracks, where ~10 tuples a step, each tracked until the
next collection, made the hooks' process collect every ~60 steps (a plain training loop keeps
next to nothing), and its full collections (~150 ms each) landed in measured steps. (Nor one
int packing code and mark: its shifts on a 2-digit int cost more than the tuple.)
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from mlbaseline.measure.step_types import MINE, Seg

# the hot path's log (`Recorder._replay`): its events, and at most this many before they are
# cut (a long eval stretch has no optimizer step to end it)
_BEGIN, _END, _CLOSURE_END, _BEGIN_CLOSURE = 0, 1, 2, 3
# a step's close where memory is read on either side (the readings the cutter's close takes,
# taken by the hot path), the time of a hand-over from the log (mlb's: in no step), and a read
# step's reading right after a boundary
_READ, _MLB, _HELD = 4, 5, 6
KINDS = ("data", "h2d", "fwd", "efwd", "lossmod", "bwd", "opt", "aux", "")
KIND_CODE = {kind: i for i, kind in enumerate(KINDS)}
OPT_CODE, AUX_CODE = KIND_CODE["opt"], KIND_CODE["aux"]


def entry(op: int, kind: str, arg: int = 0) -> int:
    """A log entry's code (the hooks' wrappers keep theirs: `begin`, `end`)."""
    return arg << 8 | op << 4 | KIND_CODE[kind]


def unpack(code: int) -> tuple[int, str, int]:
    """(op, kind, arg) of a log entry's code."""
    return (code >> 4) & 15, KINDS[code & 15], code >> 8


MAX_LOG = 512
# A sink that says `settle_at_end = True` (the measuring sink) has the log cut only when it is
# flushed (the stop rule met, or the script's end): meanwhile each closed step's total is worked
# out from the log's marks alone (`tally`: a subtraction, where cutting costs ~50 µs a
# step on a slow core) and handed over as a record that the cut fills in later. At most this
# many boundaries wait (~10 a step); past it the log is cut and hand-overs go on as above
MAX_SETTLE_LOG = 100_000

# On the host clock, a step's memory is read on every MEMORY_EVERY-th step, and on any step
# that begins MEMORY_GAP_S or more after the last read one began: a held size or a peak is
# nearly the same every step, so one step in 16 gives the same medians (an A/B turn of 0.25 s
# still reads one), and a step slower than 0.2 s is read every time. A sink may read less
# often after the first MEMORY_DENSE reads (`memory_every`, `memory_gap_s` attributes: the
# measuring sink's one step in 64, at least every 1 s; a short run still has its readings): a
# read step costs ~350 µs on the bench model, its cache cold (malloc's counter walks the free
# chunks, ~29 µs at each of ~10 boundaries; the peak's reset and read ~60 µs); on the hot path
# its readings go into the log with its marks (`Recorder._log_boundary`)
MEMORY_EVERY = 16
MEMORY_GAP_S = 0.2
MEMORY_DENSE = 8
# A sink that says `handover_every = N` (the measuring sink: its stop rule can decide a few
# steps late) gets the closed steps N at a time, or once the oldest waiting one ended
# HANDOVER_GAP_S or more before (or while its marks are awaited): the resolving and the stop
# rule then run over N steps in one go, their code warm, instead of cold between each step's
# torch work (7 µs a step run back to back, ~35 µs between a tiny model's steps). On the host
# clock such a sink also has the boundaries logged (`Recorder._replay`): a boundary then costs
# a mark and an append, and the cutting runs N steps at a time, its code warm instead of cold
# between torch's work (`make bench`'s attach overhead)
HANDOVER_GAP_S = 0.25
HANDOVER_GAP_NS = int(HANDOVER_GAP_S * 1e9)  # the host clock's marks are nanoseconds


class MemoryCadence:
    """Which steps have their memory read on the host clock (MEMORY_EVERY, MEMORY_GAP_S, then
    the sink's `memory_every` / `memory_gap_s` after MEMORY_DENSE reads): `due(now)` as a step
    begins (its marks are nanoseconds). `Recorder.opt_post`, run every step, tests its
    "not yet" itself, without the call."""

    __slots__ = ("at", "every", "gap_ns", "reads", "skip", "sparse")

    def __init__(self, sink: Any) -> None:
        self.every, self.gap_ns = MEMORY_EVERY, int(MEMORY_GAP_S * 1e9)
        self.sparse = (
            max(1, int(getattr(sink, "memory_every", MEMORY_EVERY))),
            int(float(getattr(sink, "memory_gap_s", MEMORY_GAP_S)) * 1e9),
        )
        self.reads = 0
        self.skip = 0  # steps closed since the last read one began
        self.at: Any = None  # the mark where the last read step began

    def restart(self) -> None:
        """Another clock: the next step is read."""
        self.skip, self.at = 0, None

    def due(self, now: int | None) -> bool:
        self.skip += 1
        since = self.at
        if (
            since is not None
            and now is not None
            and self.skip < self.every
            and now - since < self.gap_ns
        ):
            return False
        self.skip, self.at = 0, now
        self.reads += 1
        if self.reads == MEMORY_DENSE:
            self.every, self.gap_ns = self.sparse
        return True


def tally(log: list[int], first: int, state: list[Any], stops: list[int]) -> list[int]:
    """The totals (ns) of the steps that close in `log[first:]`, from the marks alone: each
    step's interval less the time in no step (mlb's, a reading's tail; an eval stretch stays
    in, where the cut takes it out). The closes are the cutter's: the first boundary after an
    optimizer step that is no update (a second optimizer's step: the step goes on). `state`
    (`open_tally`'s) is the open step's, carried from one call to the next. `stops`: the
    entries (ascending; an entry is two items: `first` and these are its code's place) that
    may be more than a boundary inside a step (an optimizer step's end, a closure's, a
    reading, mlb's time): inside a step the others are skipped, their last mark kept."""
    start, end, last, before, after = state
    totals = []
    i, n = first, len(log)
    while i < n:
        if end is None:  # inside a step: on to the next stop (~10 entries a step: ~1 here)
            k = bisect_left(stops, i)
            nxt = stops[k] if k < len(stops) else n
            if nxt > i:
                last, i = log[nxt - 1], nxt  # (the mark of the entry before it)
                if i == n:
                    break
        entry, mark = log[i], log[i + 1]
        i += 2
        op, code = (entry >> 4) & 15, entry & 15
        if end is not None and op in (_BEGIN, _BEGIN_CLOSURE) and code != AUX_CODE:
            if code == OPT_CODE:
                end, before, after = None, before + after, 0
            else:
                totals.append(end - start - before)
                start, end, before, after = end, None, after, 0
        if op >= _READ:  # mlb's time since the last mark (a hand-over, a reading)
            if end is None:
                before += mark - last
            else:
                after += mark - last
        elif op == _CLOSURE_END or (op == _END and code == OPT_CODE):
            end = mark
        last = mark
    state[:] = [start, end, last, before, after]
    return totals


def open_tally(segs: list[Seg], candidate: int | None, last: Any) -> list[Any]:
    """The open step's tally from the segments cut so far: its start, its end where an
    optimizer step ended it (`candidate`: the segments up to there), the last mark, and the
    time in no step before and after that end."""
    cut = candidate or None
    start = segs[0].a if segs else last
    before = after = 0
    for i, seg in enumerate(segs):
        out = (seg.b - seg.a) if seg.label in MINE else 0
        tail = (seg.c - seg.b) if seg.c is not None else 0
        if cut is not None and i >= cut:
            after += out + tail
        elif cut is not None and i == cut - 1:
            before, after = before + out, after + tail
        else:
            before += out + tail
    end = segs[cut - 1].b if cut else None
    return [start, end, last, before, after]


__all__ = [
    "AUX_CODE",
    "HANDOVER_GAP_NS",
    "HANDOVER_GAP_S",
    "KINDS",
    "KIND_CODE",
    "MAX_LOG",
    "MAX_SETTLE_LOG",
    "MEMORY_DENSE",
    "MEMORY_EVERY",
    "MEMORY_GAP_S",
    "OPT_CODE",
    "MemoryCadence",
    "entry",
    "open_tally",
    "tally",
    "unpack",
]
