"""The order of a paired, interleaved A/B run: pure Python, no torch.

Pairs come in blocks of two, each block either AB then BA (ABBA) or BA then AB (BAAB), chosen
by a seeded RNG. Within a block each arm runs first once and second once, so a slow drift of the
machine (or a cost that always lands on whichever step runs second) weighs both arms the same;
the random choice per block keeps the order from lining up with any periodic disturbance.
"""

from __future__ import annotations

import random

# Defaults of `mlb ab` (here, torch-free, so that the CLI can show them without importing torch)
DEFAULT_PAIRS = 55  # in one process: the A/A run, ±2.5 % CI of the per-pair ratio
DEFAULT_PROCESS_PAIRS = 12  # fresh processes: above the 9 that can pass Holm over 7 stages
DEFAULT_TURN_S = 2.0  # measured seconds per fresh-process turn: a pair is a short time span
# --attach: an A and a B process take this many pairs of turns (a unit, what the test counts),
# each turn this many seconds. Short turns, many a unit: on a shared machine the step's time
# wanders over seconds, so the closer a pair's two turns, the more of it their ratio cancels
# (this project's machine, one process: adjacent 0.25 s blocks of steps 7.5% apart, 1 s blocks
# 6.0%, so 8 pairs of 0.25 s turns see ~2.6% where 2 pairs of 1 s see ~4.2%, in the same 4 s);
# a unit's ratio is the median of its pairs' (runners.attach_ab.paired_figure), which sets
# aside a burst that hit one turn. bench/RESULTS.md, attach, "2026-12-07 (later)".
PAIRS_PER_PROCESS = 8
DEFAULT_ATTACH_TURN_S = 0.25
# 16 units of 8: above the 9 units that can pass Holm over 7 stages. On this project's machine
# (2 cores, pinned), 12 units gave a median A/A-and-slowed step MDE of 3.07% over 40 runs; the
# units' spread is two parts, ~9% between a pair's turns (a unit's median of 8 leaves ~3.2%) and
# ~2.2% between processes, which only more units divide. 16 units, pinned, 40 runs in a quieter
# hour: median 1.82% (its first 12 units: 2.08%), 123 s a run now that a stopped arm skips its
# teardown (runners.attach_child.QuickExit); bench/RESULTS.md, "2026-12-07 (evening)"
DEFAULT_ATTACH_PAIRS = 128

ARMS = ("a", "b")
BLOCKS = (("AB", "BA"), ("BA", "AB"))


def abba_order(pairs: int, seed: int) -> list[str]:
    """`pairs` pair orders ("AB" or "BA"), block by block ABBA or BAAB from
    `random.Random(seed)`; an odd count ends with the first half of one more block. Same
    (pairs, seed), same order."""
    if pairs < 0:
        raise ValueError(f"pairs must be >= 0, got {pairs}")
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < pairs:
        out.extend(BLOCKS[rng.randrange(2)])
    return out[:pairs]


def arms_of(order: str) -> tuple[str, str]:
    """'AB' → ('a', 'b'): the arms of one pair in the order they run."""
    if order not in ("AB", "BA"):
        raise ValueError(f"a pair order is 'AB' or 'BA', got {order!r}")
    return (order[0].lower(), order[1].lower())


__all__ = ["ARMS", "BLOCKS", "abba_order", "arms_of"]
