"""--trace: the torch.profiler window after the measured steps, one range per stage, the
profiler's time against mlb's stage timers, telemetry as counter tracks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.errors import UsageError
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.step import TRAIN_STAGES
from mlbaseline.measure.timers import StepTimes
from mlbaseline.measure.trace import (
    FLOOR_S,
    STEP_RANGE,
    TraceSession,
    TraceWindow,
    compare,
    counter_events,
    trace_names,
    trace_session,
)
from mlbaseline.report.markdown import render_markdown
from mlbaseline.report.render import build_context
from mlbaseline.results import Result
from mlbaseline.runners.throughput import run_throughput

SMALL = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": 16,
    "workload.device": "cpu",
    "golden.subset_size": 64,
    "golden.telemetry_interval_s": 0.02,
    "throughput.mode": "train",
    "throughput.batch_sizes": [4],
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 6,
    "throughput.max_steps": 6,
    "throughput.window": 4,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "throughput.control_every": 0,
    "throughput.trace": True,
    "throughput.trace_steps": 4,
}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    result = run_throughput(resolve(None, "demo", SMALL), probe=NullProbe(), output_dir=out)
    return result, out


def test_trace_file_opens_as_json_with_one_range_per_stage_and_step(traced):
    result, out = traced
    assert result.status == "complete", result.notes
    assert result.artifacts["trace.bs4"] == "trace.bs4.json"
    doc = json.loads((out / "trace.bs4.json").read_text())
    ranges = [
        e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"
    ]
    names = [e["name"] for e in ranges if e["name"].startswith("mlb.")]
    # one range per stage per traced step, and one per step
    for stage in TRAIN_STAGES:
        assert names.count(f"mlb.{stage}") == 4, stage
    assert names.count(STEP_RANGE) == 4
    # every stage range lies inside a step range
    steps = [e for e in ranges if e["name"] == STEP_RANGE]
    for e in ranges:
        if e["name"].startswith("mlb.") and e["name"] != STEP_RANGE:
            assert any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps)


def test_telemetry_is_in_the_trace_as_counter_tracks(traced):
    result, out = traced
    doc = json.loads((out / "trace.bs4.json").read_text())
    counters = [e for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert counters and {e["name"] for e in counters} >= {"telemetry: CPU %"}
    assert result.data["batch_sizes"]["4"]["train"]["trace"]["counter_events"] == len(counters)
    # on the trace's clock: within the window, give or take one sampling interval (and the
    # sampler thread's scheduling on a busy machine)
    steps = [e for e in doc["traceEvents"] if e.get("name") == STEP_RANGE]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    slack_us = 0.02e6 * 5
    assert all(lo - slack_us <= e["ts"] <= hi + slack_us for e in counters)


def test_the_window_never_reaches_the_measured_samples(traced):
    result, _ = traced
    # max_steps 6 measured; the 4 traced steps came after and are not among them
    assert len(result.measurements["train.bs4.step"].values) == 6
    trace = result.data["batch_sizes"]["4"]["train"]["trace"]
    assert trace["steps"] == 4 and "after the measured steps" in trace["window"]
    assert set(trace["stages"]) == {*TRAIN_STAGES, "step"}
    for row in trace["stages"].values():
        assert row["ranges"] == 4 and row["mlb_s"] > 0 and row["profiler_s"] > 0


# ---------------------------------------------------------------- the comparison, on fakes


def _window(profiler_s: dict[str, float], mlb_s: dict[str, float], k: int = 5) -> TraceWindow:
    """k steps whose every stage took mlb_s[stage] by mlb's timer and profiler_s[stage] by
    the profiler's range."""
    events = []
    for _ in range(k):
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": STEP_RANGE, "ts": 0, "dur": 1e6}
        )
        for stage, s in profiler_s.items():
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"mlb.{stage}",
                    "ts": 0,
                    "dur": s * 1e6,
                }
            )
    times = [StepTimes(total_s=1.0, stages=dict(mlb_s)) for _ in range(k)]
    return TraceWindow(times, {"traceEvents": events, "baseTimeNanoseconds": 0}, 0, None)


def _finish(window: TraceWindow) -> Result:
    result = Result(kind="throughput", config={})
    result.data = {"batch_sizes": {"8": {"batch_size": 8, "status": "ok", "train": {"n": 5}}}}
    session = TraceSession(5, 0.10, "cpu")
    session.windows[8] = window
    session.finish(result, 8, ("forward", "backward"))
    return result


def test_agreement_gives_no_warning():
    result = _finish(
        _window({"forward": 0.0101, "backward": 0.020}, {"forward": 0.010, "backward": 0.020})
    )
    assert result.warnings == []
    summary = result.data["batch_sizes"]["8"]["train"]["trace"]
    assert summary["stages"]["forward"]["agree"] and summary["file"] is None


def test_an_injected_disagreement_is_a_warning():
    # the profiler sees backward take 30 ms where mlb's timer says 20 ms: +50%
    result = _finish(
        _window({"forward": 0.010, "backward": 0.030}, {"forward": 0.010, "backward": 0.020})
    )
    codes = [w["code"] for w in result.warnings]
    assert codes == ["trace_disagreement"]
    w = result.warnings[0]
    assert w["metric"] == "train.bs8.backward" and w["threshold"] == 0.10
    assert "backward: profiler 150.000 ms vs mlb 100.000 ms over 5 steps (+50%" in w["message"]
    assert not result.data["batch_sizes"]["8"]["train"]["trace"]["stages"]["backward"]["agree"]


def test_tiny_stages_within_the_floor_agree():
    # +100% of 20 µs is below the 50 µs/step floor: the ranges' own cost, not a finding
    mlb = {"forward": 20e-6, "backward": 0.020}
    summary = compare(_window({"forward": 40e-6, "backward": 0.020}, mlb), ["forward"], 0.10)
    assert FLOOR_S == 50e-6 and summary["stages"]["forward"]["agree"]


def test_a_missing_range_is_a_disagreement():
    window = _window({"forward": 0.010}, {"forward": 0.010, "backward": 0.020})
    result = Result(kind="throughput", config={})
    session = TraceSession(5, 0.10, "cpu")
    session.windows[8] = window
    session.finish(result, 8, ("forward", "backward"))
    assert any(
        "backward: the profiler saw 0 ranges in 5 steps" in w["message"] for w in result.warnings
    )


def test_the_report_shows_the_disagreement():
    result = _finish(
        _window({"forward": 0.010, "backward": 0.030}, {"forward": 0.010, "backward": 0.020})
    )
    result.environment = {"blocking": {}, "informational": {}}
    md = render_markdown(build_context([result]))
    assert "the profiler and mlb's stage timer disagree on backward" in md


def test_counter_events_on_the_trace_clock():
    base_ns, wall0_ns = 1_000_000_000_000, 1_000_500_000_000  # window starts 0.5 s after base
    window = TraceWindow([], {"baseTimeNanoseconds": base_ns}, wall0_ns, 10.0, 10.2)
    rows = [
        {"t_s": 9.5, "cpu_pct": 1.0, "rss_bytes": 1, "gpu0_kernel_active_pct": 5.0},  # too early
        {"t_s": 10.0, "cpu_pct": 50.0, "rss_bytes": 100, "gpu0_kernel_active_pct": 90.0},
        {"t_s": 10.25, "cpu_pct": 60.0, "rss_bytes": "", "gpu0_kernel_active_pct": 80.0},
        {"t_s": 10.5, "cpu_pct": 70.0, "rss_bytes": 300, "gpu0_kernel_active_pct": 70.0},  # late
    ]
    events = counter_events(window, rows, 0.1)
    got = {(e["name"], e["ts"]): e["args"] for e in events}
    assert got == {
        ("telemetry: CPU %", 0.5e6): {"cpu_pct": 50.0},
        ("telemetry: RSS bytes", 0.5e6): {"rss_bytes": 100},
        ("telemetry: gpu0 kernel-active %", 0.5e6): {"gpu0_kernel_active_pct": 90.0},
        ("telemetry: CPU %", 0.75e6): {"cpu_pct": 60.0},  # blank RSS: no point
        ("telemetry: gpu0 kernel-active %", 0.75e6): {"gpu0_kernel_active_pct": 80.0},
    }
    assert all(e["ph"] == "C" for e in events)
    assert counter_events(TraceWindow([], {}, 0, None), rows, 0.1) == []  # no sampler ran


# ---------------------------------------------------------------- config and CLI


def test_trace_is_for_one_process():
    assert trace_session(resolve(None, "demo", {}), "cpu", None, None, "t.csv") is None
    with pytest.raises(UsageError, match="the profiler window is for one process"):
        cfg = resolve(None, "demo", {"throughput.trace": True, "throughput.nproc": 2})
        trace_session(cfg, "cpu", None, None, "telemetry.csv")


def test_trace_names_follow_the_telemetry_csv():
    cfg = resolve(None, "demo", {"throughput.trace": True, "throughput.batch_sizes": [4, 8]})
    assert trace_names(cfg, "tp.telemetry.csv") == ["tp.trace.bs4.json", "tp.trace.bs8.json"]
    off = resolve(None, "demo", {"throughput.batch_sizes": [4]})
    assert trace_names(off, "tp.telemetry.csv") == []


def test_cli_refuses_an_existing_trace_file_before_measuring(tmp_path):
    (tmp_path / "tp.trace.bs4.json").write_text("{}")
    res = CliRunner().invoke(
        app,
        ["throughput", "--quiet", "--trace", "--batch-sizes", "4", "-o", str(tmp_path / "tp.json")],
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("Error: ") and "tp.trace.bs4.json: already exists" in res.stderr
    assert not (tmp_path / "tp.json").exists()


def test_cli_trace_table_and_file(tmp_path):
    args = ["throughput", "--trace", "--trace-steps", "3", "-o", str(tmp_path / "tp.json")]
    for key, value in SMALL.items():
        if key not in ("throughput.trace", "throughput.trace_steps"):
            args += ["--set", f"{key}={json.dumps(value)}"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "profiler cross-check (--trace)" in res.stderr
    doc = json.loads((tmp_path / "tp.trace.bs4.json").read_text())
    assert sum(e.get("name") == STEP_RANGE for e in doc["traceEvents"]) == 3


def test_several_ranges_per_step_agree_gradient_accumulation():
    # two micro-batches per step: two forward ranges per step, mlb sums both
    window = _window({"forward": 0.005}, {"forward": 0.010}, k=5)
    window.trace["traceEvents"] += [
        {"ph": "X", "cat": "user_annotation", "name": "mlb.forward", "ts": 0, "dur": 5e3}
        for _ in range(5)
    ]
    row = compare(window, ["forward"], 0.10)["stages"]["forward"]
    assert row["ranges"] == 10 and row["agree"]


def test_on_cuda_stages_use_the_gpu_span_and_the_step_its_host_range():
    window = _window({"forward": 0.010}, {"forward": 0.004}, k=2)  # host range 10 ms
    window.trace["traceEvents"] += [
        {"ph": "X", "cat": "gpu_user_annotation", "name": name, "ts": 0, "dur": dur}
        for name, dur in (("mlb.forward", 4e3), (STEP_RANGE, 4e3))
        for _ in range(2)
    ]
    rows = compare(window, ["forward"], 0.10)["stages"]
    assert rows["forward"]["source"] == "gpu_user_annotation" and rows["forward"]["agree"]
    assert rows["step"]["source"] == "user_annotation" and rows["step"]["profiler_s"] == 2.0
