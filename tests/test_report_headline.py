"""The report's first screen (issue 27, item 1): it names the workload, leads with the figures
and their CIs, says what the baseline can see, lists only the signals that fired (quiet and
not-measured ones, predictions and the method collapsed in `<details>`), writes timestamps to
the second and sizes a reader can believe, and advises only what the result's source offers."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mlbaseline.history.record import config_hash as history_config_hash
from mlbaseline.report import payloads, signals
from mlbaseline.report.data import config_hash, timestamp
from mlbaseline.report.headline import HEADLINE, fired_lines
from mlbaseline.report.inputs import collect
from mlbaseline.report.markdown import SECTIONS, TITLE, render_markdown
from mlbaseline.report.render import build_context
from mlbaseline.report.sections_performance import memory_cell
from mlbaseline.results import load_result

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden" / "report"  # the demo's results on tiny settings (make_golden.py)
SIGNALS = TESTS / "golden" / "signals"  # replicated / one-process throughput (make_signals.py)
DETAILS = re.compile(r"<details>.*?</details>", re.DOTALL)


def _markdown(paths: list[Path]) -> str:
    found = collect(paths)
    return render_markdown(build_context(found.items, manifest=found.manifest))


@pytest.fixture(scope="module")
def demo() -> str:
    return _markdown([GOLDEN])


def _headline(md: str) -> str:
    return md.split(f"\n{HEADLINE}\n", 1)[1].split("\n## ", 1)[0]


def _main_flow(md: str) -> str:
    """The report as a reader sees it before opening any collapsed block."""
    return DETAILS.sub("", md)


def test_the_headline_comes_first_and_fits_a_screen(demo):
    assert demo.startswith(f"{TITLE}\n\n{HEADLINE}\n")
    assert demo.index(HEADLINE) < demo.index(f"\n{SECTIONS[0]}\n")
    assert len(_headline(demo).splitlines()) <= 40


def test_the_headline_names_the_workload(demo):
    head = _headline(demo)
    throughput = load_result(GOLDEN / "throughput.json")
    assert "`builtin:tiny_cnn`" in head  # model
    assert "synthetic data (256 samples, 10 classes" in head  # dataset
    assert "a subset of 40, mean KL" in head and "fails" in head  # the subset, as judged
    assert "32×32 px images" in head  # image size
    assert "batch sizes 8, 16" in head
    assert "on cpu (" in head  # device
    assert "`mlb run --profile demo`" in head  # the command
    assert f"`{history_config_hash(throughput)[:12]}`" in head  # as `mlb history show` gives it


def test_the_headline_figures_carry_their_cis(demo):
    rows = {r.split(" | ")[0].lstrip("| "): r for r in _headline(demo).splitlines() if "|" in r}
    for label in ("training step, batch 8", "training step, batch 16", "inference batch, batch 8"):
        assert re.search(r"\] ms \| [\d,.]+ \[[\d,.]+, [\d,.]+\] \|$", rows[label]), rows[label]
    assert re.search(r"\[.+\] ms", rows["latency p50 (c2)"]) and "latency p95 (c2)" in rows
    assert "data loading at the knee (2 workers)" in rows


def test_the_headline_says_what_it_can_see(demo):
    head = _headline(demo)
    # the demo ran one process per batch size: the MDE is unknown, said so, with the remedy
    assert "**What it can see:** unknown" in head and "--repeats" in head
    md = _markdown([SIGNALS / "replicated_quiet.json"])
    noise = payloads.noise_records([load_result(SIGNALS / "replicated_quiet.json")])
    mde = noise["train.bs8.step"].mde
    sentence = next(x for x in _headline(md).splitlines() if "What it can see" in x)
    assert f"{mde:.1%} at batch 8 (6 processes)" in sentence


def test_two_results_each_say_what_they_can_see(tmp_path):
    """Two files' noise records share metric names: each file's MDE is its own, labelled."""
    doc = json.loads((SIGNALS / "replicated_quiet.json").read_text(encoding="utf-8"))
    mde = doc["data"]["noise"]["train.bs8.step"]["mde"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a/r.json").write_text(json.dumps(doc), encoding="utf-8")
    doc["data"]["noise"]["train.bs8.step"]["mde"] = mde * 2
    (tmp_path / "b/r.json").write_text(json.dumps(doc), encoding="utf-8")
    md = _markdown([tmp_path / "a/r.json", tmp_path / "b/r.json"])
    sentence = next(x for x in _headline(md).splitlines() if "What it can see" in x)
    assert f"{mde:.1%} at batch 8 (a/r.json)" in sentence
    assert f"{2 * mde:.1%} at batch 8 (b/r.json)" in sentence


def test_only_fired_signals_are_in_the_main_flow(demo):
    ctx = build_context(collect([GOLDEN]).items)
    quiet = [s for s in ctx.signals if not s.fired]
    fired = [s for s in ctx.signals if s.fired]
    assert quiet and fired  # the demo has both, so the test can fail either way
    main = _main_flow(demo)
    titles = tuple(f"| {t} |" for t in signals.SIGNAL_TITLES.values())
    rows = [line for line in main.splitlines() if line.startswith(titles)]
    assert rows and all("| **FIRED** |" in r for r in rows)
    for s in quiet:  # each quiet or not-measured signal is still there, collapsed
        assert s.message not in main and s.message in demo
    for s in fired:
        assert s.message in main and f"**{s.title}**" in _headline(demo)
    # predictions and the method are collapsed too
    assert "- Prediction:" not in main and "- Prediction:" in demo
    assert "Hyndman & Fan" not in main and "Hyndman & Fan" in demo
    # and the per-stage MDE table (when there is one) with them
    replicated = _markdown([SIGNALS / "replicated_quiet.json"])
    assert (
        "between sittings sd" not in _main_flow(replicated) and "between sittings sd" in replicated
    )


def test_a_fired_signal_is_one_line_with_what_to_do():
    sig = signals.Signal("data_wait", True, 0.478, 0.2, "train.bs16: data wait …", "train.bs16")
    quiet = signals.Signal("residual", False, 0.01, 0.05, "quiet", "train.bs16")
    lines = [x for x in fired_lines([sig, quiet]) if x.startswith("- ")]
    assert lines == [
        f"- **{sig.title}** (train.bs16 47.8%): {signals.SIGNAL_ACTIONS['data_wait']}."
    ]
    assert set(signals.SIGNAL_ACTIONS) == set(signals.SIGNAL_TITLES)  # every signal has one
    assert "none of the 1 checks fired" in fired_lines([quiet])[0]


def test_not_reproducible_says_what_it_means():
    (sig,) = [
        s
        for s in signals.cv_signals([load_result(SIGNALS / "replicated_noisy.json")])
        if s.subject.endswith("step")
    ]
    assert sig.fired and signals.NOT_REPRODUCIBLE_MEANS in sig.action
    assert signals.NOT_REPRODUCIBLE_MEANS in _headline(
        _markdown([SIGNALS / "replicated_noisy.json"])
    )


def test_timestamps_are_to_the_second(demo):
    assert "18:32:26.762335" not in demo  # throughput.json's created_at, to the microsecond
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", demo)
    assert "| 2026-12-02 18:32:26 UTC |" in demo
    assert timestamp("2026-12-02T18:32:26.762335Z") == "2026-12-02 18:32:26 UTC"
    assert timestamp("2026-12-02T18:32:26.5+02:00") == "2026-12-02 18:32:26 +0200"
    assert timestamp("not a time") == "not a time" and timestamp(None) == "–"


def test_inference_memory_is_not_a_page_sized_peak(demo):
    inference = demo.split("\n## Inference throughput\n", 1)[1].split("\n## ", 1)[0]
    assert "KiB" not in inference and "RSS growth (memory already held)" in inference
    cell = memory_cell(payloads.BatchFacts(peak_memory=4096, memory_kind="cpu_rss_growth_hwm"))
    assert "4.00 KiB" not in cell and "< 1 MiB" in cell
    cuda = payloads.BatchFacts(peak_memory=3 * 2**30, memory_kind="cuda_max_memory_allocated")
    assert memory_cell(cuda) == "3.00 GiB (CUDA allocated)"
    assert memory_cell(payloads.BatchFacts()) == "not measured"


@pytest.mark.parametrize("name", ["replicated_noisy.json", "one_process.json"])
def test_api_results_get_no_cli_only_advice(tmp_path, name):
    cli = _markdown([SIGNALS / name])
    assert "--repeats" in cli  # the CLI's result is advised --repeats: the check can fail
    result = load_result(SIGNALS / name)
    doc = (SIGNALS / name).read_text(encoding="utf-8")
    api = tmp_path / name
    api.write_text(doc.replace('"data": {', '"data": {\n    "source": "api",', 1), encoding="utf-8")
    assert load_result(api).data.get("source") == "api" != result.data.get("source")
    md = _markdown([api])
    # the script's replicates: mlb attach --repeats (no code change), or pooled runs
    assert "measure with --repeats" not in md and "mlb attach --repeats" in md
    assert "run the script" in md
    assert "the library API" in _headline(md) and "`mlb throughput" not in _headline(md)
    # the script drew its own data: the config's default dataset is not described as it
    assert "the script's own data" in _headline(md) and " px images" not in _headline(md)
    assert " px images" in _headline(cli) and "the script's own data" not in _headline(cli)
    model = '"model": "' + str(result.config["workload"]["model"]) + '"'
    lightning = tmp_path / f"lightning-{name}"
    text = api.read_text(encoding="utf-8").replace(model, '"model": "lightning:demo.Net"')
    lightning.write_text(text, encoding="utf-8")
    md = _markdown([lightning])
    assert "measure with --repeats" not in md
    assert "the Lightning callback (`demo.Net`)" in _headline(md)
    attach = tmp_path / f"attach-{name}"  # mlb attach has --repeats of its own
    attach.write_text(api.read_text(encoding="utf-8").replace('"api"', '"attach"', 1))
    md = _markdown([attach])
    assert "measure with mlb attach --repeats" in md and "pool_results" not in md
    assert "`mlb attach`" in _headline(md) and "the library API" not in _headline(md)


def test_two_results_are_labelled_by_file(tmp_path):
    """Two files of one name in two folders (two runs' throughput.json): each row names its
    own, by the path tail that tells them apart; equal content is still two rows."""
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        shutil.copy(GOLDEN / "throughput.json", tmp_path / run / "throughput.json")
    head = _headline(_markdown([tmp_path / "a/throughput.json", tmp_path / "b/throughput.json"]))
    for run in ("a", "b"):
        assert f"| training step, batch 16 ({run}/throughput.json) |" in head
        assert f"| inference batch, batch 8 ({run}/throughput.json) |" in head
    one = _headline(_markdown([GOLDEN / "throughput.json"]))
    assert "| training step, batch 16 |" in one  # a single result needs no label


def test_the_config_hash_is_the_history_s():
    for path in (GOLDEN / "throughput.json", GOLDEN / "subset.json"):
        result = load_result(path)
        assert config_hash(result) == history_config_hash(result)
