"""The result of one attached script run: its steps (`measure.hooks.HookStep`, fed through
`measure.loop.StepLoop`) as a `throughput` result, built like every other one: the training
step's metrics by `measure.step.TrainRun` (group `train.bs{B}`, B the samples per
micro-batch the forward saw), the batch size's entry and checks, and `runners.throughput
.assemble`, the one assembly (telemetry block, checks, the payload checked against its
model). `data.source` is "attach"; `data.attach` holds the command, the script and its sha256,
the step boundary, micro-batches, the eval time kept out of the steps, and (set by the parent
once the script has ended) `then` and `ended`."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from mlbaseline.config import Config, build
from mlbaseline.envinfo import fingerprint
from mlbaseline.measure.hooks import HookStep
from mlbaseline.measure.loop import LoopResult
from mlbaseline.measure.pooling import group_summary
from mlbaseline.measure.step import TRAIN_STAGES, StepRecord, TrainRun
from mlbaseline.results import Result
from mlbaseline.runners.throughput import RESIDUAL_LIMIT, Ending, Telemetry, assemble
from mlbaseline.runners.throughput_records import Records, RunFacts


def _typical(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else 0


def attach_config(cfg: Config, batch_size: int, micro: int, device: str, model: str) -> Config:
    """The config the result is described by: what the script did (its batch size,
    micro-batches and device, its name as the model), one process, training only."""
    doc = copy.deepcopy(cfg.to_dict())
    doc["golden"]["batch_size"] = batch_size
    doc["workload"].update(model=model, device=device, grad_accum=max(micro, 1))
    doc["throughput"].update(mode="train", batch_sizes=[batch_size], nproc=1, repeats=1)
    doc.pop("history", None)  # the parent's run label; kept there
    return build(Config, doc)


def build_result(
    cfg: Config,
    loop: LoopResult[StepRecord],
    steps: Sequence[HookStep],
    meta: Mapping[str, Any],
    timer: str,
    state: Any = None,
) -> Result:
    """The throughput result of an attached run (`state`: the sink, for its telemetry
    sampler, memory meter and window, where it has them)."""

    measured = list(steps[loop.warmup :]) or list(steps)
    micro = _typical([s.micro_batches for s in measured])
    batch = _typical([s.batch_size for s in measured]) or _typical(
        [s.samples // max(s.micro_batches, 1) for s in measured]
    )
    device = "cuda" if timer == "cuda" else "cpu"
    model = f"attach:{meta.get('script') or 'script'}"
    run_cfg = attach_config(cfg, batch, micro, device, model)
    probe = getattr(state, "_probe", None)
    meter = getattr(state, "meter", None)
    prefix = f"train.bs{batch}"
    run = TrainRun(
        batch_size=batch,
        prefix=prefix,
        stages=TRAIN_STAGES,
        loop=loop,
        memory_bytes=meter.peak_bytes() if meter is not None else 0,
        memory_kind=meter.kind if meter is not None else "none",
        accum=max(micro, 1),
        workers_peak=getattr(state, "workers_peak", None),
    )
    records = Records(_facts(run_cfg, probe, device, timer, str(meta.get("script") or "script")))
    for metric in run.metrics():
        records.add_metric(metric)
    train = {**group_summary(records.metrics, prefix), **run.info()}
    window = list(getattr(state, "_window", []) or [])
    if len(window) == 2:
        train["telemetry_window_s"] = window
    size = records.size(batch)
    size.status = "interrupted" if loop.stop_reason == "interrupted" else "ok"
    size.stop_reason = loop.stop_reason
    size.parts["train"] = train
    records.blocks["attach"] = attach_block(meta, measured, micro, batch)
    if not batch:
        records.note(
            "attach_batch_size",
            "no tensor input seen at the forward: samples per step unknown (samples/s is 0)",
        )
    sampler = getattr(state, "_sampler", None)
    return assemble(records, Ending(telemetry=Telemetry(sampler, None, sampler is not None)))


def _facts(cfg: Config, probe: Any, device: str, timer: str, name: str) -> RunFacts:
    """The run-wide facts of an attached run: one process of the script's own settings."""
    import torch

    doc = cfg.to_dict()
    return RunFacts(
        config=doc,
        environment=fingerprint(doc, probe, device),
        device=device,
        mode="train",
        nproc=1,
        repeats=1,
        determinism=None,  # the script sets its own
        allocator=None,
        timer=timer,
        torch_threads=torch.get_num_threads(),
        stages=list(TRAIN_STAGES),
        residual_limit=RESIDUAL_LIMIT,
        source="attach",
        name=name,
    )


def attach_block(
    meta: Mapping[str, Any], measured: Sequence[HookStep], micro: int, batch: int
) -> dict[str, Any]:
    """`data.attach`: what was run, and how its steps were cut."""
    boundaries = sorted({s.boundary for s in measured})
    return {
        "command": [str(c) for c in meta.get("command") or []],
        "script": meta.get("script"),
        "script_sha256": meta.get("script_sha256"),
        "then": meta.get("then"),
        "ended": None,  # the parent's, once the script has ended
        "boundary": boundaries[0] if len(boundaries) == 1 else "mixed",
        "micro_batches": micro,
        "samples_per_micro_batch": batch,
        "eval_s": float(sum(s.eval_s for s in measured)),
    }


__all__ = ["attach_block", "attach_config", "build_result"]
