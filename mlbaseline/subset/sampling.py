"""Per-class quotas and seeded, reproducible selection.

Quota rules (issue 5; the source document's two rules contradict each other, so both exist):

- ``proportional`` (default): the n samples are apportioned by class share with the
  largest-remainder (Hamilton) method: each class gets ⌊n·cᵢ/N⌋, and the seats left over go one
  each to the largest remainders (ties: the larger class, then the name). When n ≥ the number of
  non-empty classes, every non-empty class gets at least one sample.
- ``balanced``: n // k per class, the n % k remainder one each to the largest classes by image
  count (ties by name).

Both rules take bounds: a class can never give more images than it has (its *cap*: its image
count, or fewer once undecodable images are known) and, for ``proportional``, gets at least one.
A class that the rule pushes past a bound is pinned at it and the rest of n is apportioned
again among the other classes *by the same rule*, until no bound is violated. For ``balanced``
this means a class smaller than its quota gives all its images and the others share the
remaining samples equally again (water-filling): counts A=2, B=10, C=5, D=5 with n=13 give
3,4,3,3 first; A is pinned at 2, and 11 over B, C, D gives 3 each plus one each to B and C
(C before D by name): A=2, B=4, C=4, D=3.

When both kinds of bound are violated at once, the side with the larger total violation is
pinned first; that keeps `sum(lower) ≤ remaining ≤ sum(upper)` true for the classes still free,
so the loop always ends with a feasible allocation (Pukelsheim, *Proportional
Representation*, ch. on bounded apportionment).

Selection: each class has its own seeded generator, ``default_rng([seed, crc32(class name)])``,
over the *sorted* file list, so the same seed and input always give the same files, and adding
a class does not change what is drawn from the others. ``draw_order`` gives the whole
permutation: the first ``quota`` entries are the sample, and the next ones replace images that
fail to decode.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

from mlbaseline.errors import DatasetError

STRATEGIES = ("proportional", "balanced")
REFERENCE_STREAM = 0x52_45_46  # "REF": the reference sample's own seed stream

Rule = Callable[[Sequence[int], int, Sequence[str]], list[int]]


def largest_remainder(weights: Sequence[int], m: int, names: Sequence[str]) -> list[int]:
    """Hamilton apportionment of `m` by integer `weights`, in exact integer arithmetic.
    Leftover seats go to the largest remainders; ties to the larger weight, then the name."""
    total = sum(weights)
    if m <= 0 or total <= 0:
        return [0] * len(weights)
    quotas = [m * w // total for w in weights]
    remainders = [m * w % total for w in weights]
    left = m - sum(quotas)
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], -weights[i], names[i]))
    for i in order[:left]:
        quotas[i] += 1
    return quotas


def equal_shares(weights: Sequence[int], m: int, names: Sequence[str]) -> list[int]:
    """m // k each; the m % k remainder one each to the largest classes (ties by name)."""
    k = len(weights)
    if k == 0 or m <= 0:
        return [0] * k
    base, left = divmod(m, k)
    quotas = [base] * k
    for i in sorted(range(k), key=lambda i: (-weights[i], names[i]))[:left]:
        quotas[i] += 1
    return quotas


def bounded_apportion(
    rule: Rule,
    weights: Sequence[int],
    n: int,
    names: Sequence[str],
    lower: Sequence[int],
    upper: Sequence[int],
) -> list[int]:
    """Apportion `n` by `rule`, pinning classes that violate [lower, upper] and re-apportioning
    the rest among the others by the same rule (see the module docstring)."""
    k = len(weights)
    if not sum(lower) <= n <= sum(upper):
        raise ValueError(f"cannot place {n} within bounds summing to {sum(lower)}..{sum(upper)}")
    pinned: dict[int, int] = {i: 0 for i in range(k) if upper[i] <= 0}
    while True:
        free = [i for i in range(k) if i not in pinned]
        m = n - sum(pinned.values())
        shares = rule([weights[i] for i in free], m, [names[i] for i in free])
        alloc = dict(zip(free, shares, strict=True))
        over = {i: alloc[i] - upper[i] for i in free if alloc[i] > upper[i]}
        under = {i: lower[i] - alloc[i] for i in free if alloc[i] < lower[i]}
        if not over and not under:
            out = [pinned.get(i, alloc.get(i, 0)) for i in range(k)]
            assert sum(out) == n, (out, n)  # invariant of the pinning order, not user input
            return out
        if sum(over.values()) >= sum(under.values()):
            pinned.update({i: upper[i] for i in over})
        else:
            pinned.update({i: lower[i] for i in under})


def _quota_inputs(
    counts: Sequence[int], n: int, names: Sequence[str] | None, caps: Sequence[int] | None
) -> tuple[list[int], list[str], list[int]]:
    """Counts as ints, names (default: zero-padded indices), caps within the counts; n checked."""
    counts = [int(c) for c in counts]
    names = list(names) if names is not None else [f"{i:09d}" for i in range(len(counts))]
    caps = [min(int(c), cnt) for c, cnt in zip(caps or counts, counts, strict=True)]
    _check_n(n, caps)
    return counts, names, caps


def proportional_quotas(
    counts: Sequence[int],
    n: int,
    names: Sequence[str] | None = None,
    caps: Sequence[int] | None = None,
) -> list[int]:
    """Largest-remainder quotas by class share; ≥ 1 per non-empty class when n ≥ their number."""
    counts, names, caps = _quota_inputs(counts, n, names, caps)
    active = sum(1 for c in caps if c > 0)
    lower = [1 if (c > 0 and n >= active) else 0 for c in caps]
    return bounded_apportion(largest_remainder, counts, n, names, lower, caps)


def balanced_quotas(
    counts: Sequence[int],
    n: int,
    names: Sequence[str] | None = None,
    caps: Sequence[int] | None = None,
) -> list[int]:
    """n // k per class, remainder to the largest classes; small classes give all they have."""
    counts, names, caps = _quota_inputs(counts, n, names, caps)
    return bounded_apportion(equal_shares, counts, n, names, [0] * len(counts), caps)


def plan_quotas(
    strategy: str,
    counts: Sequence[int],
    n: int,
    names: Sequence[str] | None = None,
    caps: Sequence[int] | None = None,
) -> list[int]:
    if strategy == "proportional":
        return proportional_quotas(counts, n, names, caps)
    if strategy == "balanced":
        return balanced_quotas(counts, n, names, caps)
    raise ValueError(f"unknown strategy {strategy!r} (use {' or '.join(STRATEGIES)})")


def _check_n(n: int, caps: Sequence[int]) -> None:
    available = sum(caps)
    if available == 0:
        raise DatasetError("the dataset has no usable images")
    if n < 1:
        raise DatasetError(f"subset size must be at least 1, got {n}")
    if n > available:
        raise DatasetError(f"subset size {n} is larger than the dataset ({available} images)")


def class_rng(seed: int, class_name: str) -> np.random.Generator:
    """The generator of one class: independent of the other classes and of their order."""
    return np.random.default_rng([seed, zlib.crc32(class_name.encode("utf-8"))])


def draw_order(seed: int, class_name: str, count: int) -> np.ndarray:
    """A seeded permutation of range(count): the order in which a class's files are drawn."""
    return class_rng(seed, class_name).permutation(count)


def select(
    classes: Sequence[str], counts: Sequence[int], quotas: Sequence[int], seed: int
) -> list[np.ndarray]:
    """Per class, the sorted indices (into the sorted file list) of the first `quota` draws.
    No decoding: the plain sampler, e.g. for benchmarks and dry runs."""
    out = []
    for name, count, quota in zip(classes, counts, quotas, strict=True):
        if quota > count:
            raise ValueError(f"class {name}: quota {quota} exceeds its {count} images")
        out.append(np.sort(draw_order(seed, name, int(count))[:quota]))
    return out


def reference_sample(counts: Sequence[int], m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(class, file) index arrays of a uniform seeded sample of min(m, N) images of the whole
    set (all of them, in order, when N ≤ m). Its seed stream differs from the subset's, and it
    depends on the base seed only, so every retry is judged against the same reference."""
    counts_arr = np.asarray(counts, dtype=np.int64)
    total = int(counts_arr.sum())
    starts = np.concatenate([[0], np.cumsum(counts_arr)])
    if total <= m:
        flat = np.arange(total, dtype=np.int64)
    else:
        rng = np.random.default_rng([seed, REFERENCE_STREAM])
        flat = np.sort(rng.choice(total, size=m, replace=False))
    cls = np.searchsorted(starts, flat, side="right") - 1
    return cls, flat - starts[cls]
