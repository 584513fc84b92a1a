"""What `mlb attach`'s hooks cost a step, counted, not timed: a cache simulation.

`make bench`'s attach figure is timed, and on a shared machine a 10 ms step spreads by ~2 ms
from one step to the next: a change of 10 µs needs minutes of pairs to show, and two runs of the
same code differ by ±25 µs. This counts instead. Under valgrind's callgrind with its cache
simulation (first level 32 KiB, last level 512 KiB: the L2 of this machine's cores), one
process runs the bench script's loop (`attach_overhead_child.loop`) with the hooks and the
measuring sink, hooked and plain steps alternating, and counts the events of the hooked steps
and of the plain ones in four phases (hooked, plain, plain, hooked) after a warm-up. Printed:
hooked minus plain, a step: instructions, first-level and last-level misses, and an estimate in
cycles (an instruction 1, a first-level miss 10, a last-level miss 50), then the same for each of
the two halves (a memory reading or a tally falls in one half or the other: ±5%).

The counts are the same from run to run (the memory-read cadence goes by steps here, not time).
They are not the time a step takes: a last-level miss that goes to memory costs ~100 ns on this
VM. But they compare two versions of the code (`--package`: a copy of an older tree under another
name, its imports renamed) within a few per cent, where timing cannot.

    python bench/attach_cachesim.py                  # this tree's hooks, the model 752 wide
    python bench/attach_cachesim.py --width 448 --pairs 64

Needs valgrind and gcc (the client requests that switch the counting on and off are C macros);
~8 minutes at the defaults (the imports run uninstrumented). Not in `make bench`.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""
PHASES = (("H1", True), ("P1", False), ("P2", False), ("H2", True))
# the options the child is given
SHARED = ("package", "width", "batch", "pairs", "warmup", "off", "memory")


def build_helper(folder: Path) -> Path:
    source, lib = folder / "cg.c", folder / "cg.so"
    source.write_text(HELPER)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib


def child(args: argparse.Namespace) -> None:
    """Inside valgrind: the loop, the hooks, the four counted phases."""
    sys.path.insert(0, str(HERE))
    import attach_overhead_child

    cg = ctypes.CDLL(args.helper)
    step = attach_overhead_child.loop(args.batch, args.width)
    pkg = args.package
    config = importlib.import_module(f"{pkg}.config")
    hooks = importlib.import_module(f"{pkg}.measure.hooks")
    cutter = importlib.import_module(f"{pkg}.measure.step_cutter")
    measure = importlib.import_module(f"{pkg}.runners.attach_child")

    class Sink(measure.MeasureSink):  # type: ignore[misc,name-defined]
        memory_gap_s = 1e6  # memory read by the step count alone: the same steps every run

    cutter.HANDOVER_GAP_NS, cutter.MAX_SETTLE_LOG = 10**15, 10**7  # hand-overs by count
    settings = config.parse_set(list(attach_overhead_child.NEVER_STOP))
    sink = Sink(config.build(config.Config, settings), lambda e: None, None, {})
    installed = hooks.install(sink, memory=bool(args.memory))
    sink.hooks = installed
    put_in, take_out = attach_overhead_child.arms(installed, step.optimizer)
    cg.cg_start()

    def pair(count_hooked: bool) -> None:
        for hooked in (True, False):
            (put_in if hooked else take_out)()
            if hooked == count_hooked:
                cg.cg_toggle()
                step()
                cg.cg_toggle()
            else:
                step()

    # not counted (counting starts switched off): past the first, denser memory readings and
    # the one-time work of the first steps (a short warm-up leaves millions of instructions a
    # step in the first half)
    for _ in range(args.warmup):
        pair(True)
    if args.off:  # the wrappers alone: every call passed through, nothing recorded
        installed.rec.turn_off()
    cg.cg_zero()
    for name, hooked in PHASES:
        for _ in range(args.pairs):
            pair(hooked)
        cg.cg_dump(name.encode())
    if sink.done:
        raise SystemExit("the stop rule ended the run: the counts are of pass-throughs")


def totals(folder: Path) -> dict[str, dict[str, int]]:
    """Each phase's event totals, from callgrind's dumps."""
    out: dict[str, dict[str, int]] = {}
    for path in folder.glob("cg.out.*"):
        text = path.read_text(errors="replace")
        phase = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
        events = re.search(r"^events: (.*)$", text, re.M)
        summary = re.search(r"^(?:summary|totals): (.*)$", text, re.M)
        if phase and events and summary:
            out[phase.group(1)] = dict(
                zip(events.group(1).split(), map(int, summary.group(1).split()), strict=False)
            )
    return out


def per_step(
    found: dict[str, dict[str, int]], pairs: int, halves: tuple[str, ...]
) -> dict[str, float]:
    """Hooked minus plain a step, over the given halves ("1", "2")."""
    events = found["H1"]
    n = pairs * len(halves)
    return {e: sum(found[f"H{h}"][e] - found[f"P{h}"][e] for h in halves) / n for e in events}


def report(d: dict[str, float]) -> str:
    l1 = d["I1mr"] + d["D1mr"] + d["D1mw"]
    ll = d["ILmr"] + d["DLmr"] + d["DLmw"]
    cycles = d["Ir"] + 10 * l1 + 50 * ll
    return (
        f"instructions {d['Ir'] / 1e3:7.1f} k   L1 misses {l1:7.0f}   last-level misses "
        f"{ll:6.0f}   estimated cycles {cycles / 1e3:7.1f} k"
    )


def parent(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        helper = build_helper(folder)
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no"]
        cmd += ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=524288,8,64"]
        cmd += [f"--callgrind-out-file={folder / 'cg.out'}", "--dump-instr=no"]
        cmd += [sys.executable, __file__, "--child", "--helper", str(helper)]
        cmd += [f"--{k}={v}" for k, v in vars(args).items() if k in SHARED]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        found = totals(folder)
        if args.keep:  # the dumps, for callgrind_annotate (where the difference goes, by function)
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for dump in folder.glob("cg.out*"):
                (Path(args.keep) / dump.name).write_bytes(dump.read_bytes())
        if done.returncode != 0 or len(found) != len(PHASES):
            raise SystemExit(f"the counted run failed:\n{done.stderr[-2000:]}")
    print(f"{args.package}, width {args.width}, batch {args.batch}, {args.pairs} pairs a phase")
    print("hooked - plain, a step:", report(per_step(found, args.pairs, ("1", "2"))))
    for half in ("1", "2"):
        print(f"  half {half}:              ", report(per_step(found, args.pairs, (half,))))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", default="mlbaseline", help="the hooks' package (a copy)")
    ap.add_argument("--width", type=int, default=752, help="the bench model's width")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=128, help="pairs of steps a phase")
    ap.add_argument(
        "--warmup",
        type=int,
        default=200,
        help="pairs before counting (past the first 128 steps' denser memory readings)",
    )
    ap.add_argument(
        "--off", type=int, default=0, help="1: the recorder off (the wrappers' pass-through cost)"
    )
    ap.add_argument("--memory", type=int, default=1, help="0: no memory readings")
    ap.add_argument("--keep", help="a folder to copy callgrind's dumps to (callgrind_annotate)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--helper", help=argparse.SUPPRESS)
    args: Any = ap.parse_args(argv)
    (child if args.child else parent)(args)


if __name__ == "__main__":
    main()
