"""The command skeleton as a user sees it: DATA given the same way to every command that reads
data (old spellings still work), help texts shown whole, tables that fit 80 columns uncut."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer.main
import yaml
from rich.console import Console
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.cli import compare as compare_cli
from mlbaseline.cli import latency as latency_cli
from mlbaseline.cli.common import Ui
from mlbaseline.config import resolve
from mlbaseline.progress import NullProgress
from mlbaseline.results import Metric, Result, result_from_dict, write_result
from mlbaseline.runners.compare_files import run_compare
from mlbaseline.workloads.synthetic import write_image_tree

runner = CliRunner()
WIDE = {"COLUMNS": "200"}

# where each command puts DATA in the resolved config
DATA_KEYS = {
    "subset": [("subset", "source")],
    "dataloader": [("dataloader", "data_dir")],
    "run": [("subset", "source")],
    "throughput": [("workload", "data_dir")],
}


def invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def shown(result, section: str, key: str) -> Any:
    assert result.exit_code == 0, (result.exit_code, result.stderr)
    return yaml.safe_load(result.stdout)[section][key]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("skeleton") / "images"
    write_image_tree(root, 40, num_classes=2, size=16, seed=3)
    return root


# ---------------------------------------------------------------- DATA


@pytest.mark.parametrize("command", sorted(DATA_KEYS))
def test_data_is_a_positional_argument(command: str, images: Path):
    res = invoke(command, str(images), "--show-config")
    for section, key in DATA_KEYS[command]:
        assert shown(res, section, key) == str(images)
    if command == "throughput":
        assert shown(res, "workload", "dataset") == "imagefolder"


@pytest.mark.parametrize("command", sorted(DATA_KEYS))
@pytest.mark.parametrize("flag", ["--data", "--data-dir"])
def test_old_spellings_still_work(command: str, flag: str, images: Path):
    res = invoke(command, flag, str(images), "--show-config")
    for section, key in DATA_KEYS[command]:
        assert shown(res, section, key) == str(images)


@pytest.mark.parametrize("command", sorted(DATA_KEYS))
def test_no_data_keeps_the_default(command: str):
    res = invoke(command, "--show-config")
    for section, key in DATA_KEYS[command]:
        assert shown(res, section, key) is None


def test_data_given_twice_differently_is_one_error_line(images: Path, tmp_path: Path):
    res = invoke("dataloader", str(images), "--data-dir", str(tmp_path), "--show-config")
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "given twice" in lines[0]
    same = invoke("dataloader", str(images), "--data-dir", str(images), "--show-config")
    assert shown(same, "dataloader", "data_dir") == str(images)


@pytest.mark.parametrize("spelling", [[], ["--data"]])
def test_subset_reads_the_folder_either_way(spelling: list[str], images: Path):
    res = invoke(
        "subset", *spelling, str(images), "--dry-run", "--n", "10", "--json", "-q",
        "--set", "subset.workers=1",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["data"]["index"]["images"] == 40


@pytest.mark.parametrize("command", sorted(DATA_KEYS))
def test_help_shows_data_and_hides_the_aliases(command: str):
    res = invoke(command, "--help", env=WIDE)
    assert res.exit_code == 0
    assert "DATA" in res.stdout
    options = [line.split()[1] for line in res.stdout.splitlines() if line.startswith("│ --")]
    assert "--data" not in options and "--data-dir" not in options  # hidden, named in DATA's help


# ---------------------------------------------------------------- help texts


def _commands() -> dict[str, Any]:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


PLACEHOLDER = re.compile(r"\\?<([^<>\n]+?)\\?>")


def _source_texts(cmd: Any) -> list[str]:
    texts = [cmd.help or ""]
    texts += [getattr(p, "help", None) or "" for p in cmd.params if not getattr(p, "hidden", False)]
    return texts


def test_some_help_text_has_a_placeholder():
    found = [
        m for c in _commands().values() for t in _source_texts(c) for m in PLACEHOLDER.findall(t)
    ]
    assert "UTC timestamp" in found  # else the next test checks nothing


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_shows_placeholders_and_every_option(name: str):
    res = invoke(name, "--help", env=WIDE)
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    flat = " ".join(out.replace("│", " ").split())
    for text in _source_texts(_commands()[name]):
        for inner in PLACEHOLDER.findall(text):
            assert f"<{inner}>" in flat, f"mlb {name} --help lost <{inner}>"
    source = " ".join(t.replace("\\", "") for t in _source_texts(_commands()[name]))
    for token in re.findall(r"\S*//\S*", flat):  # e.g. `mlb-results//`: a placeholder swallowed
        assert token in source, f"mlb {name} --help shows {token!r}"
    for param in _commands()[name].params:
        if getattr(param, "hidden", False) or not param.opts[0].startswith("-"):
            continue
        assert param.opts[0] in out, f"mlb {name} --help does not list {param.opts[0]}"
        words = " ".join((param.help or "").split()[:3])
        assert words.replace("`", "") in flat, f"{param.opts[0]}: help not shown"


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_shows_no_type_beside_a_flag(name: str):
    """--json, --force, --help … take no value: no `<bool>` beside them."""
    res = invoke(name, "--help", env=WIDE)
    assert res.exit_code == 0, res.stderr
    assert "<bool>" not in res.stdout
    assert "--json" in res.stdout and "--help" in res.stdout  # the flags still listed


# ---------------------------------------------------------------- tables at 80 columns


def render(show, *args: Any) -> list[str]:
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    show(*args, Ui(console=console, progress=NullProgress(), quiet=False))
    return console.export_text().splitlines()


def _scaled(obj: Any, factor: float) -> Any:
    if isinstance(obj, dict):
        return {k: v if k == "n" else _scaled(v, factor) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scaled(v, factor) for v in obj]
    return obj * factor if isinstance(obj, float) else obj


@pytest.fixture(scope="module")
def latency_result() -> Result:
    res = invoke(
        "latency", "--requests", "40", "--concurrency", "2", "--loop", "both", "--rate", "200",
        "--sla-p99-ms", "0.001", "--json", "-q",
    )  # fmt: skip
    assert res.exit_code == 1, res.stderr  # the SLA is missed: MISS in the table
    return result_from_dict(json.loads(res.stdout))


@pytest.mark.parametrize("factor", [1.0, 1e3, 1e4])
def test_latency_tables_fit_80_columns_uncut(latency_result: Result, factor: float):
    """As measured, and for a service 1000× and 10000× slower (p99 in minutes)."""
    result = result_from_dict(json.loads(latency_result.to_json()))
    for lv in result.data["levels"].values():
        lv["stats"] = _scaled(lv["stats"], factor)
        lv["stages"] = _scaled(lv["stages"], factor)
    lines = render(latency_cli.render, result)
    assert all(len(line) <= 80 for line in lines)
    table = lines[: next(i for i, ln in enumerate(lines) if ln.startswith("stage split")) + 6]
    assert not any("…" in line for line in table), "\n".join(table)
    assert not any("e+" in line for line in table), "\n".join(table)
    rows = [ln for ln in table if ln.split() and ln.split()[0] in result.data["levels"]]
    # one line per level in each table (a table too wide is stacked: the level in each part)
    levels = len(result.data["levels"])
    assert len(rows) >= 2 * levels and len(rows) % levels == 0
    for key, lv in result.data["levels"].items():
        (row,) = [ln for ln in rows[:levels] if ln.split()[0] == key]
        p99 = lv["stats"]["p99"]["value"] * 1e3
        assert f"{p99:,.0f}" in row or f"{p99:.3g}" in row or f"{p99:.2f}" in row
        assert row.split()[-1] == "MISS"


def _result(rng: np.random.Generator, n: int, factor: float, replicates: int) -> Result:
    r = Result(kind="throughput", environment={"blocking": {"device": "cpu"}})
    rep = [i % replicates for i in range(n)] if replicates else None
    for stage, base in (("forward", 0.03), ("backward", 0.055), ("optimizer", 0.007)):
        values = base * rng.lognormal(0.0, 0.08, n) * (factor if stage == "backward" else 1)
        meta = {"group": "train.bs64", "role": "stage", "stage": stage}
        r.add_metric(Metric(f"train.bs64.{stage}", "s", False, values, replicate=rep, meta=meta))
    rate = 64 / (0.1 * rng.lognormal(0.0, 0.08, n))
    meta = {"group": "train.bs64", "role": "rate"}
    r.add_metric(
        Metric("train.bs64.samples_per_s", "items/s", True, rate, replicate=rep, meta=meta)
    )
    return r


@pytest.mark.parametrize(("n", "replicates"), [(8, 0), (40, 5)])
def test_compare_table_fits_80_columns_and_reasons_go_under_it(tmp_path, n, replicates):
    rng = np.random.default_rng(13)
    old = write_result(_result(rng, n, 1.0, replicates), tmp_path / "old.json")
    new = write_result(_result(rng, n, 1.3, replicates), tmp_path / "new.json")
    cfg = resolve(None, None, {"compare.n_resamples": 500, "compare.min_replicates": 5})
    doc = run_compare(old, new, cfg).result.data
    lines = render(compare_cli._show, doc)
    assert all(len(line) <= 80 for line in lines)
    assert not any("…" in line for line in lines), "\n".join(lines)
    needs = [m for m in doc["metrics"] if m["verdict"] == "inconclusive" and m["samples_needed"]]
    if not replicates:  # one process a side: no verdict, and the reason under the table once
        assert {m["verdict"] for m in doc["metrics"]} == {"insufficient data"}
        assert sum("[1] one process a side" in ln for ln in lines) == 1
    else:
        assert needs, "the fixture should leave some metric inconclusive"
    for m in doc["metrics"]:
        name = m["metric"].rpartition(".")[2]
        (row,) = [ln for ln in lines if ln.strip().startswith(f".{name} ")]
        word = m["verdict"].split()[0]  # "insufficient data" shows its first word
        assert word in row.split(), row  # the verdict word whole, on the metric's line
    notes = [ln for ln in lines if re.match(r"\[\d+\] need ~\d+ (samples|repl\.)/side$", ln)]
    assert len(notes) == len({m["samples_needed"] for m in needs})
    assert not any("need ~" in ln for ln in lines if ln not in notes)
