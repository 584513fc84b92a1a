"""YAML → typed, frozen config objects: the schema, profiles and precedence in one place
(the typed build from plain data and the dotted-tree helpers: `config_build`).

Precedence (highest first): CLI flag > YAML file > profile > built-in default. `resolve()` is the
only function that applies it. Every field carries help text in its metadata; docs/REFERENCE.md's
config reference is generated from these fields (`config_reference()`), and a test keeps it current.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# the typed build and the dotted-tree helpers live in config_build; callers import them from here
from mlbaseline.config_build import build, deep_merge, flatten, nest, parse_set, type_name
from mlbaseline.config_cost import CostConfig
from mlbaseline.errors import ConfigError
from mlbaseline.redact import redact_tree
from mlbaseline.yamlread import read_mapping

PROFILES_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_PROFILE = "demo"


def _f(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field with help text and validation metadata (min, gt, max, choices,
    nonempty for lists)."""
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class GoldenConfig:
    """The four golden parameters. They may be changed, but compare treats a change as
    'not comparable'."""

    seed: int = _f(42, "Seed for random, NumPy, torch and every CUDA device.", min=0)
    batch_size: int = _f(64, "Reference batch size (64 for vision, 16 for text).", min=1)
    subset_size: int = _f(1024, "Samples in the baseline subset (16 steps at batch 64).", min=1)
    telemetry_interval_s: float = _f(0.1, "Telemetry sampling interval in seconds.", gt=0)


# torch.compile modes `workload.compile` accepts ("off": eager, no compile).
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Workload options that change what a step computes: each is a blocking (comparability) key of
# the fingerprint; a result that predates one compares as its default.
WORKLOAD_OPTION_KEYS = (
    "workload.compile",
    "workload.amp",
    "workload.grad_accum",
    "workload.channels_last",
)
# What the workload *is* (DESIGN "Comparability"): its data and the shape of every batch. Each
# is a blocking fingerprint key, so a 64 px image folder is never judged against 32 px synthetic
# data and history series never pool two workloads (dtype and the options above are blocking
# too, and so are the golden batch size and the subset manifest hash, `subset_sha256`).
WORKLOAD_IDENTITY_KEYS = (
    "workload.dataset", "workload.data_dir", "workload.dataset_kwargs", "workload.dataset_size",
    "workload.task", "workload.image_size", "workload.vocab_size", "workload.min_length",
    "workload.max_length", "workload.num_classes", "throughput.batch_sizes",
    "workload.transform", "workload.transform_kwargs", "workload.collate", "throughput.num_workers",
)  # fmt: skip
# Config paths whose values are part of the blocking fingerprint (envinfo.fingerprint).
BLOCKING_CONFIG_KEYS = (
    *(f"golden.{f.name}" for f in dataclasses.fields(GoldenConfig)),  # the four golden ones
    "workload.dtype",
    *WORKLOAD_OPTION_KEYS,
    *WORKLOAD_IDENTITY_KEYS,
)


@dataclass(frozen=True)
class WorkloadConfig:
    """What is measured: model, data, loss and optimizer, by name or import path."""

    task: str = _f("vision", "Kind of built-in synthetic data.", choices=("vision", "text"))
    model: str = _f(
        "torchvision:resnet18",
        "Model: `torchvision:NAME`, `builtin:NAME` (tiny_cnn, tiny_mlp, tiny_text) or "
        "`pkg.module:callable`.",
    )
    model_kwargs: dict[str, Any] = _f({}, "Keyword arguments for the model factory.")
    dataset: str = _f(
        "synthetic",
        "Dataset: `synthetic` (built-in, no data needed), `imagefolder` (uses data_dir) or "
        "`pkg.module:callable`.",
    )
    dataset_kwargs: dict[str, Any] = _f({}, "Keyword arguments for the dataset factory.")
    data_dir: str | None = _f(None, "Image-folder dataset root (one sub-folder per class).")
    transform: str | None = _f(
        None, "Transform factory `pkg.module:callable`; default: resize + to-tensor."
    )
    transform_kwargs: dict[str, Any] = _f({}, "Keyword arguments for the transform factory.")
    collate: str | None = _f(None, "A dataset factory's collate_fn, `pkg.module:callable`.")
    loss: str = _f("torch.nn:CrossEntropyLoss", "Loss factory by import path.")
    loss_kwargs: dict[str, Any] = _f({}, "Keyword arguments for the loss factory.")
    optimizer: str = _f("torch.optim:SGD", "Optimizer class by import path.")
    optimizer_kwargs: dict[str, Any] = _f({"lr": 0.01}, "Keyword arguments for the optimizer.")
    image_size: int = _f(224, "Side of synthetic images, pixels.", min=8)
    num_classes: int = _f(
        10, "Classes of the synthetic datasets; unset: an image folder's own count.", min=1
    )
    dataset_size: int | None = _f(
        None, "Samples in the synthetic dataset; default: golden.subset_size.", min=1
    )
    vocab_size: int = _f(10000, "Vocabulary of the synthetic text dataset.", min=2)
    min_length: int = _f(16, "Shortest synthetic text sequence, tokens.", min=1)
    max_length: int = _f(
        512, "Longest allowed sequence; longer samples are cut, with a warning.", min=1
    )
    device: str = _f("auto", "`auto` (cuda when present, else cpu), `cpu`, `cuda` or `cuda:N`.")
    dtype: str = _f("float32", "Model dtype.", choices=("float32", "float16", "bfloat16"))
    deterministic: bool = _f(True, "torch.backends.cudnn.deterministic.")
    cudnn_benchmark: bool = _f(False, "torch.backends.cudnn.benchmark (False keeps kernels fixed).")
    threads: int | None = _f(None, "torch.set_num_threads; default: torch's own choice.", min=1)
    malloc_tuning: bool = _f(
        True,
        "glibc mallopt: fixed mmap/trim thresholds, so freed activations are not faulted in "
        "again every step (bench drift: in-process CV halved); recorded in the result.",
    )
    compile: str = _f(
        "off",
        "torch.compile mode for training and inference (`off`: eager). The first step's "
        "compile is timed apart (`compile_s`), never warm-up or steady state.",
        choices=COMPILE_MODES,
    )
    amp: str = _f(
        "off",
        "Autocast dtype (`off`, `bfloat16`, `float16`); float16 also scales the loss with a "
        "GradScaler and needs CUDA; the model stays float32 (workload.dtype).",
        choices=("off", "bfloat16", "float16"),
    )
    grad_accum: int = _f(
        1,
        "Micro-batches per optimizer step: one measured step is N forward/backward passes "
        "(stages summed over them) and one optimizer step; samples per step = N × batch size.",
        min=1,
    )
    channels_last: bool = _f(False, "Model and 4-D inputs in torch.channels_last memory format.")
    import_paths: list[str] = _f(
        [],
        "Folders searched for `module:attr` targets, after the installed packages (relative "
        "to the config file); the config file's folder and the cwd are always searched.",
    )


@dataclass(frozen=True)
class ThroughputConfig:
    """Training and inference throughput, stage-decomposed."""

    mode: str = _f("both", "What to measure.", choices=("train", "inference", "both"))
    batch_sizes: list[int] = _f([32, 64, 128], "Batch-size sweep.", min=1, nonempty=True)
    min_time_s: float = _f(5.0, "Stop rule: measure at least this long (after warm-up).", min=0)
    min_steps: int = _f(16, "Stop rule: at least this many measured steps.", min=1)
    max_steps: int = _f(500, "Stop rule cap: at most this many measured steps.", min=1)
    max_time_s: float = _f(120.0, "Stop rule cap: at most this long per batch size.", gt=0)
    stability_tolerance: float = _f(
        0.03, "Stop rule: the last windows' medians within this fraction.", gt=0
    )
    stability_windows: int = _f(3, "Stop rule: number of windows that must agree.", min=1)
    window: int = _f(8, "Steps per stability window.", min=2)
    warmup_min: int = _f(3, "Warm-up: at least this many steps.", min=0)
    warmup_max: int = _f(50, "Warm-up: at most this many steps, then a warning.", min=1)
    warmup_tolerance: float = _f(
        0.05, "Warm-up ends when a window's split halves agree within this fraction.", gt=0
    )
    num_workers: int = _f(0, "DataLoader workers feeding the training loop.", min=0)
    nproc: int = _f(1, "Processes (torch.distributed, gloo on CPU, NCCL on GPU).", min=1)
    sync_mode: str = _f(
        "both", "Gradient sync timing in multi-process runs.", choices=("allreduce", "ddp", "both")
    )
    repeats: int | str = _f(
        "auto",
        "Fresh-process replicates: a number (1: this process only), or auto: at least 5, until "
        "the median is known to repro_target, within replicates_budget_s.",
        min=1,
        choices=("auto",),
    )
    repro_target: float = _f(
        0.015, "auto replicates: the 95% t half-width of the median to reach (fraction).", gt=0
    )
    replicates_budget_s: float = _f(
        120.0, "auto replicates: no new replicate once it would end past this many seconds.", gt=0
    )
    max_repeats: int = _f(20, "auto replicates: at most this many.", min=1)
    replicate_start: str = _f(
        "fresh",
        "How each replicate process starts: fresh (a new interpreter each) or fork (forked from "
        "a helper that imported torch and mlb once: a replicate costs its measurement, not "
        "seconds of imports; bench `replicates`: 1.35x the replicates a minute on the demo). "
        "Not the default: that A/A, on a busy machine, found forked processes' spread at 0.6 "
        "of fresh ones' in variance (F-test p 0.06-0.10, paired p < 0.001), and replicates "
        "that agree more than fresh processes would make a comparison anti-conservative. fork "
        "falls back to fresh for nproc > 1 and where os.fork is missing.",
        choices=("fresh", "fork"),
    )
    telemetry: bool = _f(True, "Run the telemetry sampler while measuring.")
    control_every: int = _f(
        8,
        "Time the control kernel (a fixed matmul, outside the step timer) after every N-th "
        "measured step; `mlb compare` adjusts for the drift it shows. 0: off.",
        min=0,
    )
    contamination_cores: float = _f(
        0.25,
        "A run whose foreign CPU use (busy CPU not from mlb's own processes) exceeds this many "
        "cores in a phase marks itself contaminated.",
        min=0,
    )
    trace: bool = _f(
        False,
        "Profiler cross-check: after the measured steps, trace_steps more under torch.profiler "
        "(a range per stage); a Chrome/Perfetto trace per batch size beside the result.",
    )
    trace_steps: int = _f(5, "Steps in the profiler window (--trace).", min=1)
    trace_tolerance: float = _f(
        0.10, "--trace: profiler and stage timer disagree beyond this fraction: a warning.", gt=0
    )


@dataclass(frozen=True)
class LatencyConfig:
    """Batch-1 request latency under concurrency."""

    requests: int = _f(1000, "Requests per level.", min=1)
    batch_size: int = _f(1, "Batch size of one request.", min=1)
    concurrency: int = _f(1, "Closed loop: clients, each sends when its answer is back.", min=1)
    rate: float | None = _f(None, "Open loop: Poisson arrivals at this rate (requests/s).", gt=0)
    sweep: list[int] = _f([], "Concurrency sweep, e.g. [1, 2, 4, 8].")
    trim_fraction: float = _f(
        0.05, "Drop this share of requests at each end, by send order.", min=0, max=0.45
    )
    sla_p99_s: float = _f(0.150, "SLA: p99 latency must not exceed this, seconds.", gt=0)
    warmup_requests: int = _f(10, "Untimed requests before measuring.", min=0)
    url: str | None = _f(None, "Endpoint mode: HTTP URL to send requests to (only this URL).")
    method: str = _f("POST", "Endpoint mode: HTTP method.", choices=("GET", "POST", "PUT"))
    body: str | None = _f(None, "Endpoint mode: request body (text).")
    body_file: str | None = _f(
        None, "Endpoint mode: file whose bytes are the request body (a regular file ≤ 64 MiB)."
    )
    content_type: str = _f("application/json", "Endpoint mode: Content-Type header.")
    timeout_s: float = _f(10.0, "Endpoint mode: limit of one whole request, seconds.", gt=0)
    max_response_bytes: int = _f(
        64 * 1024 * 1024, "Endpoint mode: a longer response body fails the request.", min=1
    )
    loop: str = _f(
        "auto",
        "Which loops run: auto (open when `rate` is set, else closed), closed, open, or both "
        "(both shows what the closed loop hides: coordinated omission).",
        choices=("auto", "closed", "open", "both"),
    )
    late_threshold_s: float | None = _f(
        None,
        "Open loop: a send is late when it starts more than this after its schedule; "
        "default: min(1 ms, 10% of the mean inter-arrival time).",
        gt=0,
    )


@dataclass(frozen=True)
class DataloaderConfig:
    """Data-loading baseline: read / decode / transform / collate, worker sweeps."""

    data_dir: str | None = _f(None, "Image-folder root; default: a generated synthetic tree.")
    workers: list[int] = _f(
        [0, 2, 4, 8], "num_workers sweep (capped at usable CPUs).", min=0, nonempty=True
    )
    pin_memory: list[bool] = _f([False, True], "pin_memory settings to try.", nonempty=True)
    persistent_workers: bool = _f(False, "Keep workers alive between passes.")
    batches: int = _f(16, "Batches per setting (at least 16).", min=1)
    shuffle: bool = _f(
        True,
        "Read like a training loop: a seeded random permutation of the whole dataset (false: "
        "the first files in order, which may all be one class).",
    )
    batch_size: int | None = _f(None, "Batch size; default: golden.batch_size.", min=1)
    decoder: str = _f("pil", "Image decoder.", choices=("pil", "opencv"))
    cold_cache: bool = _f(True, "Also measure a cold page-cache pass (posix_fadvise DONTNEED).")
    knee_tolerance: float = _f(0.05, "Knee: smallest workers within this share of the best.", gt=0)
    synthetic_images: int = _f(1024, "Images in the generated tree when no data_dir.", min=1)
    synthetic_format: str = _f(
        "jpeg",
        "File format of the generated tree (JPEG: realistic decode cost).",
        choices=("jpeg", "png"),
    )
    persistent_epochs: int = _f(
        3,
        "Short epochs timed per worker count to measure worker start-up with "
        "persistent_workers off and on (0 skips).",
        min=0,
    )
    prefetch_factor: int = _f(2, "Batches each worker loads ahead (num_workers > 0).", min=1)


@dataclass(frozen=True)
class SubsetConfig:
    """The stratified baseline subset and its KL validation."""

    source: str | None = _f(None, "Image-folder dataset to sample from.")
    n: int | None = _f(None, "Subset size; default: golden.subset_size.", min=1)
    strategy: str = _f(
        "proportional", "Per-class quota rule.", choices=("proportional", "balanced")
    )
    link: str = _f("copy", "How files are placed.", choices=("copy", "hardlink", "symlink"))
    extractor: str = _f("stats", "Features for KL validation.", choices=("stats", "resnet18"))
    weights: str | None = _f(None, "Local resnet18 weights file (else fixed-seed random init).")
    kl_threshold: float = _f(0.05, "Pass when the mean Gaussian KL is below this.", gt=0)
    reference_max: int = _f(10000, "Full-set side: at most this many reference images.", min=1)
    retries: int = _f(1, "Seeds to try; the subset with the lowest KL is kept.", min=1)
    keep_corrupt: bool = _f(False, "Keep images that fail to decode.")
    save_tensors: bool = _f(False, "Also write baseline_subset.pt (uint8 tensors + labels).")
    feature_size: int = _f(224, "resnet18 extractor: images are resized to this side, px.", min=16)
    workers: int | None = _f(
        None, "Threads decoding images for features; default: usable CPUs, at most 8.", min=1
    )


@dataclass(frozen=True)
class CompareConfig:
    """How two results are compared."""

    alpha: float = _f(0.05, "Significance level after Holm correction.", gt=0, max=1)
    threshold: float = _f(0.03, "Practical threshold: smallest change that matters.", gt=0)
    thresholds: dict[str, float] = _f({}, "Per-metric threshold overrides, by metric name.")
    confidence: float = _f(0.95, "Confidence level of the bootstrap CIs.", gt=0, max=0.9999)
    n_resamples: int = _f(2000, "Bootstrap resamples.", min=100)
    min_replicates: int = _f(2, "Fresh processes a side needs for its spread to count as the "
                             "noise between processes; fewer on both sides: insufficient data.",
                             min=2)  # fmt: skip
    fail_on: str = _f("regressed", "Which verdicts exit 1.", choices=("regressed", "any", "never"))
    memory_threshold: float = _f(0.05, "Practical threshold of memory metrics (role memory).", gt=0)


@dataclass(frozen=True)
class EnvCheckConfig:
    """Thresholds of `mlb env-check` (and of the env-check phase of `mlb run`)."""

    gpu_max_temp_c: float = _f(65.0, "GPU temperature limit, °C.")
    gpu_max_memory_used: float = _f(0.10, "GPU memory in use before the run, share.", min=0, max=1)
    gpu_min_memory_gb: float = _f(12.0, "GPU total memory needed for batch 64, GB.", min=0)
    cpu_min_idle: float = _f(0.90, "CPU idle share needed before a run.", min=0, max=1)
    cpu_idle_window_s: float = _f(0.5, "Window over which CPU idle is measured, s.", gt=0)
    cpu_max_load: float = _f(
        0.5, "1-minute load average per logical CPU above which env-check warns.", min=0
    )
    min_ram_gb: float = _f(32.0, "Available RAM advised for pinned memory, GB.", min=0)
    expect: dict[str, str] = _f(
        {}, "Version pins: torch, torchvision, cuda, cudnn, driver (prefix match)."
    )


@dataclass(frozen=True)
class HistoryConfig:
    """The baseline history (`mlb history`): where results are recorded, and the gate."""

    store: str = _f(
        "",
        "History store: an SQLite file or a postgresql:// URL (empty: "
        "mlb-results/history.sqlite); env MLB_HISTORY overrides it.",
    )
    record: bool = _f(True, "Record every result mlb writes in the history store.")
    gate_last: int = _f(5, "Comparable baselines `mlb history gate` judges against.", min=1)
    min_segment: int = _f(3, "Runs a change point needs after it to be confirmed.", min=1)
    name: str = _f("", "This run's name in history list, the report and compare (--name).")
    tags: list[str] = _f([], "This run's tags, for `mlb history list --tag` (--tag).")


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration; copied into every result."""

    profile: str = _f(DEFAULT_PROFILE, "Profile the config was built on.")
    golden: GoldenConfig = field(default_factory=GoldenConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    throughput: ThroughputConfig = field(default_factory=ThroughputConfig)
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    dataloader: DataloaderConfig = field(default_factory=DataloaderConfig)
    subset: SubsetConfig = field(default_factory=SubsetConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    env_check: EnvCheckConfig = field(default_factory=EnvCheckConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    cost: CostConfig = field(default_factory=CostConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _lookup(tree: Mapping[str, Any], dotted: str, default: Any) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return copy.deepcopy(default)
        node = node[part]
    return node


def workload_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """{key: value} of every WORKLOAD_IDENTITY_KEYS in a resolved config in dict form (a
    result's `config`): the fingerprint's, and what compare and history rebuild for a result
    written before they were blocking, by the same rules. A key the config lacks (written
    before the field existed) is the built-in default: what that run used."""
    out = {}
    for key in WORKLOAD_IDENTITY_KEYS:
        value = _lookup(config, key, _lookup(_DEFAULTS, key, None))
        if key == "workload.data_dir" and isinstance(value, str) and value:
            # the path as written, normalised ('data/x/' == './data/x'), never resolved: the
            # same relative folder in two CI checkouts is one dataset, and a result read on
            # another machine cannot be resolved against the cwd it ran in
            value = os.path.normpath(value)
        out[key] = value
    return out


_DEFAULTS = Config().to_dict()


# ---------------------------------------------------------------- sources and precedence


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml") if p.stem != "default")


def load_profile(name: str) -> dict[str, Any]:
    """The built-in profile `name` from `configs/NAME.yaml`."""
    names = available_profiles()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"profile: unknown profile '{name}'{hint}; known: {', '.join(names)}")
    data = read_mapping(PROFILES_DIR / f"{name}.yaml")
    data.pop("profile", None)
    return data


def resolve(
    config_file: Path | None = None,
    profile: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """The one place precedence is applied: CLI overrides > file > profile > built-in default.

    The profile is the `--profile` flag, else the file's own `profile:` key, else `demo`.
    `overrides` maps dotted paths (`throughput.batch_sizes`) to values; None values are skipped
    so that unset CLI flags do not override anything.
    """
    file_data = read_mapping(config_file) if config_file is not None else {}
    file_profile = file_data.pop("profile", None)
    if file_profile is not None and not isinstance(file_profile, str):
        raise ConfigError("profile: expected a string")
    name = profile or file_profile or DEFAULT_PROFILE
    merged = deep_merge(load_profile(name), file_data)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            merged = deep_merge(merged, nest(dotted, value))
    merged["profile"] = name
    if config_file is not None:
        merged = _with_config_dir(merged, config_file)
    explicit = _lookup(file_data, "workload.num_classes", None)
    if explicit is None:
        explicit = (overrides or {}).get("workload.num_classes")
    return build(Config, merged if explicit is not None else _folder_classes(merged))


def _folder_classes(merged: dict[str, Any]) -> dict[str, Any]:
    """An image folder knows its classes: unless the config file or a flag sets
    workload.num_classes (a profile's value describes its synthetic data), the resolved config
    records the folder's count, so the model's head and the workload identity say what was
    trained. A set value that differs is an error where the dataset is built (factory)."""
    workload = merged.get("workload")
    if not isinstance(workload, Mapping) or workload.get("dataset") != "imagefolder":
        return merged
    root = workload.get("data_dir")
    if not isinstance(root, str) or not root or not os.path.isdir(root):
        return merged
    try:  # torchvision's ImageFolder rule: every sub-folder is a class
        count = sum(1 for entry in os.scandir(root) if entry.is_dir())
    except OSError:
        return merged
    if count == 0:
        return merged  # ImageFolder names the empty folder when the dataset is built
    return {**merged, "workload": {**workload, "num_classes": count}}


def _with_config_dir(merged: dict[str, Any], config_file: Path) -> dict[str, Any]:
    """workload.import_paths relative to the config file, then the file's own folder: a
    `module:attr` beside the config imports from any cwd (wrong types are left to build)."""
    workload = merged.get("workload", {})
    if not isinstance(workload, Mapping) or not isinstance(workload.get("import_paths", []), list):
        return merged
    workload = dict(workload)
    paths = workload.get("import_paths", [])
    base = config_file.resolve().parent
    out = [str(base / p) if isinstance(p, str) else p for p in paths]  # absolute stays absolute
    if str(base) not in out:
        out.append(str(base))
    workload["import_paths"] = out
    return {**merged, "workload": workload}


# ---------------------------------------------------------------- documentation


def iter_fields(cls: type = Config, prefix: str = "") -> typing.Iterator[tuple[str, str, Any, str]]:
    """(dotted name, type, default, help) for every leaf field, in schema order."""
    hints = typing.get_type_hints(cls)
    instance = cls()
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from iter_fields(tp, f"{name}.")
            continue
        yield name, type_name(tp), getattr(instance, f.name), f.metadata.get("help", "")


def config_reference() -> str:
    """Markdown table of every config field; docs/REFERENCE.md embeds it and a test checks it."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, tp, default, help_text in iter_fields():
        shown = yaml.safe_dump(default, default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"| `{name}` | {tp} | `{shown}` | {help_text} |")
    return "\n".join(lines)


def to_yaml(config: Config) -> str:
    return yaml.safe_dump(redact_tree(config.to_dict()), sort_keys=False)  # shown: no secret


__all__ = [
    "BLOCKING_CONFIG_KEYS",
    "COMPILE_MODES",
    "DEFAULT_PROFILE",
    "PROFILES_DIR",
    "WORKLOAD_IDENTITY_KEYS",
    "WORKLOAD_OPTION_KEYS",
    "CompareConfig",
    "Config",
    "CostConfig",
    "DataloaderConfig",
    "EnvCheckConfig",
    "GoldenConfig",
    "HistoryConfig",
    "LatencyConfig",
    "SubsetConfig",
    "ThroughputConfig",
    "WorkloadConfig",
    "available_profiles",
    "build",
    "config_reference",
    "deep_merge",
    "flatten",
    "iter_fields",
    "load_profile",
    "nest",
    "parse_set",
    "resolve",
    "to_yaml",
    "workload_identity",
]
