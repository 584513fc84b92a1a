"""`measure.memory.RssMeter` against a fake /proc/self (a folder) and a fake RSS reader."""

from __future__ import annotations

from pathlib import Path

from mlbaseline.measure.memory import RssMeter

KIB = 1024


class FakeRss(RssMeter):
    """RSS readings from a list (the last one repeats)."""

    def __init__(self, proc: Path, rss: list[int]) -> None:
        super().__init__(proc)
        self.readings = list(rss)

    def _rss(self) -> int:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def _proc(tmp_path: Path, status: str | None) -> Path:
    (tmp_path / "clear_refs").write_text("")
    if status is not None:
        (tmp_path / "status").write_text(status)
    return tmp_path


def test_the_kernels_high_water_mark_is_the_peak_where_it_reads_back(tmp_path):
    m = FakeRss(_proc(tmp_path, "VmRSS:\t 200 kB\nVmHWM:\t 900 kB\n"), [100 * KIB, 150 * KIB])
    m.reset()
    m.update()
    assert m.kind == "cpu_rss_growth_hwm"
    assert m.peak_bytes() == 800 * KIB


def test_an_unreadable_vmhwm_after_reset_is_the_polled_peak_not_the_current_rss(tmp_path):
    # clear_refs takes the reset, but /proc/self/status has no VmHWM to read it back
    m = FakeRss(_proc(tmp_path, "VmRSS:\t 200 kB\n"), [100 * KIB, 500 * KIB, 200 * KIB])
    m.reset()
    m.update()  # the step's peak: 500 KiB
    m.update()
    assert m.kind == "cpu_rss_growth_sampled"
    assert m.peak_bytes() == 400 * KIB  # not 200 - 100 from the RSS at the end


def test_a_missing_status_file_polls_too(tmp_path):
    m = FakeRss(_proc(tmp_path, None), [100 * KIB, 300 * KIB, 120 * KIB])
    m.reset()
    m.update()
    m.update()
    assert (m.kind, m.peak_bytes()) == ("cpu_rss_growth_sampled", 200 * KIB)


def test_vmhwm_gone_after_a_good_reset_says_the_peak_is_sampled(tmp_path):
    proc = _proc(tmp_path, "VmHWM:\t 900 kB\n")
    m = FakeRss(proc, [100 * KIB, 300 * KIB])
    m.reset()
    (proc / "status").unlink()
    assert m.peak_bytes() == 200 * KIB
    assert m.kind == "cpu_rss_growth_sampled"  # no longer the kernel's mark
