"""One fresh process of the scale section: a bare `os.scandir` walk of a tree (the lower bound)
or `mlb subset`'s indexing + sampling of the same tree; wall time and peak memory as JSON.

    python bench/scale_child.py walk ROOT
    python bench/scale_child.py index ROOT N SEED

Both modes import (and initialise) the same modules before the clock starts, so the memory
figure (peak RSS after the work − peak RSS before it, from getrusage) is the work's own, not
numpy's or Python's.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np

from mlbaseline.subset import index_tree, plan_quotas, select


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def walk(root: str) -> int:
    """Every file name under `root`, kept in memory (the least any index must hold)."""
    names: list[str] = []
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    names.append(entry.name)
    return len(names)


def main() -> None:
    mode, root = sys.argv[1], sys.argv[2]
    # numpy.random initialises itself on first use (~8 ms, measured): a one-time library cost
    # like the imports, paid before the clock in both modes so that 10k files measure the work
    np.random.default_rng(0).permutation(2)
    before = peak_rss_bytes()
    t0 = time.perf_counter()
    out: dict[str, object] = {"mode": mode}
    if mode == "walk":
        out["files"] = walk(root)
        t1 = time.perf_counter()
    else:
        n, seed = int(sys.argv[3]), int(sys.argv[4])
        index = index_tree(root)
        t1 = time.perf_counter()
        counts = index.counts
        quotas = plan_quotas("proportional", counts, n, index.classes)
        chosen = select(index.classes, counts, quotas, seed)
        out["files"] = index.total
        out["selected"] = int(sum(len(c) for c in chosen))
    t2 = time.perf_counter()
    out.update(
        index_s=t1 - t0,
        sample_s=t2 - t1,
        wall_s=t2 - t0,
        peak_delta_bytes=peak_rss_bytes() - before,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
