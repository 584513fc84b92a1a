"""Reliability and security in one place: every bad input and every fault, one row each.

docs/RELIABILITY.md lists the same rows (input or fault → behaviour → test id); the last test
here checks that the two agree. Bad input: exit 2, exactly one `Error: ` line naming the
problem, no traceback, nothing written. Faults: simulated with fakes and monkeypatches (no
sleeps), each leaving a valid result (`load_result`) marked with what happened.

Tiny settings everywhere (`builtin:tiny_cnn` at 16 px, 2-4 items per batch, a few steps).
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from typer.testing import CliRunner

from mlbaseline import config as cfgmod
from mlbaseline.cli import app
from mlbaseline.errors import ExitCode, MlbError, OutputExistsError
from mlbaseline.measure.gpu import GpuInfo, GpuProbeError, GpuSample, NullProbe
from mlbaseline.measure.telemetry import TelemetrySampler
from mlbaseline.progress import RecordingProgress
from mlbaseline.results import Metric, Result, atomic_write_text, load_result, write_result
from mlbaseline.subset.manifest import MANIFEST_KIND, MANIFEST_NAME, load_manifest
from mlbaseline.workloads.factory import TinyCNN
from mlbaseline.workloads.synthetic import write_image_tree

HERE = __name__  # this module's import path, for the factories below
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "RELIABILITY.md"
runner = CliRunner()

# ---------------------------------------------------------------- tiny settings

TINY: dict[str, Any] = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": 16,
    "workload.dataset_size": 32,
    "workload.device": "cpu",
    "workload.threads": 1,
    "throughput.mode": "train",
    "throughput.batch_sizes": [2, 4],
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 3,
    "throughput.max_steps": 3,
    "throughput.window": 2,
    "throughput.stability_windows": 1,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "throughput.stability_tolerance": 10.0,
    "latency.requests": 30,
    "latency.warmup_requests": 2,
    "latency.concurrency": 2,
    "dataloader.workers": [0],
    "dataloader.batches": 2,
    "dataloader.batch_size": 4,
    "dataloader.persistent_epochs": 0,
    "dataloader.synthetic_images": 16,
    "subset.workers": 1,
    "env_check.cpu_idle_window_s": 0.01,
}
SETS = [a for k, v in TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def tiny(**extra: Any) -> cfgmod.Config:
    return cfgmod.resolve(None, "demo", {**TINY, **extra})


# ---------------------------------------------------------------- factories (by import path)


def raising_model(**kwargs: Any) -> nn.Module:
    raise ValueError("bad factory argument")


def raising_multiline(**kwargs: Any) -> nn.Module:
    raise ValueError("first line of the reason\n  second line\n")


def raising_dataset(**kwargs: Any) -> Any:
    raise ValueError("no such split 'trian'")


class OomAbove(nn.Module):
    """TinyCNN that runs out of (fake CUDA) memory for batches of `limit` and more."""

    def __init__(self, limit: int = 4, num_classes: int = 10) -> None:
        super().__init__()
        self.limit = limit
        self.inner = TinyCNN(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] >= self.limit:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        return self.inner(x)


def oom_above(**kwargs: Any) -> OomAbove:
    return OomAbove(**kwargs)


class KillInWorker(torch.utils.data.Dataset):
    """A DataLoader worker process SIGKILLs itself on the first item it loads (an OOM-killed or
    segfaulting worker); in the main process every item loads. With `marker`, only the first
    worker ever dies (the file marks that it did), so a later setting of the sweep survives."""

    def __init__(self, n: int = 32, marker: str | None = None) -> None:
        self.n, self.marker = n, marker

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        in_worker = torch.utils.data.get_worker_info() is not None
        first = self.marker is None or not os.path.exists(self.marker)
        if in_worker and first:
            if self.marker is not None:
                Path(self.marker).write_text("killed\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((3, 8, 8), float(i) / self.n), i % 10


def kill_in_worker(**kwargs: Any) -> KillInWorker:
    return KillInWorker(**kwargs)


# ---------------------------------------------------------------- helpers


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file and folder under `roots` → content hash ('dir' for folders)."""
    out: dict[str, str] = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            key = str(p)
            out[key] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def leftovers(folder: Path) -> list[str]:
    """Temp or partial files a failed write could leave behind."""
    return [p.name for p in folder.rglob("*") if p.name.endswith(".tmp") or ".partial-" in p.name]


def assert_one_error_line(res: Any, *fragments: str, code: int = 2) -> None:
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr  # exactly one line: no blank line, no table
    assert lines[0].startswith("Error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert res.stdout == ""


def throughput_result(path: Path, values: list[float] | None = None, kind: str = "throughput"):
    r = Result(kind=kind)
    r.add_metric(Metric("train.bs8.step", "s", False, values or [0.10, 0.11, 0.12, 0.10, 0.11]))
    return write_result(r, path)


def edit_json(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def manifest_doc(output: str) -> dict[str, Any]:
    """A manifest as `mlb subset` writes it, with one entry whose output path is `output`."""
    entry = {
        "path": "class_00/img_00000.png",
        "output": output,
        "class": "class_00",
        "label": 0,
        "bytes": 100,
        "sha256": "0" * 64,
    }
    return {
        "kind": MANIFEST_KIND,
        "manifest_version": 1,
        "tool": {"name": "mlb", "version": "0"},
        "strategy": "proportional",
        "seed": 42,
        "n": 1,
        "classes": ["class_00"],
        "counts": {"class_00": {"available": 1, "selected": 1}},
        "entries": [entry],
        "excluded_corrupt": [],
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data") / "images"
    write_image_tree(root, 24, num_classes=2, size=16, seed=1)
    return root


# ================================================================ 1. bad input


def _write(name: str, content: str | bytes) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())

    return setup


def _mkdir(name: str) -> Callable[[Path], None]:
    return lambda tmp: (tmp / name).mkdir(parents=True)


def _results(spoil: Callable[[Path], None] | None = None, kind: str = "throughput"):
    """a.json (good) and b.json (spoiled by `spoil`, or of another `kind`)."""

    def setup(tmp: Path) -> None:
        throughput_result(tmp / "a.json")
        if kind == "throughput":
            throughput_result(tmp / "b.json")
        else:  # a real result of that kind (its payload is typed): mlb wrote it at schema 1.0
            (tmp / "b.json").write_bytes(
                (ROOT / "tests/data/schema_1_0" / f"{kind}.json").read_bytes()
            )
        if spoil is not None:
            spoil(tmp / "b.json")

    return setup


def _truncate(p: Path) -> None:
    text = p.read_text()
    p.write_text(text[: len(text) // 2])


def _future(p: Path) -> None:
    edit_json(p, lambda d: d.update(schema_version="2.0"))


def _nan(p: Path) -> None:
    # json.dumps writes float('nan') as the non-standard literal NaN, which json.loads accepts
    edit_json(p, lambda d: d["measurements"]["train.bs8.step"]["values"].__setitem__(1, math.nan))


def _no_samples(p: Path) -> None:
    edit_json(p, lambda d: d["measurements"]["train.bs8.step"].update(values=[]))


def _manifest(output: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / "sub").mkdir()
        (tmp / "sub" / MANIFEST_NAME).write_text(json.dumps(manifest_doc(output)))

    return setup


SPOILERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty": (lambda p: p.write_text(""), "empty file"),
    "truncated": (_truncate, "not valid JSON"),
    "not-json": (lambda p: p.write_text("<html>not json</html>\n"), "not valid JSON"),
    "future-schema": (_future, "schema version 2.0 is not supported"),
    "nan-samples": (_nan, "measurements.train.bs8.step.values[1]: expected a finite number"),
    "empty-samples": (
        _no_samples,
        "measurements.train.bs8.step.values: expected at least one value",
    ),
}


@dataclass(frozen=True)
class Bad:
    """One bad-input row: CLI args ({tmp}, {data} are filled in), the fragment the error line
    must contain, and what to create first."""

    args: tuple[str, ...]
    fragment: str
    setup: Callable[[Path], None] | None = None


def bad(case_id: str, args: str, fragment: str, setup=None, marks=()) -> Any:
    return pytest.param(Bad(tuple(args.split()), fragment, setup), id=case_id, marks=marks)


TP = "throughput --quiet --repeats 1 -o {tmp}/out.json"  # factories live in this module
LAT = "latency --quiet -o {tmp}/out.json --requests 5"
BAD_INPUT = [
    # config files
    bad("missing-config", f"{TP} -c {{tmp}}/nope.yaml", "nope.yaml: config file not found"),
    bad(
        "config-is-a-directory",
        f"{TP} -c {{tmp}}/conf",
        "cannot read config file (IsADirectoryError)",
        _mkdir("conf"),
    ),
    bad(
        "config-not-utf8",
        f"{TP} -c {{tmp}}/c.yaml",
        "cannot read config file (UnicodeDecodeError)",
        _write("c.yaml", b"golden:\n  seed: \xff\xfe\n"),
    ),
    bad(
        "invalid-yaml",
        f"{TP} -c {{tmp}}/c.yaml",
        "c.yaml: invalid YAML at line 2, column 1",
        _write("c.yaml", "golden: [1, 2\n"),
    ),
    bad(
        "config-not-a-mapping",
        f"{TP} -c {{tmp}}/c.yaml",
        "top level must be a mapping, got list",
        _write("c.yaml", "- golden\n- seed\n"),
    ),
    bad(
        "unknown-key",
        f"{TP} -c {{tmp}}/c.yaml",
        "throughput.batch_size: unknown key (did you mean 'batch_sizes'?)",
        _write("c.yaml", "throughput:\n  batch_size: [8]\n"),
    ),
    bad(
        "wrong-type",
        f"{TP} -c {{tmp}}/c.yaml",
        "throughput.min_steps: expected an integer, got 'many'",
        _write("c.yaml", "throughput:\n  min_steps: many\n"),
    ),
    bad("unknown-profile", f"{TP} --profile visoin", "unknown profile 'visoin' (did you mean"),
    # values out of range
    bad("negative-batch-size", f"{TP} --batch-sizes=-4", "throughput.batch_sizes: must be ≥ 1"),
    bad(
        "negative-golden-batch-size",
        f"{LAT} --set golden.batch_size=-1",
        "golden.batch_size: must be ≥ 1, got -1",
    ),
    bad(
        "empty-batch-sizes",
        f"{TP} --set throughput.batch_sizes=[]",
        "throughput.batch_sizes: needs at least one value",
    ),
    bad(
        "telemetry-interval-zero",
        f"{TP} --set golden.telemetry_interval_s=0",
        "golden.telemetry_interval_s: must be > 0",
    ),
    bad(
        "subset-n-zero",
        "subset {data} -o {tmp}/sub --set subset.n=0",
        "subset.n: must be ≥ 1, got 0",
    ),
    bad(
        "negative-workers",
        "dataloader -q -o {tmp}/out.json --workers=-1",
        "dataloader.workers: must be ≥ 0, got -1",
    ),
    bad(
        "empty-workers",
        "dataloader -q -o {tmp}/out.json --set dataloader.workers=[]",
        "dataloader.workers: needs at least one value",
    ),
    # import-path factories
    bad(
        "factory-missing-module",
        f"{LAT} --set workload.model=nosuch.module:f",
        "workload.model: cannot import module 'nosuch.module'",
    ),
    bad(
        "factory-missing-attribute",
        f"{LAT} --set workload.model=mlbaseline.config:nope",
        "workload.model: 'mlbaseline.config' has no attribute 'nope'",
    ),
    bad(
        "factory-not-an-import-path",
        f"{LAT} --set workload.model=resnet18",
        "is not an import path of the form package.module:callable",
    ),
    bad(
        "factory-raises",
        f"{LAT} --set workload.model={HERE}:raising_model",
        f"workload.model: '{HERE}:raising_model' raised ValueError: bad factory argument",
    ),
    bad(
        "factory-raises-multiline",
        f"{LAT} --set workload.model={HERE}:raising_multiline",
        "raised ValueError: first line of the reason second line",
    ),
    bad(
        "dataset-factory-raises",
        f"{TP} --set workload.dataset={HERE}:raising_dataset",
        "raised ValueError: no such split 'trian'",
    ),
    bad(
        "factory-raises-throughput",
        f"{TP} --set workload.model={HERE}:raising_model --set throughput.batch_sizes=[2]",
        "raised ValueError: bad factory argument",
    ),
    # datasets
    bad(
        "dataset-missing-subset",
        "subset {tmp}/missing -o {tmp}/sub",
        "missing: no such dataset folder",
    ),
    bad(
        "dataset-missing-dataloader",
        "dataloader -q -o {tmp}/out.json --data-dir {tmp}/missing",
        "missing: no such directory",
    ),
    bad(
        "dataset-no-classes-subset",
        "subset {tmp}/empty -o {tmp}/sub",
        "empty: no images found",
        _mkdir("empty/class_a"),
    ),
    bad(
        "dataset-no-classes-dataloader",
        "dataloader -q -o {tmp}/out.json --data-dir {tmp}/empty",
        "empty: no class sub-folders",
        _mkdir("empty"),
    ),
    bad(
        "dataset-is-a-file",
        "subset {tmp}/f.txt -o {tmp}/sub",
        "f.txt: not a folder",
        _write("f.txt", "x"),
    ),
    # result files
    *[
        bad(
            f"result-{name}-compare",
            "compare {tmp}/a.json {tmp}/b.json -o {tmp}/out.json",
            f"b.json: {fragment}",
            _results(spoil),
        )
        for name, (spoil, fragment) in SPOILERS.items()
    ],
    *[
        bad(
            f"result-{name}-report",
            "report {tmp}/b.json -o {tmp}/rep",
            f"b.json: {fragment}",
            _results(spoil),
        )
        for name, (spoil, fragment) in SPOILERS.items()
    ],
    bad(
        "result-wrong-kind-compare",
        "compare {tmp}/a.json {tmp}/b.json -o {tmp}/out.json",
        "compare needs two results of the same kind",
        _results(kind="latency"),
    ),
    bad(
        "result-wrong-kind-dataloader",
        "dataloader -q -o {tmp}/out.json --throughput-result {tmp}/b.json",
        "b.json: is a 'latency' result; expected throughput",
        _results(kind="latency"),
    ),
    bad(
        "result-missing-compare",
        "compare {tmp}/a.json {tmp}/nope.json",
        "nope.json: no such file",
        _results(),
    ),
    # where output goes
    bad(
        "output-inside-dataset",
        "subset {data} -o {data}/class_00/sub",
        "the output is inside the source tree",
    ),
    bad(
        "output-contains-dataset",
        "subset {data} -o {data}/..",
        "the output folder contains the source tree",
    ),
    bad(
        "force-onto-unrelated-folder",
        "subset {data} -o {tmp}/mine --force",
        "not empty and not an mlb subset",
        _write("mine/notes.txt", "mine"),
    ),
    *[
        bad(f"output-exists-{name}", args, "--force", _write(target, "keep"))
        for name, args, target in [
            ("throughput", TP, "out.json"),
            ("latency", LAT, "out.json"),
            ("dataloader", "dataloader -q -o {tmp}/out.json", "out.json"),
            ("env-check", "env-check -q -o {tmp}/out.json", "out.json"),
            ("compare", "compare {tmp}/x.json {tmp}/x.json -o {tmp}/out.json", "out.json"),
            ("subset", "subset {data} -o {tmp}/sub", "sub/notes.txt"),
            ("report", "report {tmp}/x.json -o {tmp}/rep", "rep/notes.txt"),
            ("run", "run -q -o {tmp}/runs", "runs/notes.txt"),
        ]
    ],
    bad(
        "telemetry-csv-exists",
        f"{TP}",
        "out.telemetry.csv: already exists (use --force",
        _write("out.telemetry.csv", "keep"),
    ),
    # manifests read back
    bad(
        "manifest-dotdot-report",
        "report {tmp}/sub/subset_manifest.json -o {tmp}/rep",
        "'..' is not allowed",
        _manifest("../../../etc/hostname"),
    ),
    bad(
        "manifest-absolute-report",
        "report {tmp}/sub/subset_manifest.json -o {tmp}/rep",
        "absolute paths are not allowed",
        _manifest("/etc/hostname"),
    ),
]


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input(case: Bad, tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # anything written relative to the cwd shows in the snapshot
    if "x.json" in " ".join(case.args):
        throughput_result(tmp_path / "x.json")
    if case.setup is not None:
        case.setup(tmp_path)
    before = snapshot(tmp_path, data)
    args = [a.format(tmp=tmp_path, data=data) for a in case.args]
    res = runner.invoke(app, args)
    assert_one_error_line(res, case.fragment.format(tmp=tmp_path, data=data))
    assert snapshot(tmp_path, data) == before  # nothing written, nothing changed


# the manifest loader itself (what every reader of a manifest must use)
MANIFEST_READ_BACK = [
    pytest.param("../../../etc/passwd", "'..' is not allowed", id="manifest-dotdot"),
    pytest.param("class_00/../../x.png", "'..' is not allowed", id="manifest-inner-dotdot"),
    pytest.param("/etc/passwd", "absolute paths are not allowed", id="manifest-absolute"),
    pytest.param("C:/x.png", "absolute paths are not allowed", id="manifest-drive-letter"),
    pytest.param("a\\..\\x.png", "backslashes", id="manifest-backslash"),
]


@pytest.mark.parametrize(("output", "fragment"), MANIFEST_READ_BACK)
def test_manifest_read_back_is_refused(tmp_path: Path, output: str, fragment: str):
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest_doc(output)))
    with pytest.raises(MlbError) as info:
        load_manifest(tmp_path)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert fragment in str(info.value) and "\n" not in str(info.value)
    doc = manifest_doc(output)
    doc["entries"][0]["path"], doc["entries"][0]["output"] = output, "class_00/s.png"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(MlbError, match=re.escape(fragment)):
        load_manifest(tmp_path)  # the source side is checked the same way


USAGE_ERRORS = [
    pytest.param(
        ["env-check", "--no-such-option"], "No such option: --no-such-option", id="unknown-option"
    ),
    pytest.param(["subset", "--n", "0"], "'--n'", id="option-below-its-minimum"),
    pytest.param(["compare", "only-one.json"], "Missing argument", id="missing-argument"),
    pytest.param(["nosuchcommand"], "No such command", id="unknown-command"),
]


@pytest.mark.parametrize(("args", "fragment"), USAGE_ERRORS)
def test_usage_error_from_the_parser(args, fragment, tmp_path, monkeypatch):
    """Errors the argument parser (Typer/Click) finds before any mlb code runs are bad input
    like any other: exit 2 and one line on stderr, `Error: …` and where help is (DESIGN.md's
    exit codes), not Click's usage block; no traceback, no output, nothing written."""
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and res.stdout == ""
    assert "Traceback" not in res.stderr and fragment in res.stderr
    assert res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.rstrip().endswith("-h for help)") and list(tmp_path.iterdir()) == []


def test_parser_errors_through_the_installed_entry_point(tmp_path: Path) -> None:
    """The same through `python -m mlbaseline` (the entry point, not the test runner), and a
    bare `mlb` still prints its help."""
    cmd = [sys.executable, "-m", "mlbaseline"]
    bad = subprocess.run([*cmd, "throughput", "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("Error: No such option: --bogus (") and bad.stderr.endswith(
        " throughput -h for help)\n"
    ), bad.stderr
    assert bad.stderr.count("\n") == 1
    bare = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert "Usage: " in bare.stdout + bare.stderr and "Error" not in bare.stderr


def test_compare_with_itself_is_allowed_but_says_so(tmp_path: Path):
    a = throughput_result(tmp_path / "a.json")
    res = runner.invoke(app, ["compare", str(a), str(a), "-o", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.stderr
    assert "comparing a result with itself" in res.stderr and "Traceback" not in res.stderr
    saved = load_result(tmp_path / "c.json", kinds=["compare"])
    assert any("itself" in w["message"] for w in saved.warnings)
    # byte-identical content under another name is the same mistake
    b = tmp_path / "b.json"
    b.write_bytes(a.read_bytes())
    again = runner.invoke(app, ["compare", str(a), str(b), "--json", "-q"])
    assert again.exit_code == 0 and "itself" in json.dumps(json.loads(again.stdout)["warnings"])


# ================================================================ 2. faults


class FlakyProbe:
    """One fake GPU whose NVML `sample()` fails from call `fail_after + 1` on."""

    def __init__(self, fail_after: int) -> None:
        self.fail_after, self.calls = fail_after, 0

    def available(self) -> tuple[bool, str]:
        return True, ""

    def driver_version(self) -> str | None:
        return "550.54.15"

    def devices(self) -> list[GpuInfo]:
        return [GpuInfo(0, "Fake GPU", "GPU-fake-0", 16 << 30, 1 << 30, 40.0)]

    def sample(self, index: int) -> GpuSample:
        self.calls += 1
        if self.calls > self.fail_after:
            raise GpuProbeError("nvmlDeviceGetUtilizationRates: Unknown Error (GPU is lost)")
        return GpuSample(index, 50.0, 2 << 30, 45.0, 120.0, 1400.0, [])

    def close(self) -> None:
        pass


class SteppedSampler(TelemetrySampler):
    """The real sampler without its thread: `SamplingProgress` takes a sample at every step
    the runner reports, so the timeline is deterministic."""

    made: ClassVar[list[SteppedSampler]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        SteppedSampler.made.append(self)

    def start(self) -> SteppedSampler:
        self._open_csv()
        return self


class _Tick:
    def advance(self, n: int = 1) -> None:
        for sampler in SteppedSampler.made:
            sampler.sample_once()

    def update(self, description: str | None = None, total: int | None = None) -> None:
        pass


class SamplingProgress(RecordingProgress):
    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[_Tick]:
        self.tasks.append(description)
        yield _Tick()


def calls_then(fn: Callable[..., Any], k: int, exc: BaseException) -> Callable[..., Any]:
    """`fn`, except that call number k (1-based) and later raise `exc`; thread-safe."""
    counter = itertools.count(1)
    lock = threading.Lock()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock:
            n = next(counter)
        if n >= k:
            raise exc
        return fn(*args, **kwargs)

    return wrapper


def roundtrip(result: Result, path: Path, kind: str) -> Result:
    """Write and read back: the result must be a valid file of its kind."""
    write_result(result, path)
    back = load_result(path, kinds=[kind])
    assert back.status == result.status and back.notes == result.notes
    return back


@dataclass
class Ctx:
    tmp: Path
    monkeypatch: pytest.MonkeyPatch
    data: Path


def fault_nvml_missing_env_check(c: Ctx) -> None:
    from mlbaseline.runners.envcheck import run_env_check

    result = run_env_check(tiny(), NullProbe("NVMLError_LibraryNotFound: libnvidia-ml.so.1"))
    gpu = [ch for ch in result.verdict.checks if ch.name.startswith("gpu")]
    assert gpu and {ch.status for ch in gpu} == {"skip"}
    assert any("libnvidia-ml" in ch.message for ch in gpu)
    back = roundtrip(result, c.tmp / "env.json", "env-check")
    assert back.status == "complete"


def fault_nvml_missing_throughput(c: Ctx) -> None:
    from mlbaseline.runners.throughput import run_throughput

    result = run_throughput(tiny(), probe=NullProbe("no NVIDIA driver"), output_dir=c.tmp)
    assert result.status == "complete"
    tele = result.data["telemetry"]
    assert tele["columns"] and not any(col.startswith("gpu") for col in tele["columns"])
    header = (c.tmp / "telemetry.csv").read_text().splitlines()[0]
    assert "cpu_pct" in header and "gpu" not in header
    back = roundtrip(result, c.tmp / "tp.json", "throughput")
    assert "train.bs4.step" in back.measurements and back.artifacts["telemetry"] == "telemetry.csv"


def fault_nvml_fails_mid_run(c: Ctx) -> None:
    import mlbaseline.runners.throughput as tp

    SteppedSampler.made = []
    c.monkeypatch.setattr(tp, "TelemetrySampler", SteppedSampler)
    probe = FlakyProbe(fail_after=3)
    result = tp.run_throughput(
        tiny(), SamplingProgress(), probe, c.tmp, telemetry_name="tp.telemetry.csv"
    )
    assert result.status == "complete" and "train.bs4.step" in result.measurements
    (sampler,) = SteppedSampler.made
    rows = sampler.rows
    assert len(rows) > 3
    assert all(r["error"] == "" and r["gpu0_kernel_active_pct"] == 50.0 for r in rows[:3])
    for row in rows[3:]:  # a gap per failed read: recorded, the CPU side still filled
        assert "gpu0: nvmlDeviceGetUtilizationRates" in row["error"]
        assert row["gpu0_kernel_active_pct"] == "" and row["cpu_pct"] != ""
    gaps = [w for w in result.warnings if w["code"] == "telemetry_gaps"]
    assert gaps and gaps[0]["gaps"] == len(rows) - 3
    csv_rows = (c.tmp / "tp.telemetry.csv").read_text().splitlines()
    assert len(csv_rows) == len(rows) + 1 and "GPU is lost" in csv_rows[-1]
    roundtrip(result, c.tmp / "tp.json", "throughput")


def fault_worker_killed_dataloader(c: Ctx) -> None:
    from mlbaseline.runners.dataloader import run_dataloader

    cfg = tiny(
        **{
            "workload.dataset": f"{HERE}:kill_in_worker",
            "workload.dataset_kwargs": {"n": 32},
            "dataloader.workers": [0, 1],
            "dataloader.cold_cache": False,
        }
    )
    result = run_dataloader(cfg)
    rows = {r["workers"]: r for r in result.data["settings"]}
    assert rows[0]["status"] == "ok" and rows[1]["status"] == "failed"
    assert "killed by signal" in rows[1]["error"] or "exited unexpectedly" in rows[1]["error"]
    assert any(w["code"] == "setting_failed" for w in result.warnings)
    assert result.status == "complete"  # the sweep went on
    roundtrip(result, c.tmp / "dl.json", "dataloader")


def fault_worker_killed_throughput(c: Ctx) -> None:
    from mlbaseline.runners.throughput import run_throughput

    marker = c.tmp / "killed-once"
    cfg = tiny(
        **{
            "workload.dataset": f"{HERE}:kill_in_worker",
            "workload.dataset_kwargs": {"n": 32, "marker": str(marker)},
            "throughput.num_workers": 1,
            "throughput.telemetry": False,
        }
    )
    result = run_throughput(cfg, probe=NullProbe())
    sizes = result.data["batch_sizes"]
    assert marker.exists()  # the worker was really killed
    assert sizes["2"]["status"] == "error" and sizes["2"]["train"]["status"] == "error"
    assert "worker" in sizes["2"]["train"]["error"].lower()
    assert sizes["4"]["status"] == "ok" and "train.bs4.step" in result.measurements
    assert any(w["code"] == "batch_size_failed" and w["batch_size"] == 2 for w in result.warnings)
    assert result.status == "complete"
    roundtrip(result, c.tmp / "tp.json", "throughput")


def fault_oom_one_batch_size(c: Ctx) -> None:
    from mlbaseline.runners.throughput import run_throughput

    cfg = tiny(
        **{
            "workload.model": f"{HERE}:oom_above",
            "workload.model_kwargs": {"limit": 4},
            "throughput.batch_sizes": [4, 2],  # the first size fails, the sweep goes on
            "throughput.telemetry": False,
        }
    )
    result = run_throughput(cfg, probe=NullProbe())
    sizes = result.data["batch_sizes"]
    assert sizes["4"]["status"] == "oom" and "out of memory" in sizes["4"]["train"]["error"]
    assert sizes["2"]["status"] == "ok" and "train.bs2.step" in result.measurements
    assert "train.bs4.step" not in result.measurements
    assert any(w["code"] == "oom" and w["batch_size"] == 4 for w in result.warnings)
    checks = {ch.name: ch.status for ch in result.verdict.checks}
    assert checks["train.bs4.run"] == "warn" and result.status == "complete"
    back = roundtrip(result, c.tmp / "tp.json", "throughput")
    assert back.data["batch_sizes"]["4"]["status"] == "oom"


def _write_fails(c: Ctx, patch: Callable[[], None], fragment: str) -> None:
    a, b = throughput_result(c.tmp / "a.json"), throughput_result(c.tmp / "b.json")
    before = snapshot(c.tmp)
    patch()
    res = runner.invoke(app, ["compare", str(a), str(b), "-q", "-o", str(c.tmp / "c.json")])
    c.monkeypatch.undo()
    assert_one_error_line(res, "c.json: cannot write", fragment)
    assert snapshot(c.tmp) == before and not leftovers(c.tmp)


def _raiser(code: int) -> Callable[..., Any]:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code))

    return boom


def fault_disk_full(c: Ctx) -> None:
    _write_fails(
        c,
        lambda: c.monkeypatch.setattr(os, "fsync", _raiser(errno.ENOSPC)),
        "No space left on device",
    )


def fault_permission_denied_rename(c: Ctx) -> None:
    def patch() -> None:
        c.monkeypatch.setattr(os, "replace", _raiser(errno.EACCES))
        c.monkeypatch.setattr(os, "link", _raiser(errno.EACCES))

    _write_fails(c, patch, "Permission denied")


def fault_permission_denied_folder(c: Ctx) -> None:
    _write_fails(
        c,
        lambda: c.monkeypatch.setattr(tempfile, "mkstemp", _raiser(errno.EACCES)),
        "Permission denied",
    )


def fault_ctrl_c_throughput(c: Ctx) -> None:
    from mlbaseline.measure.step import TrainStep

    c.monkeypatch.setattr(
        TrainStep, "__call__", calls_then(TrainStep.__call__, 4, KeyboardInterrupt())
    )
    out = c.tmp / "tp.json"
    res = runner.invoke(app, ["throughput", *SETS, "-q", "-o", str(out)])
    assert res.exit_code == ExitCode.INTERRUPTED, res.stderr
    back = load_result(out, kinds=["throughput"])
    assert back.status == "interrupted" and "Ctrl-C" in back.notes[0]
    entry = back.data["batch_sizes"]["2"]
    assert entry["stop_reason"] == "interrupted" and "4" not in back.data["batch_sizes"]
    step = back.measurements["train.bs2.step"]
    assert len(step.values) + len(step.warmup) == 3  # the steps before the Ctrl-C are kept
    assert (c.tmp / back.artifacts["telemetry"]).exists()


def fault_ctrl_c_latency(c: Ctx) -> None:
    from mlbaseline.measure.latency_services import ModelClient

    c.monkeypatch.setattr(
        ModelClient, "compute", calls_then(ModelClient.compute, 20, KeyboardInterrupt())
    )
    out = c.tmp / "lat.json"
    res = runner.invoke(app, ["latency", *SETS, "-q", "-o", str(out)])
    assert res.exit_code == ExitCode.INTERRUPTED, res.stderr
    back = load_result(out, kinds=["latency"])
    assert back.status == "interrupted"
    level = back.data["levels"]["c2"]
    assert level["interrupted"] and 10 <= level["completed"] < 30
    assert back.measurements["latency.c2.request"].values  # what was measured is kept


def fault_ctrl_c_dataloader(c: Ctx) -> None:
    from mlbaseline.workloads.timed_folder import TimedImageFolder

    # 24 images, batch 4, 2 batches per pass: the cold pass finishes, the warm one is cut
    c.monkeypatch.setattr(
        TimedImageFolder,
        "__getitem__",
        calls_then(TimedImageFolder.__getitem__, 14, KeyboardInterrupt()),
    )
    out = c.tmp / "dl.json"
    args = ["dataloader", *SETS, "--data-dir", str(c.data), "-q", "-o", str(out)]
    res = runner.invoke(app, [*args, "--set", "dataloader.cold_cache=true"])
    assert res.exit_code == ExitCode.INTERRUPTED, res.stderr
    back = load_result(out, kinds=["dataloader"])
    assert back.status == "interrupted" and "interrupted" in back.notes[0]
    assert [r["cache"] for r in back.data["settings"]] == ["cold"]  # the pass done is kept
    assert back.measurements


def _ctrl_c_subset(c: Ctx) -> None:
    out, extra = c.tmp / "sub", c.tmp / "subset.json"
    res = runner.invoke(
        app,
        ["subset", str(c.data), "-o", str(out), "--n", "12", *SETS, "-q", "--result", str(extra)],
    )
    assert res.exit_code == ExitCode.INTERRUPTED, res.stderr
    back = load_result(extra, kinds=["subset"])
    assert back.status == "interrupted" and "no subset was written" in back.notes[0]
    assert back.data["output"] is None and not back.artifacts
    # complete or absent, never half-made: no output folder, no partial folder left
    assert not out.exists() and not leftovers(c.tmp)


def fault_ctrl_c_subset_copying(c: Ctx) -> None:
    import shutil

    c.monkeypatch.setattr(shutil, "copyfile", calls_then(shutil.copyfile, 4, KeyboardInterrupt()))
    _ctrl_c_subset(c)


def fault_ctrl_c_subset_features(c: Ctx) -> None:
    from mlbaseline.subset.features import StatsExtractor

    c.monkeypatch.setattr(
        StatsExtractor, "finish", calls_then(StatsExtractor.finish, 1, KeyboardInterrupt())
    )
    _ctrl_c_subset(c)


FAULTS: dict[str, Callable[[Ctx], None]] = {
    "nvml-missing-env-check": fault_nvml_missing_env_check,
    "nvml-missing-throughput": fault_nvml_missing_throughput,
    "nvml-fails-mid-run": fault_nvml_fails_mid_run,
    "worker-killed-dataloader": fault_worker_killed_dataloader,
    "worker-killed-throughput": fault_worker_killed_throughput,
    "oom-one-batch-size": fault_oom_one_batch_size,
    "disk-full-on-write": fault_disk_full,
    "permission-denied-on-rename": fault_permission_denied_rename,
    "permission-denied-in-folder": fault_permission_denied_folder,
    "ctrl-c-throughput": fault_ctrl_c_throughput,
    "ctrl-c-latency": fault_ctrl_c_latency,
    "ctrl-c-dataloader": fault_ctrl_c_dataloader,
    "ctrl-c-subset-copying": fault_ctrl_c_subset_copying,
    "ctrl-c-subset-features": fault_ctrl_c_subset_features,
}


@pytest.mark.parametrize("fault", [pytest.param(f, id=k) for k, f in FAULTS.items()])
def test_fault(fault: Callable[[Ctx], None], tmp_path: Path, monkeypatch, data: Path):
    fault(Ctx(tmp_path, monkeypatch, data))


# ---------------------------------------------------------------- concurrent writers


def _doc(writer: int, size: int = 2000) -> str:
    """A result-like JSON document that names its writer (big enough to need several writes)."""
    return json.dumps({"writer": writer, "payload": [writer] * size}) + "\n"


def _threads(n: int, fn: Callable[[int], None]) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        try:
            fn(i)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def concurrent_same_path_threads(tmp: Path) -> None:
    path = tmp / "same.json"
    _threads(8, lambda i: [atomic_write_text(path, _doc(i), force=True) for _ in range(25)])
    assert json.loads(path.read_text()) == json.loads(_doc(json.loads(path.read_text())["writer"]))
    assert sorted(p.name for p in tmp.iterdir()) == ["same.json"]


def concurrent_different_paths_threads(tmp: Path) -> None:
    def write(i: int) -> None:
        # a payload-free kind: the typed latency payload has required fields; notes say who
        r = Result(kind="throughput", notes=[f"writer {i}"])
        r.add_metric(Metric("latency.c1.request", "s", False, [0.001 * (i + 1)] * 50))
        for _ in range(20):
            write_result(r, tmp / f"w{i}.json", force=True)

    _threads(8, write)
    assert sorted(p.name for p in tmp.iterdir()) == [f"w{i}.json" for i in range(8)]
    for i in range(8):
        back = load_result(tmp / f"w{i}.json", kinds=["throughput"])
        assert back.notes == [f"writer {i}"]


WRITER = """
import json, sys
from pathlib import Path
from mlbaseline.results import atomic_write_text
folder, me = Path(sys.argv[1]), int(sys.argv[2])
doc = json.dumps({"writer": me, "payload": [me] * 5000}) + "\\n"
for _ in range(30):
    atomic_write_text(folder / "same.json", doc, force=True)
    atomic_write_text(folder / f"own{me}.json", doc, force=True)
"""


def concurrent_processes(tmp: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp), str(i)], cwd=ROOT)
        for i in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0] * 4
    names = sorted(p.name for p in tmp.iterdir())
    assert names == ["own0.json", "own1.json", "own2.json", "own3.json", "same.json"]
    for name in names:
        doc = json.loads((tmp / name).read_text())  # whole, valid JSON of exactly one writer
        assert doc["payload"] == [doc["writer"]] * 5000
        if name.startswith("own"):
            assert doc["writer"] == int(name[3])


def concurrent_new_file_one_winner(tmp: Path) -> None:
    for trial in range(30):
        path, wins = tmp / f"new{trial}.json", []

        def write(i: int, path: Path = path, wins: list[int] = wins) -> None:
            try:
                atomic_write_text(path, _doc(i, 10))
                wins.append(i)
            except OutputExistsError:
                pass

        _threads(6, write)
        assert len(wins) == 1, wins  # never two "successful" writes of a new file
        assert json.loads(path.read_text())["writer"] == wins[0]
    assert not leftovers(tmp)


def concurrent_readers_see_whole_files(tmp: Path) -> None:
    path = tmp / "live.json"
    atomic_write_text(path, _doc(0, 20000))
    stop, seen = threading.Event(), []

    def read() -> None:
        while not stop.is_set():
            doc = json.loads(path.read_text())  # never half a file
            seen.append(doc["writer"])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 40):
            atomic_write_text(path, _doc(i, 20000), force=True)
    finally:
        stop.set()
        reader.join()
    assert seen and json.loads(path.read_text())["writer"] == 39


def concurrent_run_refuses_non_empty_folder(tmp: Path) -> None:
    out = tmp / "runs"
    out.mkdir()
    (out / "throughput.json").write_text("other run's file\n")
    res = runner.invoke(app, ["run", "-q", "-o", str(out), *SETS])
    assert_one_error_line(res, "not empty", "--force")
    assert [p.name for p in out.iterdir()] == ["throughput.json"]
    assert (out / "throughput.json").read_text() == "other run's file\n"


CONCURRENCY: dict[str, Callable[[Path], None]] = {
    "same-path-threads": concurrent_same_path_threads,
    "different-paths-threads": concurrent_different_paths_threads,
    "same-and-own-paths-processes": concurrent_processes,
    "new-file-race-one-winner": concurrent_new_file_one_winner,
    "readers-see-whole-files": concurrent_readers_see_whole_files,
    "run-refuses-non-empty-folder": concurrent_run_refuses_non_empty_folder,
}


@pytest.mark.parametrize("case", [pytest.param(f, id=k) for k, f in CONCURRENCY.items()])
def test_concurrent_writers(case: Callable[[Path], None], tmp_path: Path):
    case(tmp_path)


# ================================================================ 3. security


# modules named like the import paths in the result files, and like the built-in names
TRAP_NAMES = ("trap_model", "trap_dataset", "trap_transform", "builtin", "synthetic", "demo")
TRAP = "import pathlib; pathlib.Path({marker!r}).write_text('imported')\ndef build(**kw): pass\n"

IMPORT_PROBE = """
import json, os, sys, sysconfig
from pathlib import Path
here = Path.cwd()
from mlbaseline.config import resolve
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.progress import NullProgress
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.runners.compare_files import run_compare
from mlbaseline.runners.latency import run_latency
from mlbaseline.runners.throughput import run_throughput
overrides = json.loads(sys.argv[1])
cfg = resolve(None, "demo", overrides)
run_throughput(cfg, probe=NullProbe())
run_latency(cfg, NullProgress())
# results that *name* import paths (as a result's resolved config does) are only data
for name in ("a", "b"):
    r = Result(kind="throughput", config={"workload": {"model": "trap_model:build",
               "dataset": "trap_dataset:build", "transform": "trap_transform:build"}})
    r.add_metric(Metric("train.bs8.step", "s", False, [0.1, 0.11, 0.12, 0.1, 0.11]))
    write_result(r, here / f"{name}.json", force=True)
run_compare(here / "a.json", here / "b.json", cfg)
from mlbaseline.report.inputs import collect
collect([here])
allowed = [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib",
           "purelib", "platlib")] + [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
outside = sorted(
    name for name, mod in list(sys.modules.items())
    if os.path.isfile(getattr(mod, "__file__", None) or "")  # not torch.ops-like placeholders
    and not any(Path(mod.__file__).resolve().is_relative_to(a) for a in allowed)
    and not name.startswith("mlbaseline")
)
traps = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[2].split(","))
print(json.dumps({"outside": outside, "traps": traps}))
"""


@pytest.fixture(scope="module")
def import_probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh interpreter runs throughput, latency, compare and the report's loader on a
    config that names no import path, in a folder holding modules named like the import
    paths recorded in the result files; what it imported is reported back."""
    cwd = tmp_path_factory.mktemp("imports")
    for name in TRAP_NAMES:
        (cwd / f"{name}.py").write_text(TRAP.format(marker=str(cwd / f"{name}.imported")))
    overrides = {**TINY, "throughput.telemetry": False, "latency.requests": 10}
    env = {**os.environ, "PYTHONPATH": f"{cwd}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, json.dumps(overrides), ",".join(TRAP_NAMES)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["markers"] = sorted(p.name for p in cwd.glob("*.imported"))
    return report


def security_no_import_outside_the_environment(probe: dict[str, Any]) -> None:
    # everything imported came from the stdlib, the installed packages or mlbaseline itself
    assert probe["outside"] == []


def security_result_files_import_nothing(probe: dict[str, Any]) -> None:
    assert probe["traps"] == [] and probe["markers"] == []


def security_no_secret_env_in_result(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "HF_TOKEN": "hf_s3cr3tTOKENvalue",
        "AWS_SECRET_ACCESS_KEY": "aws-s3cr3t-KEY-value",
        "MLB_DB_PASSWORD": "pa55w0rd-value",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    out = tmp / "lat.json"
    res = runner.invoke(app, ["latency", *SETS, "--requests", "5", "-q", "-o", str(out)])
    assert res.exit_code in (0, 1), res.stderr
    text = out.read_text()
    for key, value in secrets.items():
        assert value not in text and key not in text
    env = load_result(out).environment["informational"].get("env", {})
    from mlbaseline.envinfo import ENV_ALLOWLIST

    assert set(env) <= set(ENV_ALLOWLIST)


class _FakeNvml(ModuleType):
    """A pynvml stand-in that records every function the probe calls."""

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.called: list[str] = []
        answers: dict[str, Any] = {
            "nvmlDeviceGetCount": 1,
            "nvmlDeviceGetName": b"Fake GPU",
            "nvmlDeviceGetUUID": b"GPU-fake",
            "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=16 << 30, used=1 << 30),
            "nvmlDeviceGetTemperature": 40,
            "nvmlDeviceGetMigMode": (0, 0),
            "nvmlDeviceGetEccMode": (0, 0),
            "nvmlDeviceGetComputeRunningProcesses": [],
            "nvmlDeviceGetPersistenceMode": 1,
            "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=10, memory=5),
            "nvmlDeviceGetPowerUsage": 100000,
            "nvmlDeviceGetClockInfo": 1400,
            "nvmlDeviceGetCurrentClocksEventReasons": 0,
            "nvmlSystemGetDriverVersion": b"550.54.15",
        }
        self.answers = answers

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.called.append(name)
            return self.answers.get(name)

        return call


def security_nvml_is_read_only(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlbaseline.measure.gpu import NvmlProbe

    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    probe = NvmlProbe()
    assert probe.available() == (True, "")
    (info,) = probe.devices()
    assert info.name == "Fake GPU" and probe.sample(0).kernel_active_pct == 10.0
    probe.driver_version()
    probe.close()
    assert fake.called and "nvmlDeviceGetUtilizationRates" in fake.called
    read_only = re.compile(r"^nvml(Init|Shutdown|SystemGet\w+|DeviceGet\w+)$")
    assert [c for c in fake.called if not read_only.match(c)] == []  # no Set/Reset/Clear


SECURITY: dict[str, Callable[..., None]] = {
    "no-import-outside-the-environment": security_no_import_outside_the_environment,
    "result-files-import-nothing": security_result_files_import_nothing,
    "no-secret-env-in-result": security_no_secret_env_in_result,
    "nvml-is-read-only": security_nvml_is_read_only,
}


@pytest.mark.parametrize("case", [pytest.param(f, id=k) for k, f in SECURITY.items()])
def test_security(case: Callable[..., None], request: pytest.FixtureRequest, tmp_path, monkeypatch):
    if "probe" in inspect.signature(case).parameters:
        case(request.getfixturevalue("import_probe"))
    else:
        case(tmp_path, monkeypatch)


# ================================================================ 4. property-based

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=12,
)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["kind", "manifest_version", "entries", "seed", "n", "classes"]),
        json_values,
    ),
    st.lists(st.dictionaries(st.sampled_from(["path", "output", "class", "sha256"]), json_values)),
)
def test_fuzz_manifest_loader(tmp_path_factory, fields, entries):
    """Whatever a manifest holds, reading it is a Manifest or one of the tool's errors."""
    doc = {"kind": MANIFEST_KIND, "manifest_version": 1, "entries": entries, **fields}
    folder = tmp_path_factory.mktemp("m")
    (folder / MANIFEST_NAME).write_text(json.dumps(doc), encoding="utf-8")
    try:
        manifest = load_manifest(folder)
    except MlbError as exc:
        assert "\n" not in str(exc)
        return
    for entry in manifest.entries:  # anything accepted is a safe relative path
        for p in (entry.source, entry.output):
            assert not p.startswith("/") and ".." not in p.split("/")


@FUZZ
@given(st.lists(st.text(max_size=40), max_size=4))
def test_fuzz_set_option(items):
    """`--set` values, whatever they hold: the config, or exit 2 with one `Error:` line."""
    res = runner.invoke(app, ["env-check", "--show-config", *[f"--set={i}" for i in items]])
    if res.exit_code == 0:
        assert res.stdout.startswith("profile: ")
    else:
        assert_one_error_line(res)


# ================================================================ the docs table matches


def _param_ids(fn: Any) -> list[str]:
    ids: list[str] = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            ids += [p.id for p in mark.args[1]]
    return ids


def _check_rel_files(text: str) -> None:
    """Section 5's rows name tests in tests/test_rel_*.py as `tests/FILE::TEST[ID]`: every one of
    those tests (each parameter id) has a row, and every row names a test that exists."""
    import importlib.util

    documented = {
        (f, t)
        for f, t in re.findall(r"`tests/(test_rel_\w+\.py)::(test_\w+(?:\[[\w.-]+\])?)`", text)
    }
    found: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "tests").glob("test_rel_*.py")):
        spec = importlib.util.spec_from_file_location(f"_rel_{path.stem}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
        for name, fn in vars(module).items():
            if not name.startswith("test_") or not callable(fn):
                continue
            ids = _param_ids(fn)
            assert all(ids), f"{path.name}::{name}: every row needs an explicit id"
            found |= {(path.name, f"{name}[{i}]") for i in ids} if ids else {(path.name, name)}
    assert documented - found == set(), "documented in section 5 but not a test"
    assert found - documented == set(), "a tests/test_rel_*.py test missing from section 5"


def test_docs_table_matches_the_tests():
    module = sys.modules[__name__]
    tests: set[str] = set()
    for name, fn in vars(module).items():
        if not name.startswith("test_") or not callable(fn):
            continue
        ids = _param_ids(fn)
        assert all(ids), f"{name}: every row needs an explicit id"
        tests |= {f"{name}[{i}]" for i in ids} if ids else {name}
    text = DOC.read_text(encoding="utf-8")
    documented = set(re.findall(r"`(test_\w+(?:\[[\w.-]+\])?)`", text))
    assert documented - tests == set(), "documented but not a test"
    assert tests - documented == set(), "a test missing from docs/RELIABILITY.md"
    # the rows marked as known bugs in the docs are exactly the xfail rows here
    xfail = {
        f"test_bad_input[{p.id}]" for p in BAD_INPUT if any(m.name == "xfail" for m in p.marks)
    }
    flagged = {
        found
        for line in text.splitlines()
        if "**known bug**" in line
        for found in re.findall(r"`(test_\w+\[[\w.-]+\])`", line)
    }
    assert flagged == xfail
    _check_rel_files(text)
    # the security rows that live in other files exist there
    for path, name in re.findall(r"`tests/(test_\w+\.py)::(test_\w+)`", text):
        assert re.search(rf"^def {name}\(", (ROOT / "tests" / path).read_text(), re.M), name
