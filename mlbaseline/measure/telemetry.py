"""Telemetry sampler: a background thread that records GPU, CPU, memory and I/O on a timeline.

Each sample is one row (one CSV line):
- `t_s` (seconds since the sampler started, on the sampler's clock);
- `cpu_pct` and `cpu{i}_pct` per logical core (psutil, system-wide, since the previous read);
- `rss_bytes`: resident memory of the watched processes and all their children (DataLoader and
  distributed workers included); `nprocs`: how many processes that covered;
- `read_bytes`: the `read_bytes` counters of `/proc/<pid>/io` summed over the same processes
  (bytes really fetched from storage; cumulative per process);
- per GPU (through a `GpuProbe`, so NVML only where there is a driver): `gpu{i}_kernel_active_pct`
  — NVML's "utilization", the share of the sample period in which *a kernel was running*; it is
  not SM occupancy or Tensor Core load —, memory used, temperature, power, SM clock and the active
  throttle reasons;
- `error`: empty, or what failed in this row. A failed read leaves its columns empty and the
  sampler goes on: gaps are data, not crashes.

How it reads, beside a measured loop that it must not slow: at 10 rows a second each syscall
counts (Python's text-mode `open()` + `read()` is nine syscalls and ~13 µs a file idle, psutil's
`Process.memory_info()` as much; beside a busy training loop on a 2-core VM one syscall costs
~9 µs). So the watched processes' `/proc/<pid>/statm` (RSS: its 2nd field × the page size, what
psutil's `memory_info().rss` is) and `/proc/<pid>/io` are read through file descriptors kept
open while the process is watched, one `pread` each a row (~2 µs idle); the per-core CPU %
stays psutil's (`cpu_percent`, every DEAR_EVERY_S). A kept descriptor names one process, not
a pid number: once that process has ended it reads ESRCH (never a later process given the same
pid), and is dropped. Measured beside a torch loop (one process watched, no GPU): a row's own
CPU time went from ~280 to ~125 µs, a row that also lists the tree and reads /proc/stat (every
DEAR_EVERY_S) from ~530 to ~295 µs; what is left is mostly the kernel's side of these reads
(~35 µs statm, ~60 µs io, ~110 µs /proc/stat there) and ~50 µs of the row itself.

The sampler's own cost is measured (time inside `sample_once` × the sampling rate = the share of
one CPU core it used) and reported by `overhead()`. Use it as a context manager; it stops on exit,
on an exception and on Ctrl-C. Tests drive `sample_once()` directly with a fake clock and probe.
"""

from __future__ import annotations

import atexit
import contextlib
import csv
import errno
import io
import os
import resource
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from mlbaseline.errors import MlbError
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.gpu import GpuProbe, GpuProbeError, NullProbe
from mlbaseline.safewrite import open_stream, write_text

# the sampler's dearer reads, the per-core CPU columns (`_cpu`) and the watched process tree
# (`_processes`), at most this often: the rows between carry the last (the tree's processes'
# RSS and I/O are read every row)
DEAR_EVERY_S = 0.5
GPU_FIELDS = (
    "kernel_active_pct",
    "memory_used_bytes",
    "temperature_c",
    "power_w",
    "sm_clock_mhz",
    "throttle",
)

LABELS = {
    "kernel_active_pct": (
        "kernel-active %: share of the sample period in which a kernel was running "
        "(NVML utilization.gpu); NOT SM occupancy or Tensor Core load"
    ),
    "cpu_pct": "system-wide CPU busy %, mean over logical cores (psutil)",
    "rss_bytes": "resident set size of the watched processes and all their children",
    "read_bytes": "read_bytes from /proc/<pid>/io, summed over the watched processes",
}


def _own_pid() -> list[int]:
    return [os.getpid()]


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """Which file this is: an inode number alone is reused at once by a file made after an
    unlink, so its size and modification time count too."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, stat.S_IFMT(st.st_mode))


# a read that finds the process gone: no /proc/<pid> any more (ENOENT), or a kept descriptor
# whose process has ended (ESRCH)
_GONE = (errno.ENOENT, errno.ESRCH)


def _fd_budget() -> int:
    """How many /proc descriptors to keep open: two per watched process, at most 256 and an
    eighth of the soft RLIMIT_NOFILE, so a training process that holds many (DataLoader
    workers share tensors through descriptors) is not pushed to EMFILE by the sampler; the
    processes past the budget are read by open + pread + close (~6 µs)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 256 if soft == resource.RLIM_INFINITY else max(0, min(256, soft // 8))


def _read_small(path: str) -> bytes:
    """A /proc file's bytes by os.open + read + close: three syscalls where Python's text-mode
    open() + read() makes nine (two fstat, two lseek, an ioctl, a second read) and decodes."""
    fd = os.open(path, os.O_RDONLY)
    chunks: list[bytes] = []
    try:
        # to an empty read (one read where the file is empty, as for most threads' children):
        # a seq_file can return a short read before its end; 4 KiB, as 64 KiB cost two brk
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


class _CpuStat:
    """Per-core busy % since the last read, from /proc/stat through a descriptor kept open:
    `psutil.cpu_percent(percpu=True)`'s figure (each field's rise, a fall read as none; all =
    the fields less guest and guest_nice, which user and nice count already; busy = all less
    idle and iowait; rounded to 0.1), read with one `pread` where psutil opens the file and
    builds a named tuple a core (~80 µs idle, most of the sampler's Python time at a dear row).
    The first read gives 0.0 a core (nothing to compare with). Always the real /proc/stat: the
    CPU columns are the machine's, whatever tree is watched."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self.path = path
        self._fd = -1
        self._last: list[list[int]] | None = None

    def read(self) -> list[float]:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(self._fd, 1 << 16, 0)  # the cpu lines come first
        except OSError:
            self.close()
            raise
        now = []
        for line in data.split(b"\n")[1:]:  # (the first: all cores together)
            if not line.startswith(b"cpu"):
                break
            fields = [int(x) for x in line.split()[1:11]]
            now.append(fields + [0] * (10 - len(fields)))
        last, self._last = self._last, now
        if last is None or len(last) != len(now):
            return [0.0] * len(now)
        out = []
        for before, after in zip(last, now, strict=True):
            rise = [max(0, b - a) for a, b in zip(before, after, strict=True)]
            total = sum(rise) - rise[8] - rise[9]
            busy = total - rise[3] - rise[4]
            out.append(round(busy / total * 100, 1) if total > 0 else 0.0)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


class _ProcFiles:
    """`/proc/<pid>/<name>` of the watched processes, each through a descriptor kept open while
    its pid is watched: one `pread` a row (~2 µs idle) where an open + read + close costs ~6 µs
    and psutil's `memory_info()` ~13 µs (each several times that beside a busy loop). A kept
    descriptor belongs to the process it was opened for: after that process ends it reads
    ESRCH, even once a new process has the pid, so it is closed and the file marked gone until
    the tree is listed again (`relist`), which reopens it for whatever process then has the
    pid. `keep=False` (a fake /proc tree in tests, whose files are replaced between rows: a
    kept descriptor would read the old file) opens and closes it every row, through the same
    code."""

    def __init__(self, root: str, keep: bool) -> None:
        self.root = root
        self.keep = keep
        self.budget = _fd_budget() if keep else 0
        self._fds: dict[tuple[int, str], int] = {}
        self._gone: set[tuple[int, str]] = set()

    def relist(self, pids: Iterable[int]) -> None:
        """The tree was listed again: forget what left it, and retry what was gone."""
        watched = set(pids)
        for key in [k for k in self._fds if k[0] not in watched]:
            with contextlib.suppress(OSError):
                os.close(self._fds.pop(key))
        self._gone.clear()

    def read(self, pid: int, name: str) -> bytes | None:
        """The file's bytes; None when the process is gone (not an error); an OSError else
        (the descriptor is closed, so the next row opens it again and tells again)."""
        key = (pid, name)
        if key in self._gone:
            return None
        fd = self._fds.pop(key, -1)
        try:
            if fd < 0:
                fd = os.open(f"{self.root}/{pid}/{name}", os.O_RDONLY)
            data = os.pread(fd, 4096, 0)  # statm and io are under 200 bytes
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            if exc.errno in _GONE:
                self._gone.add(key)
                return None
            raise
        if not data:  # nothing to read: the process is gone
            os.close(fd)
            self._gone.add(key)
            return None
        if len(self._fds) < self.budget:
            self._fds[key] = fd
        else:
            os.close(fd)
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:  # a sampler dropped without stop(): its descriptors with it
        with contextlib.suppress(Exception):
            self.close()


class TelemetrySampler:
    """Sample every `interval_s` seconds in a daemon thread (or call `sample_once()` yourself).

    `pids()` names the processes to watch (their children are added); default: this process.
    `csv_path`: rows are appended there as they are taken (a crash keeps the timeline so far);
    None keeps them in memory only (`rows`, `write_csv()` later)."""

    def __init__(
        self,
        probe: GpuProbe | None,
        interval_s: float,
        csv_path: Path | None = None,
        pids: Callable[[], Iterable[int]] | None = None,
        clock: Clock | None = None,
        proc_root: Path = Path("/proc"),
        gpu_indices: Sequence[int] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        import psutil

        self._psutil = psutil
        self.probe: GpuProbe = probe or NullProbe()
        self.interval_s = float(interval_s)
        self.csv_path = Path(csv_path) if csv_path is not None else None
        self.pids = pids or _own_pid
        self.clock = clock or PerfClock()
        self.proc_root = Path(proc_root)
        self.rows: list[dict[str, Any]] = []
        # label written into every row; `mlb run` sets it per phase so the report can slice
        self.phase = ""
        self.csv_error: str | None = None
        self._init_errors: list[str] = []
        self.gpu_indices = list(gpu_indices) if gpu_indices is not None else self._find_gpus()
        self._stat: _CpuStat | None = _CpuStat()
        self.ncpu = len(self._cpu_percent())  # also primes its counters
        self.columns = self._columns()
        self._durations_ns: list[int] = []
        # the real /proc only: a fake tree's files are replaced between rows (see _ProcFiles)
        self._files = _ProcFiles(str(self.proc_root), keep=self.proc_root == Path("/proc"))
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._cpu_read: list[float] | None = None  # the last per-core read
        self._tree: list[int] | None = None  # the last watched process tree
        self._dear_at: int | None = None  # when they were last read (DEAR_EVERY_S)
        self._dear = True  # this sample reads them
        self._cpu_ns: list[int] = []
        self._t0 = self.clock.now_ns()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fh: TextIO | None = None
        self._csv_id: tuple[int, ...] | None = None  # the CSV made here, when closed
        self._writer: Any = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ setup

    def _find_gpus(self) -> list[int]:
        ok, _reason = self.probe.available()
        if not ok:
            return []
        try:
            return [d.index for d in self.probe.devices()]
        except GpuProbeError as exc:
            self._init_errors.append(f"gpu devices: {exc}")
            return []

    def _columns(self) -> list[str]:
        cols = ["t_s", "cpu_pct", *(f"cpu{i}_pct" for i in range(self.ncpu))]
        cols += ["rss_bytes", "nprocs", "read_bytes"]
        for i in self.gpu_indices:
            cols += [f"gpu{i}_{f}" for f in GPU_FIELDS]
        return [*cols, "phase", "error"]

    # ------------------------------------------------------------ one sample

    def elapsed_s(self) -> float:
        """Seconds since the sampler was created, on the clock of the rows' `t_s` column."""
        return round((self.clock.now_ns() - self._t0) / 1e9, 6)

    def sample_once(self) -> dict[str, Any]:
        """Take one row, append it (and to the CSV); never raises."""
        start = self.clock.now_ns()
        cpu_start = time.thread_time_ns()
        row: dict[str, Any] = dict.fromkeys(self.columns, "")
        errors = self._init_errors
        self._init_errors = []
        row["t_s"] = round((start - self._t0) / 1e9, 6)
        self._dear = self._dear_at is None or start - self._dear_at >= DEAR_EVERY_S * 1e9
        if self._dear:
            self._dear_at = start
        for part in (self._cpu, self._processes, self._gpus):
            try:
                errors = errors + part(row)
            except Exception as exc:  # a reader bug must not end the timeline either
                errors = [*errors, f"{part.__name__.strip('_')}: {exc.__class__.__name__}: {exc}"]
        row["phase"] = self.phase
        row["error"] = "; ".join(errors)
        self._durations_ns.append(self.clock.now_ns() - start)
        self._cpu_ns.append(time.thread_time_ns() - cpu_start)
        with self._lock:
            self.rows.append(row)
            self._write_row(row)
        return row

    def _cpu(self, row: dict[str, Any]) -> list[str]:
        """Per-core busy % (the average since the last read), read at most every
        DEAR_EVERY_S and carried into the rows between (each the average over the window
        it lies in): /proc/stat costs ~30 µs with the other cores idle, ~290 µs while the
        measured loop keeps them busy (mostly the kernel's: it sums every interrupt counter),
        the sampler's largest cost beside that loop."""
        if self._dear or self._cpu_read is None:
            try:
                self._cpu_read = self._cpu_percent()
            except OSError as exc:  # blank until a read works again, not a stale figure
                self._cpu_read = None
                return [f"cpu: /proc/stat: {exc.strerror or exc}"]
        per_core = self._cpu_read
        for i, pct in enumerate(per_core[: self.ncpu]):
            row[f"cpu{i}_pct"] = pct
        row["cpu_pct"] = round(sum(per_core) / len(per_core), 2) if per_core else ""
        return []

    def _cpu_percent(self) -> list[float]:
        """Per-core busy % since the previous call (tests replace this to count the reads);
        psutil's where there is no /proc/stat."""
        if self._stat is not None:
            try:
                return self._stat.read()
            except FileNotFoundError:
                self._stat = None
        return list(self._psutil.cpu_percent(percpu=True))

    def _watched(self) -> list[int]:
        """The given pids and all their descendants, breadth first, without duplicates."""
        seen: dict[int, None] = {}
        queue = list(self.pids())
        while queue:
            pid = queue.pop(0)
            if pid in seen:
                continue
            seen[pid] = None
            queue += self._children(pid)
        return list(seen)

    def _children(self, pid: int) -> list[int]:
        """Direct children from /proc/<pid>/task/<tid>/children (cheap); psutil's full
        process-table scan only where the kernel lacks that file. Plain string paths and
        `_read_small`: this runs every DEAR_EVERY_S beside the measured loop (pathlib's
        objects cost ~10 µs a file there, text-mode open() three syscalls more)."""
        task_dir = f"{self.proc_root}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return []  # gone (or a fake pid in tests)
        kids: list[int] = []
        for tid in tids:
            try:
                kids += [int(x) for x in _read_small(f"{task_dir}/{tid}/children").split()]
            except FileNotFoundError:
                if not os.path.exists(f"{task_dir}/{tid}"):
                    continue  # the thread ended meanwhile
                return self._psutil_children(pid)
            except OSError:
                continue
        return kids

    def _psutil_children(self, pid: int) -> list[int]:
        try:
            return [c.pid for c in self._psutil.Process(pid).children()]
        except (self._psutil.NoSuchProcess, self._psutil.ZombieProcess):
            return []

    def _processes(self, row: dict[str, Any]) -> list[str]:
        """RSS and read_bytes summed over the watched tree (listed every DEAR_EVERY_S: a
        listing and a file per thread, each process), each process's statm and io read every
        row through `_ProcFiles`' kept descriptors. A process gone between listing and
        reading is not a gap and not counted."""
        errors: list[str] = []
        if self._dear or self._tree is None:
            self._tree = self._watched()
            self._files.relist(self._tree)  # closes what left the tree, reopens what was gone
        rss, seen, read, read_ok = 0, 0, 0, 0
        for pid in self._tree:
            value, err = self._rss(pid)
            if err:
                errors.append(err)
            elif value is not None:
                rss += value
                seen += 1
            value, err = self._read_bytes(pid)
            if err:
                errors.append(err)
            elif value is not None:
                read += value
                read_ok += 1
        row["rss_bytes"] = rss if seen else ""
        row["nprocs"] = seen
        row["read_bytes"] = read if read_ok else ""
        return errors

    def _rss(self, pid: int) -> tuple[int | None, str | None]:
        """(bytes, None) from statm's resident pages (psutil's memory_info().rss), (None, None)
        when the process is gone, or (None, error)."""
        path = f"{self.proc_root}/{pid}/statm"
        try:
            data = self._files.read(pid, "statm")
        except PermissionError:
            return None, f"rss: access denied for pid {pid}"
        except OSError as exc:
            return None, f"rss: {path}: {exc.strerror or exc}"
        if data is None:
            return None, None
        try:
            return int(data.split()[1]) * self._page, None
        except (IndexError, ValueError):
            return None, f"rss: {path}: no resident field"

    def _read_bytes(self, pid: int) -> tuple[int | None, str | None]:
        """(bytes, None), (None, None) when the process is gone, or (None, error)."""
        path = f"{self.proc_root}/{pid}/io"
        try:
            data = self._files.read(pid, "io")
        except OSError as exc:
            return None, f"io: {path}: {exc.strerror or exc}"
        if data is None:
            return None, None
        _, found, rest = (b"\n" + data).partition(b"\nread_bytes:")
        if not found:
            return None, f"io: {path}: no read_bytes field"
        try:
            return int(rest.split(b"\n", 1)[0]), None
        except ValueError:
            return None, f"io: {path}: bad read_bytes field"

    def _gpus(self, row: dict[str, Any]) -> list[str]:
        errors: list[str] = []
        for i in self.gpu_indices:
            try:
                s = self.probe.sample(i)
            except GpuProbeError as exc:
                errors.append(f"gpu{i}: {exc}")
                continue
            row[f"gpu{i}_kernel_active_pct"] = s.kernel_active_pct
            row[f"gpu{i}_memory_used_bytes"] = s.memory_used_bytes
            row[f"gpu{i}_temperature_c"] = _blank(s.temperature_c)
            row[f"gpu{i}_power_w"] = _blank(s.power_w)
            row[f"gpu{i}_sm_clock_mhz"] = _blank(s.sm_clock_mhz)
            row[f"gpu{i}_throttle"] = "|".join(s.throttle_reasons)
        return errors

    # ------------------------------------------------------------ CSV

    def _open_csv(self) -> None:
        if self.csv_path is None or self._fh is not None:
            return
        try:
            # streamed, not renamed at the end, so a crash keeps the rows so far; force: the
            # command refused an existing name without --force before measuring, and the
            # writer replaces only a regular file or a link itself, never a node or a target
            self._fh = open_stream(self.csv_path, force=True, newline="")
            self._writer = csv.DictWriter(self._fh, fieldnames=self.columns)
            self._writer.writeheader()
            for row in self.rows:
                self._writer.writerow(row)
        except MlbError as exc:  # a device or FIFO at the name: the rows stay in memory
            self.csv_error = str(exc)
            self._fh = self._writer = None
        except OSError as exc:
            self.csv_error = f"{self.csv_path}: {exc.strerror or exc}"
            self._fh = self._writer = None

    def discard_csv(self) -> None:
        """Remove the CSV this sampler created (a run that ends in bad input writes nothing),
        but only while the name still holds that file: never a node or file put there since."""
        self.stop()
        if self.csv_path is None or self._csv_id is None:
            return
        with contextlib.suppress(OSError):
            if _identity(os.lstat(self.csv_path)) == self._csv_id:
                os.unlink(self.csv_path)
        self._csv_id = None

    def _write_row(self, row: dict[str, Any]) -> None:
        if self._writer is None:
            return
        try:
            self._writer.writerow(row)
            self._fh.flush()  # type: ignore[union-attr]
        except OSError as exc:
            self.csv_error = f"{self.csv_path}: {exc.strerror or exc}"
            self._close_csv()

    def _close_csv(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.flush()
                self._csv_id = _identity(os.fstat(self._fh.fileno()))
            with contextlib.suppress(OSError):
                self._fh.close()
        self._fh = self._writer = None

    def to_csv_text(self) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns)
        writer.writeheader()
        writer.writerows(self.rows)
        return buf.getvalue()

    def write_csv(self, path: Path, force: bool = True) -> Path:
        """Write all rows taken so far to `path` (for a sampler that kept them in memory)."""
        return write_text(Path(path), self.to_csv_text(), force=force)

    # ------------------------------------------------------------ thread

    def start(self) -> TelemetrySampler:
        if self._thread is not None:
            return self
        self._open_csv()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="mlb-telemetry", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return self

    def _run(self) -> None:
        deadline = time.monotonic()
        while True:
            deadline += self.interval_s
            wait = deadline - time.monotonic()
            if wait < 0:  # a slow sample: skip the missed ticks rather than burst
                deadline, wait = time.monotonic(), 0.0
            if self._stop.wait(wait):
                return
            self.sample_once()

    def stop(self) -> None:
        """Stop the thread (idempotent) and close the CSV."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=max(5.0, 10 * self.interval_s))
            atexit.unregister(self.stop)
        with self._lock:
            self._close_csv()
        if thread is None or not thread.is_alive():
            # not under a thread still sampling (a join that timed out): a descriptor closed
            # under it could be reused by another open and read as this file; a later
            # sample_once() opens them again
            self._files.close()
            if self._stat is not None:
                self._stat.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ reports

    def overhead(self) -> dict[str, Any]:
        """The sampler's own cost: mean time per sample × samples per second = the share of one
        CPU core spent sampling."""
        n = len(self._durations_ns)
        mean = sum(self._durations_ns) / n / 1e9 if n else 0.0
        cpu = sum(self._cpu_ns) / n / 1e9 if n else 0.0
        return {
            "samples": n,
            "interval_s": self.interval_s,
            "mean_sample_s": mean,
            "max_sample_s": max(self._durations_ns) / 1e9 if n else 0.0,
            "overhead_fraction": mean / self.interval_s,
            "mean_sample_cpu_s": cpu,
            "cpu_overhead_fraction": cpu / self.interval_s,
            "meaning": (
                "wall time per sample × sampling rate (overhead_fraction; includes waiting for "
                "the GIL while the measured code runs) and the sampler thread's own CPU time × "
                "rate (cpu_overhead_fraction): shares of one CPU core"
            ),
        }

    @property
    def gaps(self) -> int:
        return sum(1 for r in self.rows if r["error"])

    def summary(self) -> dict[str, Any]:
        """Means and peaks of the timeline, for the result file."""
        out: dict[str, Any] = {
            "rows": len(self.rows),
            "gaps": self.gaps,
            "duration_s": self.rows[-1]["t_s"] - self.rows[0]["t_s"] if self.rows else 0.0,
            "cpu_pct_mean": _mean(self.rows, "cpu_pct"),
            "rss_bytes_max": _max(self.rows, "rss_bytes"),
            "read_bytes_delta": _delta(self.rows, "read_bytes"),
            "labels": LABELS,
            "gpus": {},
        }
        for i in self.gpu_indices:
            p = f"gpu{i}_"
            throttles = {t for r in self.rows for t in str(r[p + "throttle"]).split("|") if t}
            out["gpus"][str(i)] = {
                "kernel_active_pct_mean": _mean(self.rows, p + "kernel_active_pct"),
                "memory_used_bytes_max": _max(self.rows, p + "memory_used_bytes"),
                "temperature_c_max": _max(self.rows, p + "temperature_c"),
                "power_w_mean": _mean(self.rows, p + "power_w"),
                "sm_clock_mhz_mean": _mean(self.rows, p + "sm_clock_mhz"),
                "throttle_reasons_seen": sorted(throttles),
            }
        return out


def _blank(value: Any) -> Any:
    return "" if value is None else value


def _numbers(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in ("", None)]


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    xs = _numbers(rows, key)
    return sum(xs) / len(xs) if xs else None


def _max(rows: list[dict[str, Any]], key: str) -> float | None:
    xs = _numbers(rows, key)
    return max(xs) if xs else None


def _delta(rows: list[dict[str, Any]], key: str) -> float | None:
    xs = _numbers(rows, key)
    return xs[-1] - xs[0] if len(xs) >= 2 else None
