"""The `data` payload of a `throughput` result.

Writers: `runners/throughput.py`'s `assemble`, once, from the records the run returns
(`runners/throughput_records.py`: `RunFacts`, one `SizeRecord` per batch size, appended to by
`runners/sweep.py`, `runners/distributed.py` and the library API, `api/baseline.py`), and the
parts it derives there: `measure/pooling.py` (fresh-process replicates),
`measure/contamination.py`, `comparison/noise.py` and `history/sittings.py` (the noise block),
`measure/telemetry.py` (via `telemetry_block`), `measure/energy.py` (the energy block).
`assemble` checks the payload against `Data`.

What a run did not do is absent, not null: a failed or interrupted batch size has no summary,
a run without replicates no `noise`/`replicates`, a CPU run no GPU telemetry, a single process
no `distributed`. A statistic that came out NaN is written as null (results.py), so derived
floats are `Num` (finite or null).
"""

from __future__ import annotations

from pydantic import Field

from mlbaseline.documents.base import FiniteFloat, Strict

Num = FiniteFloat | None  # a derived figure: null where it was NaN or could not be computed
# flat user-facing facts (a user dataset's description, allocator settings): typed scalars
Scalar = str | int | FiniteFloat | bool | None


# ---------------------------------------------------------------- one batch size


class Median(Strict):
    """`pooling._ci`: the median and a bootstrap CI of it."""

    median: Num
    ci_low: Num
    ci_high: Num


class TraceStage(Strict):
    """One stage (or the step) of `measure.trace.compare`: the profiler's time against mlb's."""

    mlb_s: FiniteFloat
    profiler_s: FiniteFloat
    ranges: int
    source: str
    difference: Num
    agree: bool


class Trace(Strict):
    """`--trace`: the profiler window's cross-check of the stage timer, and its trace file
    (null with the reason in `stored` when no output path was given)."""

    steps: int
    window: str  # where the window lies, in words
    tolerance: FiniteFloat
    floor_s_per_step: FiniteFloat
    stages: dict[str, TraceStage]
    file: str | None = None
    stored: str | None = None
    counter_events: int | None = None


class PartSummary(Strict):
    """One part (`train`, `train_ddp`, `inference`) of one batch size: the group summary of
    its metrics (`pooling.group_summary`) merged with what the run says about itself (the stop
    loop's, the memory meter's, the ranks' or the replicates'). A part that failed has only
    `status` and `error`; an empty group has `n` 0 and no statistics."""

    n: int | None = None
    confidence: Num = None
    samples_per_s: Median | None = None
    time_s: Median | None = None
    stage_share: dict[str, Num] | None = None
    stage_median_s: dict[str, Num] | None = None
    residual_share: Num = None
    replicate_medians: dict[str, Num] | None = None  # replicate id -> median samples/s
    # the stop loop (measure/loop.py) and the step (measure/step.py); pooled replicates give
    # one stop reason and one warm-up count per replicate
    stop_reason: str | None = None
    stop_reasons: list[str | None] | None = None
    warmup_steps: int | list[int | None] | None = None
    measured_steps: int | None = None
    warmup_capped: bool | None = None
    warmup_settled: bool | None = None
    measured_time_s: Num = None
    total_time_s: Num = None
    peak_memory_bytes: int | None = None
    memory_kind: str | None = None
    epochs: int | None = None
    world_size: int | None = None
    grad_bytes: int | None = None
    grad_accum: int | None = None
    samples_per_step: int | None = None
    compile_s: Num = None
    # inference (blocked_autorange)
    blocks: int | None = None
    number_per_run: int | None = None
    warmup_runs: int | None = None
    # several ranks
    peak_memory_bytes_per_rank: dict[str, int | None] | None = None
    ranks: list[int] | None = None
    allreduce_busbw_Bps: Num = None
    telemetry_window_s: list[FiniteFloat] | None = None  # [start, end] on the timeline
    trace: Trace | None = None  # --trace, training only
    # a part that failed (oom / error)
    status: str | None = None
    error: str | None = None


class DdpOverlap(Strict):
    """`distributed._overlap`: DDP's overlapped step beside the explicit all-reduce step."""

    allreduce_step_s: Num
    ddp_step_s: Num
    ddp_over_allreduce: Num
    grad_sync_s: Num
    meaning: str


class BatchEntry(Strict):
    """`data.batch_sizes[str(B)]`: status ok / oom / error / interrupted, why it stopped (per
    replicate when pooled), and the summaries of the parts that ran."""

    batch_size: int
    status: str
    stop_reason: str | None = None
    stop_reasons: list[str | None] | None = None
    train: PartSummary | None = None
    train_ddp: PartSummary | None = None
    inference: PartSummary | None = None
    ddp_overlap: DdpOverlap | None = None


# ---------------------------------------------------------------- run-wide blocks


class Determinism(Strict):
    """`measure.determinism.set_determinism`'s flags."""

    seed: int
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    python_hash_seed: str | None = None


class Allocator(Strict):
    """`measure.allocator.tune`: whether mallopt was applied, with what, or why not."""

    malloc_tuning: bool
    settings: dict[str, int] | None = None
    reason: str | None = None


class Dataset(Strict):
    """`workloads.factory.build_dataset`'s description: synthetic vision or text, an image
    folder, or a user's dataset (its type is the import path)."""

    type: str
    len: int
    image_size: int | None = None
    overlong: int | None = None
    max_length: int | None = None
    mean_length: Num = None
    root: str | None = None


class Overhead(Strict):
    """`TelemetrySampler.overhead`: the sampler's own cost (also `mlb run`'s `telemetry`)."""

    samples: int
    interval_s: FiniteFloat
    mean_sample_s: FiniteFloat
    max_sample_s: FiniteFloat
    overhead_fraction: FiniteFloat
    mean_sample_cpu_s: FiniteFloat
    cpu_overhead_fraction: FiniteFloat
    meaning: str


class GpuTelemetry(Strict):
    kernel_active_pct_mean: Num = None
    memory_used_bytes_max: Num = None
    temperature_c_max: Num = None
    power_w_mean: Num = None
    sm_clock_mhz_mean: Num = None
    throttle_reasons_seen: list[str] = Field(default_factory=list)


class TelemetrySummary(Strict):
    """`TelemetrySampler.summary`: means and peaks of the timeline (null: never read)."""

    rows: int
    gaps: int
    duration_s: FiniteFloat
    cpu_pct_mean: Num = None
    rss_bytes_max: Num = None
    read_bytes_delta: Num = None
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: dict[str, GpuTelemetry] = Field(default_factory=dict)  # GPU index -> its summary


class Telemetry(Strict):
    """`runners.throughput.telemetry_block`: where the timeline is (or why it is not)."""

    interval_s: FiniteFloat
    overhead: Overhead
    summary: TelemetrySummary
    columns: list[str]
    owned: bool
    csv: str | None = None
    stored: str | None = None


class CpuSnapshot(Strict):
    t_s: FiniteFloat
    busy_s: FiniteFloat
    own_s: FiniteFloat
    load: list[FiniteFloat]


class CpuPhase(Strict):
    """`contamination.phase_record`: CPU use of one phase, ours and other programs'."""

    phase: str
    duration_s: FiniteFloat
    busy_cores: FiniteFloat
    own_cores: FiniteFloat
    foreign_cores: FiniteFloat
    start: CpuSnapshot
    end: CpuSnapshot


class EnergyWindow(Strict):
    """`measure.energy.Window`: one window of measured steps; `flag` "" gives a figure,
    else short_window / no_reading / no_update / below_min_window (then `joules` may be null)."""

    start_s: FiniteFloat
    seconds: FiniteFloat
    steps: int
    samples: int
    joules: Num
    flag: str
    replicate: int | None = None  # pooled fresh-process replicates


class EnergySize(Strict):
    windows: list[EnergyWindow]
    reason: str | None = None  # why no window gave a figure


class Energy(Strict):
    """`measure.energy.EnergyMeter.block`: how the energy was measured, or why not."""

    measured: bool
    reason: str | None = None
    source: str | None = None  # nvml-counter / power-polling / rapl
    update_period_s: Num = None
    min_window_s: Num = None
    device_index: int | None = None
    interval_s: Num = None  # power polling: the telemetry interval
    zones: list[str] | None = None  # rapl
    covers: str | None = None
    batch_sizes: dict[str, EnergySize] | None = None


class Contamination(Strict):
    """`CpuAccount.to_dict` (throughput and `mlb run`'s baseline)."""

    threshold_cores: FiniteFloat
    contaminated: bool
    max_foreign_cores: Num = None
    worst_phase: str | None = None
    phases: list[CpuPhase] = Field(default_factory=list)
    method: str
    advice: str | None = None  # the measuring path's advice when contaminated (files since 26)


class Sittings(Strict):
    """`history.sittings.sitting_records`: the between-sitting noise of one metric."""

    sittings: int
    figure_sd: FiniteFloat
    process_part_sd: FiniteFloat
    between_sd: FiniteFloat
    between_share: FiniteFloat
    dof: int
    history_ids: list[int] = Field(default_factory=list)
    mde_across_sittings: Num = None


class Noise(Strict):
    """`stats.noise.summary` of one metric with >= 2 replicates (+ `sittings` from the
    history): its variance components and the MDE of a comparison like it."""

    processes: int
    values: int
    within_sd: FiniteFloat
    between_sd: FiniteFloat
    between_share: FiniteFloat
    process_sd: FiniteFloat
    dof: int
    alpha: FiniteFloat
    power: FiniteFloat
    metrics_judged: int
    mde: Num
    decidable: bool
    replicates_to_decide: int
    target: FiniteFloat
    replicates_for_target: int | None
    threshold: FiniteFloat
    sittings: Sittings | None = None


class ReplicatePlan(Strict):
    """`repeats: auto`'s decision (`runners.throughput._enough`), or why one process ran
    (`stop` "single" with a `reason`)."""

    stop: str
    reason: str | None = None
    half_width: Num = None
    worst_metric: str | None = None
    needed: int | None = None
    replicates: int | None = None
    target: Num = None
    budget_s: Num = None
    walls_s: list[FiniteFloat] | None = None
    message: str | None = None
    over_budget: str | None = None


class ReplicateStart(Strict):
    """`runners.forkserver.launcher`'s record of how the replicates started."""

    asked: str
    start: str
    reason: str | None = None
    zygote_import_s: Num = None


class Replicate(Strict):
    """`pooling.pool_replicates`: one fresh-process replicate, as it reported itself."""

    replicate: int
    status: str
    pid_note: str
    batch_sizes: dict[str, BatchEntry] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class Launch(Strict):
    """One launch of `runners.distributed.train_distributed` (a failed rank relaunches)."""

    sizes: list[int]
    error: str | None = None
    ranks: list[RankInfo] = Field(default_factory=list)


class RankInfo(Strict):
    rank: int
    pid: int
    device: str
    threads: int | None = None
    group_rank: int | None = None
    local_rank: int | None = None
    hostname: str | None = None


class Distributed(Strict):
    """`data.distributed`: mlb's own launcher, an external torchrun, or the library API inside
    a user's process group (only `world_size` and `backend`)."""

    world_size: int
    backend: str
    launcher: str | None = None
    run_id: str | None = None
    nnodes: int | None = None
    nproc_per_node: int | None = None
    sync_modes: list[str] | None = None
    decisions: str | None = None
    pooling: str | None = None
    busbw_factor: str | None = None
    launches: list[Launch] | None = None
    ranks: list[RankInfo] | None = None


Launch.model_rebuild()


class Attach(Strict):
    """`data.attach` (`runners.attach_result.attach_block`): the script `mlb attach` ran, how
    its steps were cut, and how it ended (`then` stop / continue; `ended`, per process)."""

    command: list[str]
    script: str | None = None
    script_sha256: str | None = None
    then: str | None = None
    ended: str | None = None
    exit_codes: list[int | None] | None = None
    boundary: str | None = None  # "optimizer", or "backward" for a manual update
    micro_batches: int | None = None
    samples_per_micro_batch: int | None = None
    eval_s: Num = None  # eval time inside the measured steps' intervals, kept out of them


class Stop(Strict):
    """`data.stop` (library API): where measuring ended in the user's loop. `step`: the steps
    it timed, warm-up included; `advisory`: `Baseline(advisory=True)` kept `bl.done` False, so
    the loop was not cut and the steps after `step` ran untimed."""

    advisory: bool
    step: int


class Data(Strict):
    """`data` of a throughput result (the CLI's, pooled replicates', or the library API's).

    Every field has a default: mlb always writes the run-wide ones, but a 1.0 file may hold
    only its measurements (an empty `data`, as the first version's golden file does), and
    such a file must stay readable (its samples are the truth; the rest is derived)."""

    device: str | None = None
    mode: str | None = None
    nproc: int | None = None
    repeats: int | str | None = None  # a count, or "auto"
    stages: list[str] = Field(default_factory=list)
    residual_limit: Num = None
    batch_sizes: dict[str, BatchEntry] = Field(default_factory=dict)
    timer: str | None = None
    torch_threads: int | None = None
    determinism: Determinism | None = None  # not taken by the library API
    allocator: Allocator | None = None
    dataset: Dataset | None = None
    telemetry: Telemetry | None = None
    energy: Energy | None = None
    contamination: Contamination | None = None
    noise: dict[str, Noise] | None = None  # metric name -> its noise record
    replicate_plan: ReplicatePlan | None = None
    replicate_start: ReplicateStart | None = None
    replicates: list[Replicate] | None = None
    distributed: Distributed | None = None
    source: str | None = None  # "api": written by the library API
    name: str | None = None  # the library API's Baseline name
    ab_pairs: list[int] | None = None  # `mlb ab --processes`: an arm's pooled pairs
    attach: Attach | None = None  # `mlb attach`: the script and how it ended
    stop: Stop | None = None  # the library API: where measuring ended, advisory or not
