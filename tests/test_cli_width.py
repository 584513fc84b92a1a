"""What a person reads in an 80-column terminal: every command's tables whole (no cell cut to
"…", no line past column 80) and every `--help` in words (no Python type names, choices shown
as choices, only the options the command uses)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer.main
from history_fakes import stamp, synthetic, write
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.results import Metric, Result, write_result

runner = CliRunner()
NARROW = {"COLUMNS": "80"}
FAST = ["--set", "compare.n_resamples=500"]


def mlb(*args: object, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, [str(a) for a in args], env={**NARROW, **(env or {})})


def assert_fits(text: str) -> None:
    """No line past column 80, no value cut to `…`."""
    lines = text.splitlines()
    wide = [ln for ln in lines if len(ln) > 80]
    assert not wide, "\n".join(wide)
    cut = [ln for ln in lines if "…" in ln]
    assert not cut, "\n".join(cut)


# ---------------------------------------------------------------- --help


def _commands(group: Any = None, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every command and group of `mlb`, by its words: () is `mlb` itself."""
    group = group or typer.main.get_command(app)
    found = {prefix: group}
    for name, cmd in getattr(group, "commands", {}).items():
        found |= _commands(cmd, (*prefix, name))
    return found


COMMANDS = _commands()
HISTORY_READERS = [
    ("history", n) for n in ("list", "show", "trend", "check", "export", "add", "rm")
]


def test_every_command_is_found():
    assert ("compare",) in COMMANDS and ("history", "gate") in COMMANDS and () in COMMANDS


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=lambda w: " ".join(w) or "mlb")
def test_help_fits_and_names_no_python_type(words: tuple[str, ...]):
    res = mlb(*words, "--help")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert all(len(ln) <= 80 for ln in out.splitlines())
    for token in ("<bool>", "<str>", "<int", "<float", "<path>", "<list[", "list[", "Path]"):
        assert token not in out, f"mlb {' '.join(words)} --help shows {token}"
    usage = next(ln for ln in out.splitlines() if "Usage:" in ln)
    assert not re.search(r"\{\w+\}", usage), usage  # OLD NEW, not {old} {new}
    for param in COMMANDS[words].params:
        choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
        if choices and not param.hidden:
            shown = "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
            assert shown in out, f"{param.opts[0]}: choices not shown as {shown}"


def test_help_arguments_are_capitals_and_values_words():
    out = mlb("compare", "--help").stdout
    assert "Usage: mlb compare [OPTIONS] OLD NEW" in out
    assert re.search(r"--threshold\s+NUMBER", out)
    assert re.search(r"--set\s+KEY=VALUE", out)
    assert "Usage: mlb report [OPTIONS] [INPUTS]..." in mlb("report", "--help").stdout
    assert re.search(r"--last\s+N\b", mlb("history", "list", "--help").stdout)


def test_fail_on_is_one_option_in_compare_and_gate():
    """The same option spelled, offered and explained the same way in both commands."""

    def row(words: tuple[str, ...]) -> str:
        out = mlb(*words, "--help").stdout
        return " ".join(out[out.index("--fail-on  ") :].replace("│", " ").split())[:80]

    assert row(("compare",)) == row(("history", "gate"))
    assert "[regressed|any|never]" in row(("history", "gate"))
    assert mlb("history", "gate", "x.json", "--fail-on", "sometimes").exit_code == 2


def test_trend_help_keeps_the_glob_stars():
    flat = " ".join(mlb("history", "trend", "--help").stdout.replace("│", " ").split())
    assert "'train.bs64.*'" in flat and "'train.*.step'" in flat


@pytest.mark.parametrize("words", HISTORY_READERS, ids=" ".join)
def test_history_readers_offer_only_what_they_use(words: tuple[str, ...]):
    out = mlb(*words, "--help").stdout
    for flag in ("--profile", "--no-history", "--show-config", "throughput.min_steps"):
        assert flag not in out, f"mlb {' '.join(words)} --help offers {flag}"
    assert "--config" in out and "history.store" in out  # the store can still be chosen
    assert mlb(*words, "--no-history").exit_code == 2  # and is refused, not ignored


def test_history_rm_force_says_what_it_does_there():
    """--force confirms the deletion in `history rm`; elsewhere it lets an output be replaced."""
    flat = " ".join(mlb("history", "rm", "--help").stdout.replace("│", " ").split())
    assert "--force Delete: the confirmation rm needs." in flat
    assert "Overwrite existing output" not in flat
    assert "Overwrite existing output" in mlb("history", "list", "--help").stdout


@pytest.mark.parametrize("words", [("compare",), ("history", "gate"), ("throughput",)])
def test_result_writers_keep_their_options(words: tuple[str, ...]):
    out = mlb(*words, "--help").stdout
    assert "--profile" in out and "--no-history" in out and "--show-config" in out


# ---------------------------------------------------------------- tables


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("MLB_HISTORY", str(path))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    monkeypatch.setenv("MLB_GIT_COMMIT", "c0ffee0000")
    return path


def _replicated(rng: np.random.Generator, factor: float) -> Result:
    """A throughput-shaped result of 5 processes (so that compare gives verdicts), its backward
    stage `factor` times as slow."""
    r = Result(kind="throughput", environment={"blocking": {"device": "cpu"}})
    rep = [i % 5 for i in range(40)]
    for stage, base in (("forward", 0.03), ("backward", 0.055), ("optimizer", 0.007)):
        values = base * rng.lognormal(0.0, 0.08, 40) * (factor if stage == "backward" else 1)
        meta = {"group": "train.bs64", "role": "stage", "stage": stage}
        r.add_metric(Metric(f"train.bs64.{stage}", "s", False, values, replicate=rep, meta=meta))
    return r


def _pair(tmp_path: Path, factor: float) -> tuple[Path, Path]:
    rng = np.random.default_rng(13)
    old = write_result(_replicated(rng, 1.0), tmp_path / "old.json")
    return old, write_result(_replicated(rng, factor), tmp_path / "new.json")


def test_compare_table_keeps_long_values_whole(tmp_path: Path, store: Path):
    """+196.3% and its CI, p < 0.001 and a verdict with its note mark: all whole."""
    old, new = _pair(tmp_path, 3.0)
    res = mlb("compare", old, new, "--json", *FAST)
    assert res.exit_code == 1, res.output  # regressed
    assert_fits(res.stderr)
    doc = json.loads(res.stdout)["data"]
    backward = next(m for m in doc["metrics"] if m["metric"].endswith(".backward"))
    flat = " ".join(res.stderr.split())
    assert f"{100 * backward['change']:+.1f}%" in flat  # e.g. +196.3%, never "+196.…"
    assert "regressed" in flat and "<0.001" in flat


def test_env_check_table_never_folds_a_name(tmp_path: Path):
    res = mlb("env-check", "--no-history", "-o", tmp_path / "env.json")
    assert res.exit_code in (0, 1), res.output
    assert_fits(res.stderr)
    names = [
        c["name"] for c in json.loads((tmp_path / "env.json").read_text())["verdict"]["checks"]
    ]
    longest = max((n for n in names if not n.startswith("gpu.")), key=len)
    assert longest in res.stderr  # e.g. software.torchvision, not "software.torchvi/sion"


def test_history_tables_fit(tmp_path: Path, store: Path):
    files = [
        write(synthetic(i, created_at=stamp(i), slower={"backward": 3.0} if i > 3 else None),
              tmp_path / f"{i}.json")
        for i in range(7)
    ]  # fmt: skip
    assert mlb("history", "add", *files).exit_code == 0
    for args in (
        ("history", "list"),
        ("history", "show", "5"),
        ("history", "trend", "train.bs64.*", "-o", tmp_path / "t.png"),
        ("history", "check"),
    ):
        res = mlb(*args)
        assert res.exit_code == 0, res.output
        assert_fits(res.stderr)
    res = mlb("history", "gate", files[-1], "--last", "3", *FAST)
    assert_fits(res.stderr)


TINY = ["--set", "workload.model=builtin:tiny_cnn", "--set", "workload.image_size=32"]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlbaseline.workloads.synthetic import write_image_tree

    root = tmp_path_factory.mktemp("width") / "images"
    write_image_tree(root, 40, num_classes=2, size=16, seed=3)
    return root


def test_measuring_commands_tables_fit(tmp_path: Path, images: Path):
    """throughput (both tables), dataloader, subset and latency, as a person runs them."""
    quiet = [*TINY, "--no-history"]
    thr = tmp_path / "t.json"
    runs = {
        "throughput": ["throughput", *quiet, "--batch-sizes", "4", "--repeats", "1", "-o", thr],
        "dataloader": ["dataloader", images, "--workers", "0", "--batches", "3", "--no-history",
                       "--throughput-result", thr],
        "subset": ["subset", images, "-o", tmp_path / "sub", "--n", "10", "--no-history"],
        "latency": ["latency", *quiet, "--requests", "30", "--concurrency", "2"],
    }  # fmt: skip
    heads = {"throughput": "samples/s", "dataloader": "setting", "subset": "class"}
    heads |= {"latency": "p99"}
    for name, args in runs.items():
        res = mlb(*args)
        assert res.exit_code in (0, 1), (name, res.output)  # 1: a verdict (KL, SLA) failed
        assert heads[name] in res.stderr, (name, res.stderr)  # its table was printed
        assert_fits(res.stderr)


def test_fit_stacks_a_wide_table_keeping_keys_and_moving_secondary_columns():
    from rich.console import Console

    from mlbaseline.cli.tables import StackTable, fit

    table = StackTable(title="t", caption="the caption", keys=2, secondary=("note",))
    for header in ("bs", "part", "a", "b", "c", "note"):
        table.add_column(header, no_wrap=True)
    table.add_row("16", "train", "+196.3% [192.1, 212.7]", "1,234,567.8", "0.000123", "x" * 20)
    console = Console(width=50, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    parts = fit(console, table)
    tables = [p for p in parts if isinstance(p, StackTable)]
    assert len(tables) >= 2 and tables[0].title == "t" and tables[1].title is None
    assert all([str(c.header) for c in t.columns][:2] == ["bs", "part"] for t in tables)
    assert "note" not in [str(c.header) for c in tables[0].columns]  # secondary: moved below
    for part in parts:
        console.print(part)
    text = console.export_text()
    assert all(len(ln) <= 50 for ln in text.splitlines()) and "…" not in text
    assert "+196.3% [192.1, 212.7]" in text and "1,234,567.8" in text and "x" * 20 in text
    assert text.count("the caption") == 1
    assert [c.header for c in table.columns][-1] == "note"  # the caller's table is unchanged
    assert fit(Console(width=200), table) == [table]  # wide enough: as it was
