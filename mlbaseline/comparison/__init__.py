"""Compare two results: comparability, per-metric two-gate verdicts, per-stage attribution.

No torch and no I/O here (the runner loads the files). The pieces, in order:

1. **Comparability.** Every key of ``environment["blocking"]`` (GPU model, driver major, CUDA,
   cuDNN, torch, device, dtype, CPU model on CPU runs, the golden parameters, the subset
   manifest hash) and of the workload identity (``config.WORKLOAD_IDENTITY_KEYS``: dataset,
   image size / sequence shape, classes, batch sizes, data pipeline; rebuilt from the config
   of a result that predates them) must be equal on both sides, else
   :class:`NotComparableError` (exit 3) naming each key, unless ``allow`` names it (then it is
   listed as an allowed difference) or ``allow_mismatch`` — then every verdict is marked.
   Informational keys and config values that differ are listed, never blocking; model, loss
   and optimizer (the change under test) on a line of their own.
2. **Matching.** Metrics are matched by name; names on one side only are listed, not compared.
   A metric whose unit or direction changed, that has no samples, negative values, or a zero
   old median (no ratio) is listed as skipped with the reason. Residuals (``role: residual``)
   are not judged: their median sits near 0 and may be negative, so a ratio means nothing;
   they appear in the attribution instead.
3. **Unit of comparison.** One figure per fresh process (its median; a side without replicate
   ids ran in one process). When at least one side has ``min_replicates`` (2) processes, their
   figures are compared; with one process a side nothing measured the noise between processes:
   the figures are shown (from the in-process samples) and the verdict is "insufficient data",
   which ``--fail-on any`` fails on and the headline names.
4. **Verdicts** (:func:`mlbaseline.stats.compare_samples`, deciding through
   :func:`mlbaseline.stats.decision.decide`, the one decision function of compare, the history
   gate, ab and the report): Student's t on the logs of the process figures (pooled variance;
   the Mann-Whitney U test from 12 a side), after **gatekeeping** — each group's total (the
   step) first, Holm among the totals at the full alpha, then its stages and rate, Holm among
   them — AND the CI of the ratio beyond the practical threshold:
   ``max(compare.threshold(s) floor, the history's between-sitting bar)``; each metric records
   which it used, and the smallest change it could have seen (MDE, both gates at 80% power).
5. **Attribution**, per group with a ``role: total`` metric (see "Metric naming" in the rules):
   each stage's delta = median(new) − median(old) of that stage, with a percentile-bootstrap CI
   of that *difference of medians* (both sides resampled independently; old and new are
   separate runs, so there are no pairs to difference), the delta as % of the old total (CI
   scaled by the old total's median), its share of the total's delta, and the residual. A
   stage is *named* as explaining the change when the total is regressed/improved and either
   the stage's own verdict is regressed/improved in the same direction, or its share of the
   total delta is at least :data:`NAME_SHARE` and its delta CI excludes 0 on that side.

6. **Memory** (``role: memory``, :mod:`.memory`): judged by
   :func:`mlbaseline.stats.decision.memory_rule` at ``compare.memory_threshold`` (the ratio of
   medians widened by the measured spread; any process count), outside the gatekeeping and the
   drift adjustment; per group the stage whose held memory regressed most is named.

``--fail-on`` (see :data:`FAIL_ON_HELP`): ``regressed`` fails on any regressed metric; ``any``
fails unless every metric of OLD is shown unchanged or improved in NEW (so also on inconclusive,
skipped and missing-from-NEW metrics); ``never`` reports only.

The comparison document (``Comparison.to_dict()``, also stored as ``data`` of a ``compare``
result file) is rendered by :mod:`mlbaseline.report.comparison`, so ``mlb report --compare``
can render a loaded file without recomputing anything.

Modules: :mod:`.model` (data types, constants, the gate), :mod:`.matching` (comparability,
thresholds, samples), :mod:`.judge` (:func:`compare_results`), :mod:`.attribution`,
:mod:`.result` (:func:`to_result`), :mod:`.noise` (levels, thresholds, reachable advice).
"""

from mlbaseline.comparison.attribution import attribution_sentence
from mlbaseline.comparison.judge import compare_results
from mlbaseline.comparison.matching import (
    describe_differences,
    environment_differences,
    medians_and_difference_ci,
    replicate_medians,
    threshold_for,
)
from mlbaseline.comparison.model import (
    ATTRIBUTION_METHOD,
    COMPARABLE_KINDS,
    FAIL_ON,
    FAIL_ON_HELP,
    NAME_SHARE,
    SKIP_RESIDUAL,
    Attribution,
    Comparison,
    MetricResult,
    StageDelta,
    failing_names,
)
from mlbaseline.comparison.result import to_result, verdict_text

__all__ = [
    "ATTRIBUTION_METHOD",
    "COMPARABLE_KINDS",
    "FAIL_ON",
    "FAIL_ON_HELP",
    "NAME_SHARE",
    "SKIP_RESIDUAL",
    "Attribution",
    "Comparison",
    "MetricResult",
    "StageDelta",
    "attribution_sentence",
    "compare_results",
    "describe_differences",
    "environment_differences",
    "failing_names",
    "medians_and_difference_ci",
    "replicate_medians",
    "threshold_for",
    "to_result",
    "verdict_text",
]
