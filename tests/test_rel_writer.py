"""Issue 25, item 2: every artefact kind written over a planted name (docs/RELIABILITY.md 5.1).

Each kind is written the way its command writes it, over: a symlink to a file outside the output
folder, a dangling symlink to an outside name, a character device node (1:3, /dev/null's numbers;
root only) and a FIFO. The outside file must stay as it was, no outside file may appear, a node
must stay the same node, and a refusal is one line. With force a link is replaced by a regular
file (the link itself, never its target); a node is refused with or without force.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_reliability import SETS, assert_one_error_line, tiny
from test_report import train_result
from typer.testing import CliRunner

from mlbaseline import folderlock
from mlbaseline.cli import app
from mlbaseline.cli.common import check_output
from mlbaseline.errors import MlbError
from mlbaseline.history.store import open_store
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.telemetry import TelemetrySampler
from mlbaseline.measure.trace import TraceWindow, write_trace
from mlbaseline.report.render import render_report
from mlbaseline.report.sections_history import HistoryView, TrendLine, trend_figure
from mlbaseline.results import Result, write_result
from mlbaseline.runners.children import write_child_config
from mlbaseline.subset.manifest import Manifest, write_manifest

runner = CliRunner()
OUTSIDE_TEXT = "outside: never written\n"

# ---------------------------------------------------------------- the artefact kinds


@dataclass(frozen=True)
class Kind:
    """How a command writes one artefact: `write(folder, force)` puts it at `folder/name`.
    `force_only`: the writer always replaces (its command checked the name before measuring)."""

    name: str
    write: Callable[[Path, bool], None]
    force_only: bool = False


def _report(folder: Path, force: bool) -> None:
    render_report([train_result(n=8)], folder, force=force)


def _telemetry(folder: Path, force: bool) -> None:
    path = folder / "t2.telemetry.csv"
    check_output(path, force)  # what `mlb throughput -o t2.json` checks before measuring
    with TelemetrySampler(NullProbe(), 3600.0, csv_path=path):
        pass


def _trend(folder: Path, force: bool) -> None:
    line = TrendLine("train.bs8.step", [0, 1], [0.1, 0.11], [0.09, 0.1], [0.11, 0.12])
    trend_figure(HistoryView("trend", "s", ["#1", "#2"], [line]), folder / "trend.png", force)


def _in_memory_csv(folder: Path, force: bool) -> None:
    sampler = TelemetrySampler(NullProbe(), 3600.0)
    sampler.sample_once()
    sampler.write_csv(folder / "own.telemetry.csv", force=force)


KINDS = {
    "result-json": Kind(
        "r.json", lambda d, f: write_result(Result(kind="throughput"), d / "r.json", f)
    ),
    "baseline-json": Kind(
        "baseline.json",
        lambda d, f: write_result(Result(kind="run"), d / "baseline.json", force=True),
        force_only=True,
    ),
    "telemetry-csv": Kind("t2.telemetry.csv", _telemetry),
    "api-telemetry-csv": Kind("own.telemetry.csv", _in_memory_csv),
    "report-markdown": Kind("baseline_report.md", _report),
    "report-png": Kind("figures/stages.png", _report),
    "trend-png": Kind("trend.png", _trend),
    "trace": Kind(
        "tp.trace.bs8.json",
        lambda d, f: write_trace(TraceWindow([], {}, 0, None), d / "tp.trace.bs8.json", [], 0.1),
        force_only=True,
    ),
    "manifest": Kind(
        "subset_manifest.json",
        lambda d, f: write_manifest(
            Manifest("proportional", 42, 0, [], {}, []), d / "subset_manifest.json"
        ),
        force_only=True,
    ),
    "child-config": Kind(
        "config.yaml", lambda d, f: write_child_config(tiny(), d, "config.yaml"), force_only=True
    ),
}

# ---------------------------------------------------------------- the planted names


@dataclass
class Planted:
    """A name of kind `kind` planted at `path`; `untouched()` checks that nothing was written
    through it. `reader`: our read end of a FIFO, so that a writer that wrongly opened it
    would not block the test (and what it wrote shows)."""

    path: Path
    outside: Path
    kind: str
    reader: int | None = None

    def __post_init__(self) -> None:
        self.before = os.lstat(self.path)

    def untouched(self) -> None:
        now = os.lstat(self.path)
        same = ("st_mode", "st_ino", "st_rdev")
        assert [getattr(now, a) for a in same] == [getattr(self.before, a) for a in same]
        self.outside_kept()

    def outside_kept(self) -> None:
        """The outside folder holds exactly what the test put there; the FIFO got nothing."""
        files = {p.name: p.read_text() for p in self.outside.iterdir()}
        assert files == ({"target.txt": OUTSIDE_TEXT} if self.kind == "link" else {})
        if self.reader is not None:
            with contextlib.suppress(BlockingIOError):  # empty, with no writer: EAGAIN
                assert os.read(self.reader, 1 << 16) == b""

    def close(self) -> None:
        if self.reader is not None:
            os.close(self.reader)


def _plant(kind: str, path: Path, outside: Path) -> Planted:
    path.parent.mkdir(parents=True, exist_ok=True)
    reader = None
    if kind == "link":
        (outside / "target.txt").write_text(OUTSIDE_TEXT)
        path.symlink_to(outside / "target.txt")
    elif kind == "dangling":
        path.symlink_to(outside / "created.txt")
    elif kind == "chardev":
        if os.geteuid() != 0:
            pytest.skip("a device node needs root (mknod)")
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod is not permitted here")
    else:
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    return Planted(path, outside, kind, reader)


TARGETS = ("link", "dangling", "chardev", "fifo")
NODE_WORDS = {"chardev": "(a character device)", "fifo": "(a FIFO)"}


def _refused(kind: Kind, folder: Path, force: bool, fragment: str) -> None:
    with pytest.raises(MlbError) as caught:
        kind.write(folder, force)
    message = str(caught.value)
    assert "\n" not in message and fragment in message, message


@pytest.mark.parametrize(
    ("kind", "target"),
    [pytest.param(k, t, id=f"{k}-{t}") for k in KINDS for t in TARGETS],
)
def test_artefact_over_a_planted_name(tmp_path, kind, target):
    spec = KINDS[kind]
    folder, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    path = folder / spec.name
    planted = _plant(target, path, outside)
    try:
        for force in (True,) if spec.force_only else (False, True):
            if target in NODE_WORDS:
                _refused(spec, folder, force, f"not a regular file {NODE_WORDS[target]}")
                planted.untouched()
            elif not force:
                _refused(spec, folder, force, "already exists (use --force to overwrite)")
                planted.untouched()
            else:
                spec.write(folder, force)
                st = os.lstat(path)
                assert stat.S_ISREG(st.st_mode) and st.st_size > 0  # the link itself replaced
                planted.outside_kept()
    finally:
        planted.close()


@pytest.mark.parametrize("target", [pytest.param(t, id=t) for t in ("chardev", "fifo")])
def test_telemetry_sampler_never_opens_a_node(tmp_path, target):
    """Handed a node directly (no command check first), the streamed CSV is refused as a
    warning in `csv_error` and the rows stay in memory; the node is not opened."""
    outside = tmp_path / "outside"
    outside.mkdir()
    path = tmp_path / "t.telemetry.csv"
    planted = _plant(target, path, outside)
    try:
        with TelemetrySampler(NullProbe(), 3600.0, csv_path=path) as sampler:
            sampler.sample_once()
        assert "not a regular file" in (sampler.csv_error or "")
        assert sampler.rows
        planted.untouched()
    finally:
        planted.close()


def test_discarded_csv_is_only_the_samplers_own(tmp_path):
    """A run that ends in bad input removes the CSV it made, but not a file that replaced it."""
    path = tmp_path / "t.telemetry.csv"
    with TelemetrySampler(NullProbe(), 3600.0, csv_path=path) as sampler:
        pass
    path.unlink()
    path.write_text("someone else's\n")
    sampler.discard_csv()
    assert path.read_text() == "someone else's\n"


# ---------------------------------------------------------------- end to end, through the CLI


def test_cli_throughput_force_replaces_a_planted_csv_link(tmp_path):
    """`mlb throughput -o out/t2.json --force` with a link planted at out/t2.telemetry.csv."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    planted = _plant("link", out / "t2.telemetry.csv", outside)
    res = runner.invoke(
        app, ["throughput", "-o", str(out / "t2.json"), "--force", "--quiet", *SETS]
    )
    assert res.exit_code == 0, res.stderr
    assert not (out / "t2.telemetry.csv").is_symlink()
    assert (out / "t2.telemetry.csv").read_text().startswith("t_s,")
    assert json.loads((out / "t2.json").read_text())["kind"] == "throughput"
    planted.outside_kept()


@pytest.mark.parametrize(
    "force", [pytest.param(f, id=i) for f, i in ((False, "plain"), (True, "force"))]
)
def test_cli_output_on_a_device_is_refused(tmp_path, force):
    """`-o NODE --force`, NODE a character device (as /dev/null): refused before measuring."""
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = _plant("chardev", tmp_path / "dev.json", outside)
    args = ["throughput", "-o", str(tmp_path / "dev.json"), *(["--force"] if force else []), *SETS]
    res = runner.invoke(app, args)
    assert_one_error_line(res, "dev.json: not a regular file (a character device); refusing")
    planted.untouched()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.json", "outside"]


def test_cli_dangling_link_without_force_creates_nothing(tmp_path):
    """A dangling link at the output: `already exists`, and no outside file appears."""
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = _plant("dangling", tmp_path / "r.json", outside)
    res = runner.invoke(app, ["throughput", "-o", str(tmp_path / "r.json"), *SETS])
    assert_one_error_line(res, "r.json: already exists (use --force")
    planted.untouched()


@pytest.mark.parametrize("target", [pytest.param(t, id=t) for t in TARGETS])
def test_history_store_over_a_planted_name(tmp_path, target):
    """The SQLite store is changed in place (no rename can help): a link or a node at its name
    is refused before SQLite opens it; no outside file is created or changed, a FIFO is never
    read (that would block)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = _plant(target, tmp_path / "history.sqlite", outside)
    try:
        with pytest.raises(MlbError) as caught:
            open_store(str(tmp_path / "history.sqlite"))
        message = str(caught.value)
        assert "\n" not in message and "not a regular file" in message, message
        assert "refusing to open it in place" in message
        planted.untouched()
    finally:
        planted.close()


@pytest.mark.parametrize("target", [pytest.param(t, id=t) for t in TARGETS])
def test_folder_lock_over_a_planted_name(tmp_path, target):
    """The lock file (its holder's pid is written into it) is opened in place: a link or a
    node planted at `DIR/.mlb.lock` is refused before it is opened; nothing outside changes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = _plant(target, tmp_path / "out" / folderlock.LOCK_NAME, outside)
    try:
        with pytest.raises(MlbError) as caught:
            folderlock.acquire(tmp_path / "out")
        assert "not a regular file" in str(caught.value) and "\n" not in str(caught.value)
        planted.untouched()
    finally:
        planted.close()
