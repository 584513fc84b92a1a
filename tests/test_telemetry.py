"""Telemetry sampler: fake NVML that fails mid-run, fake clock, fake /proc; no sleeps."""

from __future__ import annotations

import csv
import threading
from pathlib import Path

import pytest

from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.gpu import GpuInfo, GpuProbeError, GpuSample, NullProbe
from mlbaseline.measure.telemetry import TelemetrySampler


class FakeProbe:
    """Two GPUs; `sample` fails for calls listed in `fail_on` (1-based) and advances the fake
    clock by `cost_s` per call, to model NVML's latency."""

    def __init__(self, clock: ManualClock | None = None, fail_on=(), cost_s: float = 0.0):
        self.clock, self.fail_on, self.cost_s = clock, set(fail_on), cost_s
        self.calls = 0
        self.sampled = threading.Event()

    def available(self):
        return True, ""

    def driver_version(self):
        return "550.1"

    def devices(self):
        return [GpuInfo(i, "Fake GPU", f"GPU-{i}", 16 << 30, 1 << 30, 40.0) for i in (0, 1)]

    def sample(self, index: int) -> GpuSample:
        self.calls += 1
        if self.clock is not None:
            self.clock.advance(self.cost_s)
        if self.calls >= 6:
            self.sampled.set()
        if self.calls in self.fail_on:
            raise GpuProbeError("nvmlDeviceGetUtilizationRates: GPU is lost")
        return GpuSample(index, 87.0, 2 << 30, 55.0, 180.5, 1410.0, ["sw_power_cap"])

    def close(self):
        pass


def test_gpu_failure_mid_run_is_a_gap_and_sampling_goes_on(tmp_path):
    clock = ManualClock()
    probe = FakeProbe(fail_on={3, 4})  # the 2nd sample (both GPUs) fails
    path = tmp_path / "tele.csv"
    sampler = TelemetrySampler(probe, 0.1, csv_path=path, clock=clock)
    sampler._open_csv()  # what start() does, without the thread
    for _ in range(4):
        sampler.sample_once()
        clock.advance(0.1)
    sampler.stop()
    rows = sampler.rows
    assert len(rows) == 4
    assert rows[0]["error"] == "" and rows[0]["gpu0_kernel_active_pct"] == 87.0
    assert "gpu0: nvmlDeviceGetUtilizationRates: GPU is lost" in rows[1]["error"]
    assert "gpu1:" in rows[1]["error"]
    assert rows[1]["gpu0_kernel_active_pct"] == "" and rows[1]["gpu1_power_w"] == ""
    assert rows[1]["cpu_pct"] != ""  # the CPU side of a gap row is still there
    assert rows[2]["error"] == "" and rows[3]["gpu1_sm_clock_mhz"] == 1410.0
    assert sampler.gaps == 1
    assert [r["t_s"] for r in rows] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    with path.open() as fh:
        back = list(csv.DictReader(fh))
    assert len(back) == 4 and back[1]["error"].startswith("gpu0:")
    assert back[0]["gpu0_throttle"] == "sw_power_cap"
    assert "gpu0_kernel_active_pct" in back[0]


def test_summary_labels_kernel_active_not_sm_load():
    probe = FakeProbe()
    sampler = TelemetrySampler(probe, 0.1, clock=ManualClock())
    sampler.sample_once()
    summary = sampler.summary()
    assert summary["gpus"]["0"]["kernel_active_pct_mean"] == 87.0
    assert summary["gpus"]["1"]["throttle_reasons_seen"] == ["sw_power_cap"]
    assert "kernel-active" in summary["labels"]["kernel_active_pct"]
    assert "NOT SM" in summary["labels"]["kernel_active_pct"]


def test_overhead_is_time_per_sample_times_rate():
    clock = ManualClock()
    probe = FakeProbe(clock=clock, cost_s=0.0005)  # 2 GPUs → 1 ms per sample
    sampler = TelemetrySampler(probe, 0.1, clock=clock)
    for _ in range(5):
        sampler.sample_once()
    o = sampler.overhead()
    assert o["samples"] == 5
    assert o["mean_sample_s"] == pytest.approx(0.001)
    assert o["overhead_fraction"] == pytest.approx(0.01)


def test_device_listing_failure_is_recorded_not_raised():
    class Broken(FakeProbe):
        def devices(self):
            raise GpuProbeError("nvmlDeviceGetCount: driver gone")

    sampler = TelemetrySampler(Broken(), 0.1, clock=ManualClock())
    row = sampler.sample_once()
    assert sampler.gpu_indices == []
    assert "driver gone" in row["error"]
    assert not any(c.startswith("gpu") for c in sampler.columns)
    assert sampler.sample_once()["error"] == ""  # reported once, then clean rows


def test_no_gpu_means_no_gpu_columns():
    sampler = TelemetrySampler(NullProbe(), 0.1, clock=ManualClock())
    row = sampler.sample_once()
    assert row["error"] == ""
    assert row["rss_bytes"] > 0 and row["nprocs"] >= 1
    assert sum(1 for c in sampler.columns if c.startswith("cpu") and c != "cpu_pct") == sampler.ncpu


def fake_proc(root: Path, pid: int, read_bytes: int | None) -> None:
    (root / str(pid)).mkdir(parents=True)
    if read_bytes is not None:
        (root / str(pid) / "io").write_text(f"rchar: 5\nread_bytes: {read_bytes}\nwrite_bytes: 0\n")


def test_read_bytes_summed_over_processes_and_unreadable_is_a_gap(tmp_path):
    fake_proc(tmp_path, 4000001, 1000)
    fake_proc(tmp_path, 4000002, 234)
    sampler = TelemetrySampler(
        NullProbe(), 0.1, pids=lambda: [4000001, 4000002], clock=ManualClock(), proc_root=tmp_path
    )
    row = sampler.sample_once()
    assert row["read_bytes"] == 1234 and row["error"] == ""
    # an unreadable io file (a directory in its place: fails even for root, like EACCES would)
    (tmp_path / "4000002" / "io").unlink()
    (tmp_path / "4000002" / "io").mkdir()
    row = sampler.sample_once()
    assert row["read_bytes"] == 1000
    assert "io:" in row["error"] and "4000002" in row["error"]


def test_processes_that_exited_are_skipped_silently(tmp_path):
    sampler = TelemetrySampler(
        NullProbe(), 0.1, pids=lambda: [4000003], clock=ManualClock(), proc_root=tmp_path
    )
    row = sampler.sample_once()
    assert row["error"] == "" and row["nprocs"] == 0 and row["rss_bytes"] == ""


def test_real_proc_io_of_this_process():
    sampler = TelemetrySampler(NullProbe(), 0.1, clock=ManualClock())
    row = sampler.sample_once()
    assert isinstance(row["read_bytes"], int) or "io:" in row["error"]


def test_a_reader_bug_becomes_a_gap(monkeypatch):
    sampler = TelemetrySampler(NullProbe(), 0.1, clock=ManualClock())

    def broken(row):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(sampler, "_cpu", broken)
    row = sampler.sample_once()
    assert "ZeroDivisionError" in row["error"] and row["rss_bytes"] != ""


def test_thread_samples_and_stops_cleanly(tmp_path):
    probe = FakeProbe()
    path = tmp_path / "t.csv"
    with TelemetrySampler(probe, 0.001, csv_path=path) as sampler:
        assert probe.sampled.wait(timeout=30)  # 3 samples × 2 GPUs; no time is asserted
        assert sampler.running
    assert not sampler.running
    n = len(sampler.rows)
    assert n >= 3
    with path.open() as fh:
        assert len(list(csv.DictReader(fh))) == n


def test_exception_inside_the_block_stops_the_thread():
    sampler = TelemetrySampler(NullProbe(), 0.001)
    with pytest.raises(KeyboardInterrupt), sampler:
        raise KeyboardInterrupt
    assert not sampler.running


def test_unwritable_csv_keeps_rows_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    sampler = TelemetrySampler(NullProbe(), 0.1, csv_path=blocker / "t.csv", clock=ManualClock())
    sampler._open_csv()
    sampler.sample_once()
    assert sampler.csv_error is not None and len(sampler.rows) == 1


def test_write_csv_later(tmp_path):
    sampler = TelemetrySampler(FakeProbe(fail_on={1}), 0.1, clock=ManualClock())
    sampler.sample_once()
    sampler.sample_once()
    out = sampler.write_csv(tmp_path / "later.csv")
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and rows[0]["error"] and not rows[1]["error"]


def test_interval_must_be_positive():
    with pytest.raises(ValueError):
        TelemetrySampler(NullProbe(), 0)


def test_children_found_through_proc_task_children(tmp_path):
    """Descendants from /proc/<pid>/task/<tid>/children, breadth first, each counted once."""
    for pid, kids in {4100: "4101 4102", 4101: "4103", 4102: "", 4103: ""}.items():
        fake_proc(tmp_path, pid, 100)
        task = tmp_path / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(kids)
    (tmp_path / "4100" / "task" / "4199").mkdir()  # a second thread, with a child too
    (tmp_path / "4100" / "task" / "4199" / "children").write_text("4103")
    sampler = TelemetrySampler(
        NullProbe(), 0.1, pids=lambda: [4100], clock=ManualClock(), proc_root=tmp_path
    )
    watched = sampler._watched()
    assert watched[0] == 4100 and sorted(watched) == [4100, 4101, 4102, 4103]
    assert sampler.sample_once()["read_bytes"] == 400


def test_the_cpu_columns_and_the_tree_are_read_every_dear_every_s(tmp_path):
    """/proc/stat is the sampler's dearest read beside a busy loop: read at most every
    DEAR_EVERY_S, each row between carrying the last read (the average over its window); the
    process tree too (a child is found within DEAR_EVERY_S), its processes' figures each row."""
    from mlbaseline.measure.telemetry import DEAR_EVERY_S

    clock = ManualClock()
    sampler = TelemetrySampler(NullProbe(), 0.1, pids=lambda: [], clock=clock, proc_root=tmp_path)
    reads = []

    def counting():
        reads.append(clock.now_ns())
        return [10.0 * len(reads)] * sampler.ncpu

    sampler._cpu_percent = counting
    rows = []
    for _ in range(12):
        rows.append(sampler.sample_once())
        clock.advance(0.1)
    assert len(reads) == 3  # at 0, 0.5 and 1.0 s (the interval 0.1 s)
    assert [r["cpu_pct"] for r in rows] == [10.0] * 5 + [20.0] * 5 + [30.0] * 2
    assert DEAR_EVERY_S == 0.5
    fake_proc(tmp_path, 4200, 7)
    sampler.pids = lambda: [4200]
    seen = []
    for _ in range(6):
        seen.append(sampler.sample_once()["read_bytes"])
        clock.advance(0.1)
    assert seen[0] == "" and seen[-1] == 7  # found at the next tree read, within 0.5 s


def test_real_proc_rss_and_io_through_kept_descriptors_dropped_when_the_process_ends():
    """On the real /proc each watched process's statm and io stay open between rows: RSS is
    what psutil reports; once the process has ended its descriptors read ESRCH, which is not
    a gap, and are closed; stop() closes the rest."""
    import subprocess
    import sys

    import psutil

    code = "import time; print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"  # RSS settled
        clock = ManualClock()
        sampler = TelemetrySampler(NullProbe(), 0.1, pids=lambda: [child.pid], clock=clock)
        row = sampler.sample_once()
        io_ok = isinstance(row["read_bytes"], int)  # a sandbox may close /proc/<pid>/io
        assert row["nprocs"] == 1 and (row["error"] == "" if io_ok else "io:" in row["error"])
        assert row["rss_bytes"] == psutil.Process(child.pid).memory_info().rss
        kept = dict(sampler._files._fds)
        assert set(kept) == {(child.pid, "statm")} | ({(child.pid, "io")} if io_ok else set())
        assert sampler.sample_once()["nprocs"] == 1 and sampler._files._fds == kept
    finally:
        child.kill()
        child.communicate()
    row = sampler.sample_once()  # between listings: the kept descriptors read ESRCH
    assert row["error"] == "" and row["nprocs"] == 0 and row["rss_bytes"] == ""
    assert row["read_bytes"] == "" and sampler._files._fds == {}
    clock.advance(0.5)  # listed again: the pid is gone, nothing is opened
    assert sampler.sample_once()["nprocs"] == 0 and sampler._files._fds == {}
    other = TelemetrySampler(NullProbe(), 0.1, clock=ManualClock())
    other.sample_once()
    assert other._files._fds
    other.stop()
    assert other._files._fds == {}
    assert other.sample_once()["nprocs"] >= 1  # reopened after a stop


def test_a_kept_descriptor_that_reads_nothing_is_dropped_and_reopened_at_the_next_listing(
    tmp_path,
):
    """The kept-descriptor bookkeeping on a fake tree (whose files are rewritten in place
    here, the same inode, as a kept descriptor sees them): an empty read is a process gone,
    not counted until the tree is listed again; an error closes the descriptor, so every row
    tells it again; a pid that leaves the tree has its descriptors closed."""
    from mlbaseline.measure.telemetry import _ProcFiles

    for pid in (4300, 4301):
        fake_proc(tmp_path, pid, 10)
        (tmp_path / str(pid) / "statm").write_text("100 3 2 1 0 1 0\n")
    clock = ManualClock()
    watched = [4300, 4301]
    sampler = TelemetrySampler(
        NullProbe(), 0.1, pids=lambda: watched, clock=clock, proc_root=tmp_path
    )
    sampler._files = _ProcFiles(str(tmp_path), keep=True)
    page = sampler._page
    row = sampler.sample_once()
    assert (row["rss_bytes"], row["nprocs"], row["read_bytes"]) == (6 * page, 2, 20)
    assert len(sampler._files._fds) == 4
    (tmp_path / "4301" / "statm").write_text("")  # in place: the kept descriptor sees it
    (tmp_path / "4301" / "io").write_text("")
    row = sampler.sample_once()
    assert (row["rss_bytes"], row["nprocs"], row["read_bytes"], row["error"]) == (
        3 * page,
        1,
        10,
        "",
    )
    assert len(sampler._files._fds) == 2
    (tmp_path / "4301" / "statm").write_text("100 5 2 1 0 1 0\n")
    (tmp_path / "4301" / "io").write_text("read_bytes: 7\n")
    assert sampler.sample_once()["nprocs"] == 1  # gone until the next listing
    clock.advance(0.5)
    row = sampler.sample_once()
    assert (row["rss_bytes"], row["nprocs"], row["read_bytes"]) == (8 * page, 2, 17)
    (tmp_path / "4300" / "io").write_text("rchar: 5\n")
    for _ in range(2):
        row = sampler.sample_once()
        assert "io:" in row["error"] and "4300/io: no read_bytes field" in row["error"]
        assert row["read_bytes"] == 7 and row["nprocs"] == 2
    watched.remove(4301)
    clock.advance(0.5)
    assert sampler.sample_once()["nprocs"] == 1
    assert set(sampler._files._fds) == {(4300, "statm"), (4300, "io")}
    sampler.stop()
    assert sampler._files._fds == {}


def test_rss_from_statm_and_its_errors_on_a_fake_tree(tmp_path):
    fake_proc(tmp_path, 4400, 1)
    (tmp_path / "4400" / "statm").write_text("100 4 2 1 0 1 0\n")
    sampler = TelemetrySampler(
        NullProbe(), 0.1, pids=lambda: [4400], clock=ManualClock(), proc_root=tmp_path
    )
    row = sampler.sample_once()
    assert row["rss_bytes"] == 4 * sampler._page and row["nprocs"] == 1
    (tmp_path / "4400" / "statm").write_text("garbage\n")
    row = sampler.sample_once()
    assert "rss:" in row["error"] and "4400/statm" in row["error"] and row["rss_bytes"] == ""


def test_the_per_core_cpu_figure_is_psutils_from_one_pread(tmp_path):
    """`_CpuStat` reads /proc/stat through a kept descriptor and gives psutil's per-core busy
    %: each field's rise (a fall counts as none), guest and guest_nice left out of the total
    (user and nice hold them), idle and iowait out of busy; the first read 0.0 a core."""
    from mlbaseline.measure.telemetry import _CpuStat

    stat = tmp_path / "stat"
    head = "cpu  1 1 1 1 1 1 1 1 0 0\n"
    stat.write_text(head + "cpu0 100 0 50 800 50 0 0 0 0 0\ncpu1 10 0 10 100 5 0 0 0 0 0\nintr 9\n")
    reader = _CpuStat(str(stat))
    assert reader.read() == [0.0, 0.0]
    # cpu0: user +60 (20 of it guest), system +20, idle +100, iowait +20 -> busy 80 of 200;
    # cpu1: iowait falls (counted as no rise), idle +30, user +10 -> busy 10 of 40
    stat.write_text(
        head + "cpu0 160 0 70 900 70 0 0 0 20 0\ncpu1 20 0 10 130 1 0 0 0 0 0\nintr 9\n"
    )
    assert reader.read() == [40.0, 25.0]  # (the kept descriptor: the same file, rewritten)
    reader.close()


def test_the_per_core_cpu_figure_has_a_value_for_each_core_psutil_sees():
    import psutil

    from mlbaseline.measure.telemetry import _CpuStat

    reader = _CpuStat()
    try:
        ours = reader.read()
        assert len(ours) == len(psutil.cpu_percent(percpu=True)) > 0
        assert all(0.0 <= v <= 100.0 for v in reader.read())
    finally:
        reader.close()


def test_without_proc_stat_the_cpu_columns_are_psutils(tmp_path, monkeypatch):
    from mlbaseline.measure import telemetry

    monkeypatch.setattr(telemetry._CpuStat, "__init__", _no_proc_stat)
    sampler = TelemetrySampler(NullProbe(), 0.1, pids=lambda: [], clock=ManualClock())
    assert sampler._stat is None and sampler.ncpu > 0
    row = sampler.sample_once()
    assert row["cpu_pct"] != "" and "cpu" not in row["error"]


def _no_proc_stat(self, path: str = "") -> None:
    self.path, self._fd, self._last = str(Path("/nonexistent") / "stat"), -1, None
