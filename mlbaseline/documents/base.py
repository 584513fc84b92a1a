"""The building blocks of every result document, and the one-line form of a validation error.

A result file is validated once, when it is read, against a pydantic v2 model of its kind
(`documents.model_for`); these are the parts all kinds share: the envelope (`schema_version`,
`kind`, `tool`, `created_at`, `status`, `config`, `environment`, `measurements`, `summary`,
`warnings`, `verdict`, `artifacts`, `notes`) and the typed scalars. See docs/DOCUMENTS.md.

Rules every model follows (`Strict`):
- strict types: a string is never a number, a number never a string, a bool never a number;
  a JSON integer is accepted where a float is expected (JSON has one number type);
- no NaN or infinity anywhere (the writer stores a NaN as null; a float field that may hold
  one is `FiniteFloat | None`);
- unknown keys are refused (`extra="forbid"`): a key this version does not know is either a
  file of a newer minor (refused rather than half-read) or a damaged one. Files of an older
  minor are mapped by the loader's upgraders before validation, never by loosening a model.
  The few free-form places (user keyword arguments, a fingerprint key a later writer adds) say
  why where they are declared.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic_core import ErrorDetails
from typing_extensions import TypeAliasType

from mlbaseline.config import BLOCKING_CONFIG_KEYS, Config

SCHEMA_VERSION = "1.1"
SCHEMA_MAJOR = SCHEMA_VERSION.split(".")[0]
KINDS = ("env-check", "throughput", "latency", "dataloader", "subset", "compare", "run", "ab")
# `running`: mlb run's baseline.json while the run is under way (a reader that finds it later
# treats it as incomplete: the run died before it could say so)
STATUSES = ("complete", "running", "interrupted", "failed")
CHECK_STATUSES = ("pass", "warn", "fail", "skip")
# samples beyond this magnitude are refused: the statistics of a comparison square and sum
# them (variance, bootstrap means), and 1e308 would overflow to inf. No time, byte count or
# rate a measurement can produce comes near it.
SAMPLE_BOUND = 1e100


class Strict(BaseModel):
    """Base of every document model: strict types, finite floats, no unknown keys."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        allow_inf_nan=False,
        # validate the whole file once and then let it go: nothing mutates a model
        frozen=True,
        # a field may be named like a pydantic attribute (e.g. `schema`) without a warning
        protected_namespaces=(),
    )


# ---------------------------------------------------------------- envelope parts


FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# a JSON value with finite numbers: only where the content is free-form by nature (user
# keyword arguments, context a writer attaches); see the comment at each use
JsonValue = TypeAliasType(
    "JsonValue",
    "str | int | FiniteFloat | bool | list[JsonValue] | dict[str, JsonValue] | None",  # type: ignore[valid-type]
)
# one raw sample: finite and within SAMPLE_BOUND (see there)
Sample = Annotated[float, Field(allow_inf_nan=False, ge=-SAMPLE_BOUND, le=SAMPLE_BOUND)]


class Open(Strict):
    """A Strict model that also keeps keys it does not declare, each a JSON value: for places
    where writers add context freely (a warning's extra fields, a metric's meta); the keys
    every reader relies on are still declared and typed."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, JsonValue]


class Tool(Strict):
    name: str
    version: str


class Trim(Strict):
    """A latency metric's trim: how many requests of the head and tail (in send order) went to
    `warmup` (runners/latency.py)."""

    head: int
    tail: int
    order: str


class MetricMeta(Open):
    """What a metric is within its group: the stage, the role (total, stage, rate, …)."""

    group: str | None = None
    role: str | None = None
    stage: str | None = None
    stages: list[str] | None = None
    arm: str | None = None
    per: str | None = None
    split: str | None = None
    method: str | None = None
    kernel: str | None = None
    note: str | None = None
    unit_note: str | None = None
    number_per_run: int | None = None
    threads: int | None = None
    every: int | None = None
    trim: Trim | None = None


class Metric(Strict):
    """Raw samples of one metric (results.Metric): SI units, warm-up apart, ids per value."""

    name: str | None = None  # written, but the key in `measurements` is the name
    unit: str
    higher_is_better: bool
    values: list[Sample] = Field(min_length=1)
    warmup: list[Sample] | None = None  # null read as none, as the 1.0 loader did
    replicate: list[int] | None = None
    rank: list[int] | None = None
    meta: MetricMeta | None = None

    @model_validator(mode="after")
    def _ids_match_values(self) -> Metric:
        for label, ids in (("replicate", self.replicate), ("rank", self.rank)):
            if ids is not None and len(ids) != len(self.values):
                raise ValueError(f"{label} ids must match values in length")
        return self


class ResultWarning(Open):
    """One warning as data (`Result.warn`): a code, a message, and context fields."""

    code: str
    message: str
    value: FiniteFloat | str | None = None
    threshold: FiniteFloat | str | None = None
    metric: str | None = None
    metrics: list[str] | None = None
    phase: str | None = None
    side: str | None = None
    group: str | None = None
    part: str | None = None
    error: str | None = None
    keys: list[str] | None = None
    needed: int | None = None
    pairs: int | None = None
    repeats: int | None = None
    count: int | None = None
    batch_size: int | None = None
    requested: int | None = None
    usable_cpus: int | None = None
    samples: int | None = None
    max_length: int | None = None
    factor: FiniteFloat | None = None
    ratio: FiniteFloat | None = None


CheckValue = bool | int | FiniteFloat | str | None | list[FiniteFloat | int | str | None]


class Check(Strict):
    name: str
    status: Literal[CHECK_STATUSES]  # type: ignore[valid-type]
    value: CheckValue = None
    threshold: CheckValue = None
    message: str = ""
    ok: bool | None = None  # derived from status; written for readers of the raw JSON


class Verdict(Strict):
    status: Literal["pass", "warn", "fail"] | None = None  # derived from the checks
    checks: list[Check] = []


class MetricSummary(Strict):
    """stats.Summary.to_dict(), or {"n": 0} for a metric without finite samples; a NaN
    statistic is written as null."""

    n: int
    median: FiniteFloat | None = None
    q1: FiniteFloat | None = None
    q3: FiniteFloat | None = None
    iqr: FiniteFloat | None = None
    mean: FiniteFloat | None = None
    stdev: FiniteFloat | None = None
    cv: FiniteFloat | None = None
    min: FiniteFloat | None = None
    max: FiniteFloat | None = None


class Summary(Strict):
    """Derived, and recomputed from the samples on load; validated so that a reader of the
    raw file never meets a wrong type either."""

    metrics: dict[str, MetricSummary] = {}
    percentile_method: str | None = None


class Fingerprint(Open):
    """envinfo.fingerprint: blocking keys (a difference makes two results not comparable) or
    informational ones. The keys the code reads are typed; a key a writer adds later (a
    fingerprint is compared key by key, by equality) is kept as a JSON value."""


def _blocking_fields() -> dict[str, Any]:
    """The blocking config keys of the fingerprint (`golden.seed`, `workload.dtype`, …) carry
    the config's own types, or null where a result's config lacked the key."""
    fields: dict[str, Any] = {}
    for dotted in BLOCKING_CONFIG_KEYS:
        section, _, name = dotted.partition(".")
        hints = typing.get_type_hints(type(getattr(Config(), section)))
        fields[dotted.replace(".", "__")] = (hints[name] | None, Field(None, alias=dotted))
    return fields


class _MachineBlocking(Fingerprint):
    device: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    gpu_name: str | None = None
    driver_major: str | None = None
    cpu_model: str | None = None
    subset_sha256: str | None = None


# and the blocking config keys, by their dotted names (aliases: a dot is no attribute name)
Blocking = create_model("Blocking", __base__=_MachineBlocking, **_blocking_fields())


class Gpu(Strict):
    index: int
    name: str
    uuid: str
    memory_total: int


class TorchFacts(Strict):
    """`envinfo.torch_info()`'s facts (besides the torch version, which is a blocking key of
    the fingerprint): the informational fingerprint and env-check's software payload hold the
    same facts. Every key is optional: an older torch may give fewer, and a missing fact is
    shown as unknown, never guessed."""

    torchvision: str | None = None
    cuda_build: str | None = None
    cuda_available: bool | None = None
    cudnn: str | None = None
    cudnn_deterministic: bool | None = None
    cudnn_benchmark: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    torch_threads: int | None = None
    torch_interop_threads: int | None = None
    deterministic_algorithms: bool | None = None


# TorchFacts first: of two bases' configs the later one wins, and the fingerprint keeps the
# keys a later writer adds (Open), where env-check's payload refuses them (Strict)
class Informational(TorchFacts, Fingerprint):
    python: str | None = None
    python_implementation: str | None = None
    os: str | None = None
    hostname: str | None = None
    cpu_model: str | None = None
    cpu_logical: int | None = None
    cpu_affinity: int | None = None
    cgroup_cpu_quota: FiniteFloat | None = None
    usable_cpus: int | None = None
    ram_total_bytes: int | None = None
    cgroup_memory_limit_bytes: int | None = None
    driver: str | None = None
    gpus: list[Gpu] | None = None
    env: dict[str, str] | None = None  # the allow-listed environment variables
    determinism: dict[str, int | bool | str | None] | None = None
    malloc_tuning: bool | None = None


class Environment(Strict):
    blocking: Blocking = Field(default_factory=lambda: Blocking())
    informational: Informational = Field(default_factory=lambda: Informational())


class ArmsConfig(Strict):
    """An `ab` result's config: one resolved config per arm."""

    a: Config
    b: Config


class Envelope(Strict):
    """What every result document has. `data` and, for `ab`, `config` are typed per kind
    (`documents.model_for`)."""

    schema_version: str
    kind: Literal[KINDS]  # type: ignore[valid-type]
    tool: Tool | None = None  # always written; a hand-made document may leave it out
    created_at: str = ""
    status: Literal[STATUSES] = "complete"  # type: ignore[valid-type]
    # the resolved config (config.Config, a tree of frozen dataclasses: pydantic validates
    # them with this model's strict rules, unknown keys refused like in a YAML file)
    config: Config = Field(default_factory=Config)
    environment: Environment = Field(default_factory=lambda: Environment())
    measurements: dict[str, Metric] = {}
    summary: Summary = Field(default_factory=lambda: Summary())
    warnings: list[ResultWarning] = []
    verdict: Verdict = Field(default_factory=lambda: Verdict())
    artifacts: dict[str, str] = {}  # name -> path relative to the JSON file
    notes: list[str] = []


# ---------------------------------------------------------------- the one-line error

# pydantic error type -> what was expected, where its own message says it less plainly
_EXPECTED = {
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dataclass_type": "an object",
    "dataclass_exact_type": "an object",
    "list_type": "a list",
    "tuple_type": "a list",
    "none_required": "null",
    "missing": "a value",
    "missing_argument": "a value",
    "extra_forbidden": "no such key",
    "unexpected_keyword_argument": "no such key",
    "too_short": "at least one value",
}
_REPR_MAX = 40


def _got(error: ErrorDetails) -> str:
    if error["type"] in ("missing", "missing_argument"):
        return "nothing"
    text = repr(error.get("input"))
    return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 1] + "…"


def _expected(error: ErrorDetails) -> str:
    kind = error["type"]
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    ctx = error.get("ctx") or {}
    if kind == "literal_error":
        return f"one of {ctx.get('expected', '?')}"
    if kind in ("less_than_equal", "greater_than_equal") and isinstance(
        ctx.get("le", ctx.get("ge")), float
    ):
        # the sample bound: say it as a number a reader can compare with
        return f"at most {ctx['le']:g}" if "le" in ctx else f"at least {ctx['ge']:g}"
    message = error["msg"]
    for prefix in ("Input should be ", "Value error, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message[:1].lower() + message[1:]


def error_path(loc: tuple[int | str, ...], doc: Any, missing: bool = False) -> str:
    """The dotted path of an error location in the document: pydantic adds the name of a
    union member or a validator to `loc` (`int`, `function-after[…]`); walking the document
    itself keeps only the keys and indices that exist in it, and the last key of a `missing`
    error (which the document cannot have)."""
    parts: list[str] = []
    node = doc
    for i, step in enumerate(loc):
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            parts.append(step)
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            parts.append(f"[{step}]")
            node = node[step]
        elif missing and i == len(loc) - 1 and isinstance(step, str):
            parts.append(step)
    return ".".join(parts).replace(".[", "[") or "(top level)"


def one_line(exc: ValidationError, where: str, doc: Any) -> str:
    """`FILE: path.to.field: expected <what>, got <value>` for the first field in error, with a
    count of the other fields: one line, whatever the document. A union's members each give
    an error at the same path: their expectations are joined (`a number or null`)."""
    located = [
        (error_path(e["loc"], doc, e["type"] in ("missing", "missing_argument")), e)
        for e in exc.errors(include_url=False)
    ]
    path, first = located[0]
    expected = list(dict.fromkeys(_expected(e) for p, e in located if p == path))
    others = len({p for p, _ in located if p != path})
    line = f"{where}: {path}: expected {' or '.join(expected)}, got {_got(first)}"
    if others:
        line += f" (and {others} more)"
    return line.replace("\n", " ")
