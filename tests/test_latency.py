"""`mlb latency`: engines, trimming, statistics, verdicts, CLI.

Most tests run the discrete-event simulation (`FunctionService`), which is deterministic and
uses the same trimming and statistics as the real threads; a ManualClock test shows the real
engine produces the same records, and a busy_wait test checks real threads by ratios only.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from scipy import stats as sps
from typer.testing import CliRunner

from mlbaseline import config
from mlbaseline.cli import app
from mlbaseline.errors import UsageError
from mlbaseline.measure.clock import ManualClock, PerfClock, busy_wait
from mlbaseline.measure.latency import (
    FunctionService,
    LevelPlan,
    RequestError,
    RequestRecord,
    StageTimes,
    default_late_threshold,
    poisson_offsets_ns,
    rate_key,
    run_requests,
    simulate,
    trim_by_send_order,
)
from mlbaseline.progress import RecordingProgress
from mlbaseline.results import load_result, write_result
from mlbaseline.runners.latency import plan_levels, run_latency

STAGE_NAMES = ("queue", "preprocess", "compute", "postprocess")


def make_cfg(**latency):
    overrides = {f"latency.{k}": v for k, v in latency.items()}
    overrides.setdefault("latency.warmup_requests", 0)
    return config.resolve(None, "demo", overrides)


def const(seconds: float):
    return FunctionService(lambda i, inflight: StageTimes(0.0, seconds, 0.0), "const")


# ---------------------------------------------------------------- schedules and plans


def test_poisson_schedule_is_seeded_and_has_the_rate():
    a = poisson_offsets_ns(5000, 200.0, seed=42)
    assert a[0] == 0 and np.all(np.diff(a) >= 0)
    assert np.array_equal(a, poisson_offsets_ns(5000, 200.0, seed=42))
    assert not np.array_equal(a, poisson_offsets_ns(5000, 200.0, seed=43))
    gaps = np.diff(a) / 1e9
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.05)
    # exponential gaps: a KS test against Exp(rate) does not reject
    assert sps.kstest(gaps, "expon", args=(0, 1 / 200)).pvalue > 0.01


def test_rate_keys_are_metric_safe():
    assert rate_key(50) == "r50"
    assert rate_key(12.5) == "r12p5"
    assert LevelPlan("open", 2, 10, rate=12.5).prefix == "latency.r12p5"
    assert LevelPlan("closed", 4, 10).prefix == "latency.c4"


def test_late_threshold_rule():
    assert default_late_threshold(10) == pytest.approx(1e-3)
    assert default_late_threshold(1000) == pytest.approx(1e-4)


def test_plan_levels():
    plans = plan_levels(make_cfg(sweep=[4, 1, 2, 2]))
    assert [p.key for p in plans] == ["c1", "c2", "c4"]
    assert [p.key for p in plan_levels(make_cfg(rate=50.0))] == ["r50"]
    assert [p.key for p in plan_levels(make_cfg(rate=50.0, loop="both"))] == ["c2", "r50"]
    assert [p.key for p in plan_levels(make_cfg(rate=50.0, sweep=[1, 2]))] == ["c1", "c2", "r50"]
    with pytest.raises(UsageError, match=r"needs latency\.rate"):
        plan_levels(make_cfg(loop="open"))
    with pytest.raises(UsageError, match="closed-loop concurrency"):
        plan_levels(make_cfg(loop="open", rate=5.0, sweep=[1, 2]))
    with pytest.raises(UsageError, match="≥ 1"):
        plan_levels(make_cfg(sweep=[0, 2]))


# ---------------------------------------------------------------- trimming


def test_trim_drops_exactly_first_and_last_five_percent_by_send_order():
    # markers: the first 5 requests take 500 ms, the last 5 take 250 ms, and the slowest
    # request of all sits in the middle: trimming by value would drop it, by send order not
    def fn(i, inflight):
        t = 0.5 if i < 5 else 0.25 if i >= 95 else 0.9 if i == 50 else 0.001
        return StageTimes(0.0, t, 0.0)

    result = run_latency(
        make_cfg(requests=100, concurrency=1), RecordingProgress(), service=FunctionService(fn)
    )
    m = result.measurements["latency.c1.request"]
    assert len(m.values) == 90
    assert m.warmup == [0.5] * 5 + [0.25] * 5  # head then tail, in send order
    assert max(m.values) == pytest.approx(0.9)
    assert sorted(m.values)[:-1] == [pytest.approx(0.001)] * 89
    log = result.data["levels"]["c1"]["requests"]
    assert log["phase"][:5] == ["warmup"] * 5 and log["phase"][-5:] == ["drain"] * 5
    assert log["phase"][5:95] == ["measured"] * 90
    assert m.meta["trim"] == {"head": 5, "tail": 5, "order": "send"}


def test_trim_orders_by_index_not_by_list_position_or_value():
    recs = [
        RequestRecord(i, 0, i, i, 0, 0, 1000 - i, 0, 1000 - i) for i in range(40)
    ]  # latency falls with index
    random.Random(1).shuffle(recs)
    t = trim_by_send_order(recs, 0.05)
    assert [r.index for r in t.head] == [0, 1] and [r.index for r in t.tail] == [38, 39]
    assert [r.index for r in t.kept] == list(range(2, 38))
    assert len(trim_by_send_order(recs, 0.0).kept) == 40
    assert len(trim_by_send_order(recs[:19], 0.05).kept) == 19  # floor(0.95) = 0 at each end


# ---------------------------------------------------------------- statistics


def test_percentiles_match_a_known_distribution_within_their_cis():
    mu, sigma = np.log(0.020), 0.5  # lognormal service time, median 20 ms
    draws = np.random.default_rng(7).lognormal(mu, sigma, size=4000)
    svc = FunctionService(lambda i, inflight: StageTimes(0.0, float(draws[i]), 0.0))
    result = run_latency(make_cfg(requests=4000, concurrency=1), RecordingProgress(), service=svc)
    st = result.data["levels"]["c1"]["stats"]
    assert st["n"] == 3600
    for q in (50, 90, 95, 99):
        true = float(np.exp(mu + sigma * sps.norm.ppf(q / 100)))
        lo, hi = st[f"p{q}"]["ci"]
        assert lo <= true <= hi, (q, lo, true, hi)
        assert lo <= st[f"p{q}"]["value"] <= hi
    true_mean = float(np.exp(mu + sigma**2 / 2))
    lo, hi = st["mean"]["ci"]
    assert lo <= true_mean <= hi
    assert st["max"]["value"] == pytest.approx(max(draws[200:3800]))
    # an uncorrelated, unloaded closed loop adds nothing to the service time
    assert result.data["levels"]["c1"]["stages"]["queue"]["p99"] == 0.0


def test_percentile_floor_warnings_when_too_few_samples():
    result = run_latency(make_cfg(requests=100), RecordingProgress(), service=const(0.001))
    floors = [w for w in result.warnings if w["code"] == "percentile_floor"]
    assert {w["message"].split(": ")[1].split()[0] for w in floors} == {"p95", "p99"}
    assert all(w["value"] == 90 for w in floors)
    many = run_latency(make_cfg(requests=1000), RecordingProgress(), service=const(0.001))
    assert not [w for w in many.warnings if w["code"] == "percentile_floor"]


def test_histogram_and_stage_group(tmp_path):
    svc = FunctionService(lambda i, inflight: StageTimes(0.001, 0.004 + 1e-5 * (i % 7), 0.0005))
    result = run_latency(make_cfg(requests=200, concurrency=2), RecordingProgress(), service=svc)
    level = result.data["levels"]["c2"]
    hist = level["histogram"]
    assert sum(hist["counts"]) == 180 and len(hist["edges"]) == len(hist["counts"]) + 1
    total = result.measurements["latency.c2.request"]
    assert total.meta["role"] == "total" and total.meta["stages"] == list(STAGE_NAMES)
    parts = [result.measurements[f"latency.c2.{s}"] for s in STAGE_NAMES]
    residual = result.measurements["latency.c2.residual"]
    assert all(p.meta == {**p.meta, "role": "stage", "group": "latency.c2"} for p in parts)
    assert residual.meta["role"] == "residual"
    for i, v in enumerate(total.values):
        assert v == pytest.approx(sum(p.values[i] for p in parts) + residual.values[i])
    back = load_result(write_result(result, tmp_path / "lat.json"), kinds=["latency"])
    assert back.measurements["latency.c2.compute"].values == parts[2].values
    doc = json.loads((tmp_path / "lat.json").read_text())
    assert len(doc["data"]["levels"]["c2"]["requests"]["latency_s"]) == 200


# ---------------------------------------------------------------- open loop, stall, omission


def test_stall_shows_in_the_open_loop_and_the_result_says_the_closed_loop_hides_it():
    def fn(i, inflight):  # 1 ms per request, except one 2-second stall
        return StageTimes(0.0002, 2.0 if i == 500 else 0.001, 0.0001)

    cfg = make_cfg(requests=1000, concurrency=1, rate=200.0, loop="both")
    result = run_latency(cfg, RecordingProgress(), service=FunctionService(fn))
    closed = result.data["levels"]["c1"]["stats"]["p99"]["value"]
    opened = result.data["levels"]["r200"]["stats"]["p99"]["value"]
    assert closed < 0.005  # one stalled request out of 900: invisible at p99
    assert opened > 1.0  # ~400 arrivals queued behind the stall
    om = result.data["coordinated_omission"]
    assert om["flagged"] and om["ratio"] > 100 and not om["overloaded"]
    assert "coordinated omission" in om["explanation"]
    codes = [w["code"] for w in result.warnings]
    assert "coordinated_omission" in codes
    checks = {c.name: c.status for c in result.verdict.checks}
    assert checks["sla.c1"] == "pass" and checks["sla.r200"] == "fail"
    level = result.data["levels"]["r200"]
    assert level["late_share"] > 0.3 and "late_sends" in codes
    # the open loop's queue stage carries the wait, not the model
    assert level["stages"]["queue"]["p99"] > 1.0 and level["stages"]["compute"]["p99"] < 0.01


def test_open_loop_rate_accounting_when_lightly_loaded():
    cfg = make_cfg(requests=2000, concurrency=2, rate=100.0)
    result = run_latency(cfg, RecordingProgress(), service=const(0.001))
    level = result.data["levels"]["r100"]
    assert level["target_rate"] == 100.0
    assert level["schedule_rate"] == pytest.approx(100.0, rel=0.1)
    assert level["achieved_rate"] == pytest.approx(level["schedule_rate"], rel=1e-9)
    assert level["late_share"] < 0.01
    assert "coordinated_omission" not in result.data  # only one loop ran
    assert result.data["loop_notes"]["open"].startswith("Open loop")


def test_open_loop_latency_counts_from_the_scheduled_time():
    plan = LevelPlan("open", 1, 50, rate=1000.0, seed=3)
    run = simulate(plan, const(0.004))  # 4 ms each at 1 ms mean gaps: a growing queue
    offsets = plan.offsets_ns()
    for r in run.records:
        assert r.scheduled_ns == offsets[r.index]
        assert r.total_ns == r.queue_ns + r.compute_ns
        assert r.start_ns >= r.scheduled_ns
    waits = [r.queue_ns for r in run.records]
    assert waits[-1] > waits[10] > 0


# ---------------------------------------------------------------- sweep and SLA


def grows_with_concurrency(i, inflight):
    return StageTimes(0.0, 0.010 * inflight, 0.0)


def test_sweep_finds_the_knee():
    cfg = make_cfg(requests=400, sweep=[1, 2, 4, 8], sla_p99_s=0.050)
    result = run_latency(cfg, RecordingProgress(), service=FunctionService(grows_with_concurrency))
    sweep = result.data["sweep"]
    assert sweep["knee"] == 4
    assert sweep["meets_sla"] == {"1": True, "2": True, "4": True, "8": False}
    assert sweep["p99_s"]["8"] == pytest.approx(0.080)
    checks = {c.name: c for c in result.verdict.checks}
    assert checks["sla.sweep"].status == "pass" and checks["sla.sweep"].value == 4
    assert checks["sla.c8"].status == "warn" and not result.verdict.failed


def test_sweep_with_no_level_meeting_the_sla_fails():
    cfg = make_cfg(requests=200, sweep=[1, 2], sla_p99_s=0.005)
    result = run_latency(cfg, RecordingProgress(), service=FunctionService(grows_with_concurrency))
    assert result.data["sweep"]["knee"] is None
    assert result.verdict.failed


def test_non_monotone_sweep_keeps_the_knee_and_warns():
    def fn(i, inflight):  # bad at exactly 2 clients
        return StageTimes(0.0, 0.2 if inflight == 2 else 0.001, 0.0)

    cfg = make_cfg(requests=200, sweep=[1, 2, 4], sla_p99_s=0.1)
    result = run_latency(cfg, RecordingProgress(), service=FunctionService(fn))
    assert result.data["sweep"]["knee"] == 1
    assert "non_monotone_sweep" in [w["code"] for w in result.warnings]


@pytest.mark.parametrize(("sla", "failed"), [(0.011, False), (0.009, True)])
def test_sla_verdict(sla, failed):
    result = run_latency(
        make_cfg(requests=100, sla_p99_s=sla), RecordingProgress(), service=const(0.010)
    )
    assert result.verdict.failed is failed
    check = next(c for c in result.verdict.checks if c.name == "sla.c2")
    assert check.value == pytest.approx(0.010) and check.threshold == sla


# ---------------------------------------------------------------- the real engine


class ClockClient:
    """A fake client that advances a ManualClock by the simulated stage times."""

    def __init__(self, clock, fn, calls):
        self.clock, self.fn, self.calls = clock, fn, calls

    def prepare(self, index):
        self.calls.append(index)
        self.t = self.fn(index, 1)
        self.clock.advance(self.t.preprocess)
        return index

    def compute(self, x):
        self.clock.advance(self.t.compute)
        return x

    def post(self, y):
        self.clock.advance(self.t.postprocess)
        return y

    def close(self):
        pass


class ClockService:
    def __init__(self, clock, fn):
        self.clock, self.fn, self.calls = clock, fn, []

    def client(self, index):
        return ClockClient(self.clock, self.fn, self.calls)

    def describe(self):
        return {"type": "fake", "device": "cpu"}

    def close(self):
        pass


@pytest.mark.parametrize("loop", ["closed", "open"])
def test_real_engine_matches_the_simulation_on_a_manual_clock(loop):
    draws = np.random.default_rng(1).exponential(0.004, size=(3, 300))

    def fn(i, inflight):
        return StageTimes(*(float(d) for d in draws[:, i]))

    plan = LevelPlan(loop, 1, 300, rate=200.0 if loop == "open" else None, seed=5)
    clock = ManualClock(start_ns=10**12)
    real = run_requests(plan, ClockService(clock, fn), clock, sleep=clock.advance)
    sim = simulate(plan, FunctionService(fn))
    assert len(real.records) == len(sim.records) == 300
    fields = ("scheduled_ns", "start_ns", "queue_ns", "compute_ns", "total_ns")
    for a, b in zip(real.records, sim.records, strict=True):
        assert a.index == b.index
        for f in fields:
            assert abs(getattr(a, f) - getattr(b, f)) <= 2, (f, a, b)
    assert real.engine == "threads" and sim.engine == "simulated"


class BusyClient:
    def __init__(self, pre, comp):
        self.pre, self.comp = pre, comp

    def prepare(self, index):
        busy_wait(self.pre)
        return index

    def compute(self, x):
        busy_wait(self.comp)
        return x

    def post(self, y):
        return y

    def close(self):
        pass


class BusyService:
    def __init__(self, pre=0.001, comp=0.003):
        self.pre, self.comp, self.clients = pre, comp, []

    def client(self, index):
        self.clients.append(index)
        return BusyClient(self.pre, self.comp)

    def describe(self):
        return {"type": "busy", "device": "cpu"}

    def close(self):
        pass


def test_real_threads_split_the_stages_by_ratio():
    """1 ms + 3 ms of busy waiting on real threads. A busy machine only adds time (preemption
    overshoots a spin, never shortens it), so each request is bounded below exactly and the
    fastest request bounds the split from above: a ratio of medians was timing luck."""
    run = run_requests(LevelPlan("closed", 1, 40), BusyService(), PerfClock())
    pre = [r.preprocess_ns for r in run.records]
    comp = [r.compute_ns for r in run.records]
    for r in run.records:  # every request: each stage holds its whole spin, inside the total
        assert r.preprocess_ns >= 1_000_000 and r.compute_ns >= 3_000_000, r
        assert r.preprocess_ns + r.compute_ns <= r.total_ns, r
    # no stage took the other's time: a leak would add ≥ 1 ms (or 3 ms) to every request
    assert min(pre) < 1_900_000 and min(comp) < 3_900_000, (min(pre), min(comp))
    assert 2.0 < min(comp) / min(pre) < 4.5
    # ...nor is time lost between the stages (one client: no queue, a no-op post)
    assert min(r.total_ns - r.preprocess_ns - r.compute_ns for r in run.records) < 400_000


def test_real_threads_closed_loop_with_two_clients_send_in_index_order():
    service = BusyService(pre=0.0, comp=0.0005)
    progress = []
    run = run_requests(
        LevelPlan("closed", 2, 60), service, PerfClock(), on_progress=progress.append
    )
    assert sorted(service.clients) == [0, 1]
    assert [r.index for r in run.records] == list(range(60))
    starts = [r.start_ns for r in run.records]
    assert starts == sorted(starts)  # send order is index order
    assert progress[-1] == 60
    assert not run.interrupted and run.error is None


def test_real_threads_open_loop_keeps_the_schedule():
    plan = LevelPlan("open", 2, 40, rate=400.0, seed=2)
    run = run_requests(plan, BusyService(pre=0.0, comp=0.0002), PerfClock())
    offsets = plan.offsets_ns()
    assert [r.scheduled_ns for r in run.records] == [int(o) for o in offsets]
    assert all(r.start_ns >= r.scheduled_ns for r in run.records)


class FlakyService(BusyService):
    """Fails every third request with a RequestError, or raises `fault` at request `at`."""

    def __init__(self, fault=None, at=None):
        super().__init__(pre=0.0, comp=0.0)
        self.fault, self.at = fault, at

    def client(self, index):
        svc = self

        class C(BusyClient):
            def compute(self, x):
                if svc.fault is not None and x == svc.at:
                    raise svc.fault
                if svc.fault is None and x % 3 == 0:
                    raise RequestError("http_503", "HTTP 503", 503)
                return x

        return C(0.0, 0.0)


def test_request_errors_are_recorded_and_counted_never_fatal():
    cfg = make_cfg(requests=60, concurrency=2)
    result = run_latency(cfg, RecordingProgress(), service=FlakyService())
    assert result.status == "complete"
    level = result.data["levels"]["c2"]
    assert level["errors"]["count"] == 20 and level["errors"]["by_kind"] == {"http_503": 20}
    assert level["requests"]["status"].count(503) == 20
    assert len(result.measurements["latency.c2.request"].values) == sum(
        1 for i in range(3, 57) if i % 3
    )
    checks = {c.name: c.status for c in result.verdict.checks}
    assert checks["errors.c2"] == "fail" and result.verdict.failed


def test_a_crashing_model_marks_the_result_failed_and_keeps_what_was_measured():
    cfg = make_cfg(requests=100, sweep=[1, 2])
    result = run_latency(cfg, RecordingProgress(), service=FlakyService(RuntimeError("boom"), 120))
    assert result.status == "complete"
    result = run_latency(cfg, RecordingProgress(), service=FlakyService(RuntimeError("boom"), 30))
    assert result.status == "failed" and "RuntimeError: boom" in result.notes[0]
    level = result.data["levels"]["c1"]
    assert level["error"] == "RuntimeError: boom" and level["completed"] == 30
    assert "c2" not in result.data["levels"]  # stopped after the faulty level


def test_ctrl_c_saves_the_partial_result_marked_interrupted(tmp_path):
    cfg = make_cfg(requests=100, concurrency=2)
    result = run_latency(cfg, RecordingProgress(), service=FlakyService(KeyboardInterrupt(), 40))
    assert result.status == "interrupted"
    level = result.data["levels"]["c2"]
    assert level["interrupted"] and 38 <= level["completed"] <= 41
    load_result(write_result(result, tmp_path / "partial.json"))

    def stop_at_50(i, inflight):
        if i == 50:
            raise KeyboardInterrupt
        return StageTimes(0.0, 0.001, 0.0)

    sim = run_latency(cfg, RecordingProgress(), service=FunctionService(stop_at_50))
    assert sim.status == "interrupted" and sim.data["levels"]["c2"]["completed"] == 50


# ---------------------------------------------------------------- the model service


def test_model_service_stages_on_a_tiny_text_model():
    from mlbaseline.workloads.service import build_model_service

    cfg = config.resolve(
        None,
        "demo",
        {"workload.task": "text", "workload.model": "builtin:tiny_text", "workload.max_length": 64},
    )
    svc = build_model_service(cfg)
    client = svc.client(0)
    x = client.prepare(0)
    assert x.shape == (1, 16) and x.dtype == torch.long and int(x.min()) >= 1
    assert client.post(client.compute(x)).shape == (1,)
    assert svc.describe()["input_shape"] == [1, 16]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_model_service_on_cuda_synchronises():
    cfg = config.resolve(
        None,
        "demo",
        {"workload.device": "cuda", "workload.model": "builtin:tiny_cnn", "latency.requests": 60},
    )
    result = run_latency(cfg, RecordingProgress())
    level = result.data["levels"]["c2"]
    assert result.status == "complete" and level["errors"]["count"] == 0
    assert result.data["service"]["device"].startswith("cuda")
    assert level["stages"]["compute"]["median"] > 0


# ---------------------------------------------------------------- CLI


TINY = ["--set", "workload.model=builtin:tiny_cnn", "--set", "workload.image_size=16"]


@pytest.mark.parametrize(("sla_ms", "code"), [("100000", 0), ("0.000001", 1)])
def test_cli_sla_pass_and_miss_exit_codes(tmp_path, sla_ms, code):
    out = tmp_path / "lat.json"
    args = ["latency", *TINY, "--requests", "30", "--sla-p99-ms", sla_ms, "-o", str(out), "-q"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == code, res.output
    doc = load_result(out, kinds=["latency"])
    assert doc.verdict.failed is (code == 1)
    assert doc.data["levels"]["c2"]["sla"]["threshold_s"] == pytest.approx(float(sla_ms) / 1e3)


def test_cli_json_on_stdout_and_table_on_stderr():
    args = ["latency", *TINY, "--requests", "20", "--rate", "200", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["kind"] == "latency" and "r200" in doc["data"]["levels"]
    assert "latency per request" in res.stderr and "achieved" in res.stderr


def test_cli_help_has_an_example():
    res = CliRunner().invoke(app, ["latency", "--help"])
    assert res.exit_code == 0 and "Example: mlb latency" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "ftp://example.com/x"], "only http:// and https://"),
        (["--body", "{}"], "needs an endpoint"),
        (["--sweep", "1,x"], "--sweep: expected comma-separated integers"),
        (["--requests", "0"], "latency.requests: must be ≥ 1"),
        (["--loop", "open"], "needs latency.rate"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, message):
    res = CliRunner().invoke(app, ["latency", *TINY, *args])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("Error: ") and message in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_cli_ctrl_c_writes_the_partial_result_and_exits_130(tmp_path, monkeypatch):
    import mlbaseline.runners.latency as runner

    monkeypatch.setattr(
        runner, "build_service", lambda cfg, body: FlakyService(KeyboardInterrupt(), 10)
    )
    out = tmp_path / "partial.json"
    res = CliRunner().invoke(app, ["latency", *TINY, "--requests", "50", "-o", str(out)])
    assert res.exit_code == 130, res.output
    doc = load_result(out)
    assert doc.status == "interrupted" and "interrupted after" in doc.notes[0]


def test_a_single_request_still_gives_a_valid_result(tmp_path):
    result = run_latency(
        make_cfg(requests=1, concurrency=1), RecordingProgress(), service=const(0.002)
    )
    st = result.data["levels"]["c1"]["stats"]
    assert st["n"] == 1 and st["p99"] == {"value": 0.002, "ci": [0.002, 0.002]}
    assert sum(result.data["levels"]["c1"]["histogram"]["counts"]) == 1
    assert len([w for w in result.warnings if w["code"] == "percentile_floor"]) == 3
    load_result(write_result(result, tmp_path / "one.json"))
