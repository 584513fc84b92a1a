"""`mlb ab`: two configs, interleaved step by step in one process, judged pair by pair."""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlbaseline import formatting as fmt
from mlbaseline.cli.common import CommonOptions, Ui, command, compact_table, execute, load_config
from mlbaseline.config import Config
from mlbaseline.errors import UsageError
from mlbaseline.results import Result
from mlbaseline.stats.paired import PAIRED_THRESHOLD

_STYLE = {"regressed": "red", "improved": "green", "unchanged": "", "inconclusive": "yellow"}

SetAOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set-a", help="Arm A only: KEY=VAL on top of the config (repeatable).", show_default=False
    ),
]
SetBOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set-b", help="Arm B only: KEY=VAL on top of the config (repeatable).", show_default=False
    ),
]
PairsOpt = Annotated[int, typer.Option("--pairs", help="Pairs of steps (A and B) to run.", min=1)]
BudgetOpt = Annotated[
    float | None,
    typer.Option(
        "--budget", help="Stop after this many seconds (finished pairs kept).", show_default=False
    ),
]
ThresholdOpt = Annotated[
    float,
    typer.Option("--threshold", help="Practical band for the ratio B/A, as a fraction.", min=0),
]


def _verdict(text: str) -> str:
    style = _STYLE.get(text, "")
    return f"[{style}]{text}[/{style}]" if style else text


def ab_table(result: Result) -> Table:
    """Per stage: B/A − 1 [95% CI] (percent), Holm-adjusted p, verdict, MDE; 80 columns."""
    d = result.data
    title = f"B vs A: {d.get('pairs_done', 0)} pairs, band ±{fmt.percent(d.get('threshold'))}"
    caption = "p: Wilcoxon signed-rank, Holm-adjusted; MDE at 80% power"
    table = compact_table(title, caption=caption)
    table.add_column("stage", no_wrap=True)
    for header in ("B/A−1", "95% CI", "p", "MDE"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for s in d.get("stages", []):
        change = s["ratio"] - 1 if s["ratio"] is not None else None
        ci = [v - 1 if v is not None else None for v in (s["ci_low"], s["ci_high"])]
        mde = s["mde"] if s["mde"] is not None and math.isfinite(s["mde"]) else None
        table.add_row(
            s["stage"],
            fmt.signed_percent(change, 2),
            fmt.interval_percent(ci, 2),
            fmt.p_value(s["p_adjusted"]),
            fmt.percent(mde, 1, fmt.NA),
            _verdict(s["verdict"]),
        )
    return table


def render(result: Result, ui: Ui) -> None:
    d = result.data
    for arm in ("a", "b"):
        sets = ", ".join(d.get("overrides", {}).get(arm) or []) or "(the config as is)"
        ui.print(f"{arm.upper()}: {escape(sets)}")
    ui.print(ab_table(result))
    ui.print(f"stopped by {d.get('stop_reason')}; overall: {_verdict(str(d.get('verdict')))}")


def _arm_sets(common: CommonOptions, extra: list[str] | None) -> list[str]:
    return [*(common.sets or []), *(extra or [])]


@command("ab")
def ab(
    common: CommonOptions,
    set_a: SetAOpt = None,
    set_b: SetBOpt = None,
    pairs: PairsOpt = 55,
    budget: BudgetOpt = None,
    threshold: ThresholdOpt = PAIRED_THRESHOLD,
) -> None:
    """Paired, interleaved A/B of two training-step configs in one process.

    Both arms are built from the same config (--config / --profile / --set), then --set-a and
    --set-b apply to one arm each. After a warm-up, the arms run one training step each per
    pair, in blocks ABBA or BAAB (seeded by golden.seed), every stage timed; drift of the
    machine hits both arms of a pair alike and cancels in the ratio. Per stage: the median
    per-pair ratio B/A with a bootstrap CI, a Wilcoxon signed-rank p (Holm across stages);
    regressed only when p < compare.alpha AND the CI lies beyond ±threshold. Stops after
    --pairs or --budget seconds; Ctrl-C keeps the finished pairs (exit 130). Exit 1 when a
    stage regressed, 3 when the arms run on different devices.

    Example: mlb ab --set-b workload.threads=2 --pairs 55 -o ab.json
    """
    if threshold <= 0:
        raise UsageError("--threshold: must be > 0")
    if budget is not None and budget <= 0:
        raise UsageError("--budget: must be > 0 seconds")
    arms: dict[str, Config] = {}

    def prepare(cfg: Config) -> None:
        for arm, extra in (("a", set_a), ("b", set_b)):
            arms[arm] = load_config(common.config, common.profile, _arm_sets(common, extra))

    def measure(cfg: Config, ui: Ui) -> Result:
        from mlbaseline.runners.ab import run_ab

        result = run_ab(arms["a"], arms["b"], pairs, budget, ui.progress, threshold=threshold)
        result.data["overrides"] = {"a": list(set_a or []), "b": list(set_b or [])}
        return result

    execute(common, measure, prepare=prepare, render=render)


__all__: list[str] = ["ab", "ab_table"]
