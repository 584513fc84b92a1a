"""The `data` payload of a `latency` result (written by `runners/latency.py`).

The run-wide settings (`_initial_data`), one `Level` per measured level under `levels` (keyed
`cN` for a closed loop of N clients, `rQPS` for an open loop), the service that was measured,
and the sweep and coordinated-omission sections when they ran. A level that ended with no
successful request has no `stats`/`stages`/`histogram`; a model service adds `determinism`;
an interrupted run may have no level at all. NaN statistics are written as null (results.py),
so a derived float that can be NaN (a CI of too few samples) is nullable here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlbaseline.documents.base import FiniteFloat, Open, Strict
from mlbaseline.documents.data_throughput import Determinism

Ci = tuple[FiniteFloat | None, FiniteFloat | None]


class Trim(Strict):
    fraction: FiniteFloat
    order: str


class Estimate(Strict):
    value: FiniteFloat | None
    ci: Ci


class Distribution(Strict):
    """`runners.latency.distribution`: percentiles, mean and max, each with a bootstrap CI."""

    n: int
    p50: Estimate
    p90: Estimate
    p95: Estimate
    p99: Estimate
    mean: Estimate
    max: Estimate


class StageSplit(Strict):
    median: FiniteFloat | None
    p99: FiniteFloat | None
    mean: FiniteFloat | None
    share_of_mean: FiniteFloat | None


class Histogram(Strict):
    unit: str
    edges: list[FiniteFloat]
    counts: list[int]


class Sla(Strict):
    p99_s: FiniteFloat | None
    threshold_s: FiniteFloat
    met: bool


class Warmup(Strict):
    requests: int
    errors: int


class LevelTrim(Strict):
    head: int
    tail: int
    order: str
    kept: int
    kept_ok: int


class Errors(Strict):
    count: int
    share: FiniteFloat
    by_kind: dict[str, int]


class RequestLog(Strict):
    """Every request, column-wise in send order (`runners.latency._request_log`)."""

    index: list[int]
    client: list[int]
    phase: list[Literal["warmup", "measured", "drain"]]
    scheduled_s: list[FiniteFloat]
    sent_s: list[FiniteFloat]
    latency_s: list[FiniteFloat]
    queue_s: list[FiniteFloat]
    preprocess_s: list[FiniteFloat]
    compute_s: list[FiniteFloat]
    postprocess_s: list[FiniteFloat]
    residual_s: list[FiniteFloat]
    ok: list[bool]
    error: list[str | None]
    detail: list[str | None]
    status: list[int | None]  # the HTTP status, when there was one


class Level(Strict):
    """One measured level (`runners.latency._record_level`); the open-loop keys only for an
    open loop, the statistics only when a successful request was left after trimming."""

    key: str
    prefix: str
    loop: Literal["closed", "open"]
    concurrency: int
    rate: FiniteFloat | None
    engine: str
    requests_planned: int
    completed: int
    warmup_requests: Warmup
    trim: LevelTrim
    errors: Errors
    duration_s: FiniteFloat
    throughput_rps: FiniteFloat | None
    interrupted: bool
    error: str | None
    target_rate: FiniteFloat | None = None
    schedule_rate: FiniteFloat | None = None
    achieved_rate: FiniteFloat | None = None
    late_threshold_s: FiniteFloat | None = None
    late_threshold_rule: str | None = None
    late_count: int | None = None
    late_share: FiniteFloat | None = None
    max_lateness_s: FiniteFloat | None = None
    stats: Distribution | None = None
    stages: dict[str, StageSplit] | None = None
    histogram: Histogram | None = None
    sla: Sla
    requests: RequestLog


class Sweep(Strict):
    """The knee of a closed-loop sweep; keys of the maps are the concurrencies as text."""

    levels: list[int]
    p99_s: dict[str, FiniteFloat | None]
    meets_sla: dict[str, bool]
    passing: list[int]
    knee: int | None
    rule: str


class Omission(Strict):
    """Open- vs closed-loop p99 (`runners.latency._omission`)."""

    closed: str
    open: str
    closed_p99_s: FiniteFloat
    open_p99_s: FiniteFloat
    ratio: FiniteFloat | None
    threshold_ratio: FiniteFloat
    flagged: bool
    closed_throughput_rps: FiniteFloat | None
    open_rate: FiniteFloat
    overloaded: bool
    explanation: str


class Service(Open):
    """`Service.describe()`: the built-in model, HTTP and simulated services' keys are typed;
    `Open` because `Service` is a protocol a user's own service implements, and its
    description may add keys of its own (kept as JSON values)."""

    type: str
    device: str
    # model service (workloads.service)
    model: str | None = None
    task: str | None = None
    input_shape: list[int] | None = None
    dtype: str | None = None
    # HTTP endpoint (measure.latency_services.HttpService); the URL is stored redacted
    url: str | None = None
    method: str | None = None
    content_type: str | None = None
    body_bytes: int | None = None
    body_sha256: str | None = None
    timeout_s: FiniteFloat | None = None
    max_response_bytes: int | None = None  # the response body cap
    redirects: str | None = None
    # simulated services (measure.latency.SimulatedService, FunctionService)
    class_: str | None = Field(default=None, alias="class")
    name: str | None = None


class Data(Strict):
    """`data` of a latency result."""

    mode: Literal["endpoint", "model"]
    percentile_method: str
    quantiles: list[int]
    confidence: FiniteFloat
    ci_method: str
    trim: Trim
    sla_p99_s: FiniteFloat
    max_error_share: FiniteFloat
    loop_notes: dict[str, str]
    levels: dict[str, Level]
    determinism: Determinism | None = None  # model mode only
    service: Service | None = None  # absent when the run stopped before the service was built
    sweep: Sweep | None = None
    coordinated_omission: Omission | None = None
