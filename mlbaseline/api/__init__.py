"""The library API: `mlb`'s measurement core around the user's own training loop.

    from mlbaseline.api import Baseline

    bl = Baseline(name="my-run", batch_size=32, device="cuda")
    for batch in bl.data(loader):            # times the data wait
        with bl.step():                      # one training step
            with bl.stage("forward"):
                ...
        if bl.done:                          # the CLI's warm-up detection and stop rule
            break                            # (Baseline(advisory=True): never, bl.ended says)
    bl.save("mlb-results/own.json")          # a throughput result: mlb compare / report read it

The same stage timers (CPU clock or CUDA events), the same `StepLoop` (warm-up and stop rule),
the same telemetry sampler, metric names (`train.bs{B}.*`), checks and result file as
`mlb throughput`; under torch.distributed, rank 0's decisions for every rank and one result
pooled over the ranks. `mlbaseline.api.lightning` has a PyTorch Lightning callback on top.
A script runs in one process: `mlb attach --repeats N -- python SCRIPT` measures it in N fresh
processes, unchanged; or `pool_results` pools several runs' files into one result with
fresh-process replicates (what `--repeats` does for `mlb throughput`), so a compare can judge.
"""

from mlbaseline.api.baseline import Baseline
from mlbaseline.api.pool import pool_results

__all__ = ["Baseline", "pool_results"]
