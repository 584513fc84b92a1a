"""Request engine of `mlb latency`: schedules, closed and open loop, per-request stage split.

Two engines produce the same `RequestRecord`s, so trimming and statistics are shared:
- `run_requests`: real client threads (`concurrent.futures.ThreadPoolExecutor`) calling a
  `Service` and reading a `Clock`;
- `simulate`: a discrete-event simulation of the same queue discipline over a
  `SimulatedService` that only says how long each stage of a request takes. It is
  deterministic and needs no threads: tests use it, and it answers "what would the tail look
  like" questions without a model.

Queue discipline (both engines):
- closed loop, N clients: each client sends its next request as soon as its previous answer is
  back. The scheduled time is the moment the client became ready, so `queue` holds only the
  engine's own hand-off. A stall stops that client from sending, which is why the closed loop
  under-reports what users would see (coordinated omission).
- open loop, N workers, rate λ: request i is scheduled at t0 + offsets[i] (Poisson arrivals on
  a seeded schedule). The first free worker takes the lowest untaken index (FIFO), waits until
  the scheduled time if it is still ahead, and sends. Latency counts from the *scheduled* time,
  so every request that had to wait behind a stall carries the wait.

Send order is index order in both: indices are handed out under one lock, in the order of the
actual send (closed loop; the send time is read under that lock) or of the schedule (open loop).
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any, Protocol

import numpy as np

from mlbaseline.measure.clock import Clock

STAGES = ("queue", "preprocess", "compute", "postprocess")
LOOPS = ("closed", "open")
NS = 1_000_000_000


class RequestError(Exception):
    """One failed request (HTTP error status, timeout, refused redirect, lost connection).

    The engine records it on the request and carries on: a failing endpoint is a measurement,
    not a crash. Any other exception from a service is a fault that stops the level."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status


class Client(Protocol):
    """One client's view of a service; created inside the client's own thread.

    The three calls are the request's stages, each timed by the engine: `prepare(index)`
    (input creation, host→device copy, connection set-up), `compute(prepared)` (the model or the
    server's answer, synchronised), `post(output)` (device→host, argmax, reading the body)."""

    def prepare(self, index: int) -> Any: ...

    def compute(self, prepared: Any) -> Any: ...

    def post(self, output: Any) -> Any: ...

    def close(self) -> None: ...


class Service(Protocol):
    """What the real engine measures: a factory of per-thread clients."""

    def client(self, index: int) -> Client: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StageTimes:
    """Durations of one simulated request's stages, seconds; `error` makes it a failed one."""

    preprocess: float
    compute: float
    postprocess: float
    error: str | None = None


class SimulatedService(ABC):
    """A service that only says how long request `index` takes when `in_flight` requests (this
    one included) are being served at its start. `simulate` turns that into records."""

    @abstractmethod
    def stage_times(self, index: int, in_flight: int) -> StageTimes: ...

    def describe(self) -> dict[str, Any]:
        return {"type": "simulated", "device": "simulated", "class": type(self).__name__}

    def close(self) -> None:  # noqa: B027 - an optional hook: most simulations hold nothing
        pass


class FunctionService(SimulatedService):
    """A `SimulatedService` from a callable `(index, in_flight) -> StageTimes`."""

    def __init__(self, fn: Callable[[int, int], StageTimes], name: str = "function") -> None:
        self.fn = fn
        self.name = name

    def stage_times(self, index: int, in_flight: int) -> StageTimes:
        return self.fn(index, in_flight)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "name": self.name}


# ---------------------------------------------------------------- plans and schedules


def rate_key(rate: float) -> str:
    """Metric-name-safe rate: 50 -> "r50", 12.5 -> "r12p5" (a dot would split the path)."""
    text = f"{rate:.3f}".rstrip("0").rstrip(".")
    return "r" + text.replace(".", "p")


def poisson_offsets_ns(n: int, rate: float, seed: int) -> np.ndarray:
    """Send offsets of a Poisson process at `rate` requests/s: exponential inter-arrival gaps
    from numpy's seeded generator, the first send at 0. Same seed, same schedule."""
    if n < 1 or rate <= 0:
        raise ValueError("poisson_offsets_ns: need n >= 1 and rate > 0")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    offsets = np.cumsum(gaps) - gaps[0]
    return np.round(offsets * NS).astype(np.int64)


@dataclass(frozen=True)
class LevelPlan:
    """One measured level: a closed loop of `concurrency` clients, or an open loop at `rate`
    served by `concurrency` workers."""

    loop: str
    concurrency: int
    requests: int
    rate: float | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ValueError(f"unknown loop {self.loop!r}")
        if self.loop == "open" and (self.rate is None or self.rate <= 0):
            raise ValueError("an open loop needs a rate > 0")
        if self.concurrency < 1 or self.requests < 1:
            raise ValueError("concurrency and requests must be >= 1")

    @property
    def key(self) -> str:
        if self.loop == "open":
            assert self.rate is not None
            return rate_key(self.rate)
        return f"c{self.concurrency}"

    @property
    def prefix(self) -> str:
        return f"latency.{self.key}"

    def offsets_ns(self) -> np.ndarray | None:
        if self.loop != "open":
            return None
        assert self.rate is not None
        return poisson_offsets_ns(self.requests, self.rate, self.seed)


# ---------------------------------------------------------------- records


@dataclass
class RequestRecord:
    """One request; times in ns relative to the level's start. `total_ns` runs from the
    scheduled send to the end of post-processing (or to the failure)."""

    index: int
    client: int
    scheduled_ns: int
    start_ns: int
    queue_ns: int
    preprocess_ns: int
    compute_ns: int
    postprocess_ns: int
    total_ns: int
    error: str | None = None
    detail: str | None = None
    status: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def residual_ns(self) -> int:
        """Total minus the stages: the engine's own time between its clock readings."""
        stages = self.queue_ns + self.preprocess_ns + self.compute_ns + self.postprocess_ns
        return self.total_ns - stages

    def seconds(self, part: str) -> float:
        """`part` in STAGES, "total" or "residual", in seconds."""
        if part == "residual":
            return self.residual_ns / NS
        return getattr(self, f"{part}_ns") / NS


@dataclass
class LevelRun:
    """What one level produced: records in send order and how it ended."""

    plan: LevelPlan
    records: list[RequestRecord]
    duration_ns: int
    engine: str  # "threads" | "simulated"
    interrupted: bool = False
    error: str | None = None  # a fault that stopped the level early
    warmup: dict[str, int] = field(default_factory=lambda: {"requests": 0, "errors": 0})


@dataclass(frozen=True)
class Trimmed:
    """Requests split by send order: warm-up head, measured middle, drain tail."""

    head: list[RequestRecord]
    kept: list[RequestRecord]
    tail: list[RequestRecord]


def trim_by_send_order(records: Sequence[RequestRecord], fraction: float) -> Trimmed:
    """Drop floor(n·fraction) requests at each end **by send order** (request index), never by
    value: the head is warm-up, the tail is drain (fewer clients still sending)."""
    if not 0 <= fraction < 0.5:
        raise ValueError("trim fraction must lie in [0, 0.5)")
    ordered = sorted(records, key=lambda r: r.index)
    n = len(ordered)
    k = int(n * fraction + 1e-9)  # 1000 · 0.05 is 50, not 49, despite binary rounding
    return Trimmed(ordered[:k], ordered[k : n - k], ordered[n - k :])


# ---------------------------------------------------------------- the real engine


def _serve(
    client: Client, cid: int, index: int, scheduled: int, start: int, t0: int, clock: Clock
) -> tuple[RequestRecord, int]:
    """Run the three stages of one request, each between its own pair of clock readings (the
    gaps between pairs are the residual). Returns the record and the absolute end time."""
    durations = [0, 0, 0]
    value: Any = index
    failure: RequestError | None = None
    end = start
    for k, stage in enumerate((client.prepare, client.compute, client.post)):
        begin = clock.now_ns()
        try:
            value = stage(value)
        except RequestError as exc:
            failure = exc
        end = clock.now_ns()
        durations[k] = end - begin
        if failure is not None:
            break
    record = RequestRecord(
        index=index,
        client=cid,
        scheduled_ns=scheduled - t0,
        start_ns=start - t0,
        queue_ns=start - scheduled,
        preprocess_ns=durations[0],
        compute_ns=durations[1],
        postprocess_ns=durations[2],
        total_ns=end - scheduled,
        error=failure.kind if failure else None,
        detail=failure.message if failure else None,
        status=failure.status if failure else _status_of(value),
    )
    return record, end


def _status_of(value: Any) -> int | None:
    """HTTP clients return (status, body bytes) from `post`; keep the status."""
    if isinstance(value, tuple) and value and isinstance(value[0], int):
        return value[0]
    return None


class _Dispatcher:
    """Hands out request indices in send order, under one lock, with their scheduled times."""

    def __init__(self, plan: LevelPlan, clock: Clock, t0: int, stop: threading.Event) -> None:
        self.plan, self.clock, self.t0, self.stop = plan, clock, t0, stop
        self.offsets = plan.offsets_ns()
        self.lock = threading.Lock()
        self.next = 0

    def take(self, ready: int) -> tuple[int, int, int | None] | None:
        """(index, scheduled, start or None) for a client ready at `ready`; None when done.
        Closed loop: scheduled = ready and the send time is read here, under the lock, so that
        index order is send order. Open loop: the caller waits for the scheduled time."""
        with self.lock:
            if self.stop.is_set() or self.next >= self.plan.requests:
                return None
            index = self.next
            self.next += 1
            if self.offsets is None:
                return index, ready, self.clock.now_ns()
            return index, self.t0 + int(self.offsets[index]), None


def _wait_until(
    clock: Clock, stop: threading.Event, wait_for: Callable[[float], Any], target: int
) -> bool:
    """Wait until `target` on the clock; False when `stop` was set first."""
    while not stop.is_set():
        remaining = target - clock.now_ns()
        if remaining <= 0:
            return True
        wait_for(remaining / NS)
    return False


def _drive(
    concurrency: int,
    client_loop: Callable[[int], None],
    records: list[RequestRecord],
    stop: threading.Event,
    on_progress: Callable[[int], None] | None,
    poll_s: float,
) -> tuple[bool, str | None]:
    """Run `concurrency` client threads to the end, reporting progress from this thread;
    returns (interrupted, the first client's fault or None)."""
    interrupted = False
    with ThreadPoolExecutor(concurrency, thread_name_prefix="mlb-latency") as pool:
        futures = [pool.submit(client_loop, cid) for cid in range(concurrency)]
        try:
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=poll_s, return_when=FIRST_EXCEPTION)
                if on_progress is not None:
                    on_progress(len(records))
                if any(f.done() and f.exception() is not None for f in futures):
                    stop.set()
        except KeyboardInterrupt:
            stop.set()
            interrupted = True
    error = None
    for future in futures:
        exc = future.exception()
        if isinstance(exc, KeyboardInterrupt):
            interrupted = True
        elif exc is not None and error is None:
            error = f"{type(exc).__name__}: {exc}"
    return interrupted, error


def run_requests(
    plan: LevelPlan,
    service: Service,
    clock: Clock,
    *,
    sleep: Callable[[float], Any] | None = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
    poll_s: float = 0.1,
) -> LevelRun:
    """Measure one level with `plan.concurrency` client threads (ThreadPoolExecutor).

    `sleep(seconds)` waits for an open-loop send time (default: `stop.wait`, so Ctrl-C wakes
    it); a test on a ManualClock passes `clock.advance`. `on_progress(done)` is called from
    this (the calling) thread. Ctrl-C stops the clients after their current request and
    returns the partial records with `interrupted=True`; a fault in a client stops the others
    and is returned in `error`."""
    stop = stop or threading.Event()
    wait_for = sleep or stop.wait
    lock = threading.Lock()
    records: list[RequestRecord] = []
    t0 = clock.now_ns()
    ends = [t0]
    dispatcher = _Dispatcher(plan, clock, t0, stop)

    def client_loop(cid: int) -> None:
        try:
            client = service.client(cid)
        except BaseException:
            stop.set()
            raise
        try:
            ready = clock.now_ns()
            while (job := dispatcher.take(ready)) is not None:
                index, scheduled, start = job
                if start is None:
                    if not _wait_until(clock, stop, wait_for, scheduled):
                        return
                    start = clock.now_ns()
                record, ready = _serve(client, cid, index, scheduled, start, t0, clock)
                with lock:
                    records.append(record)
                    ends.append(ready)
        except BaseException:
            stop.set()  # a fault or Ctrl-C in one client stops them all
            raise
        finally:
            client.close()

    interrupted, error = _drive(plan.concurrency, client_loop, records, stop, on_progress, poll_s)
    records.sort(key=lambda r: r.index)
    if on_progress is not None:
        on_progress(len(records))
    return LevelRun(plan, records, max(ends) - t0, "threads", interrupted, error)


def warm_up(service: Service, n: int) -> dict[str, int]:
    """`n` untimed requests on one client before a level (first-call allocations, lazy
    initialisation, connection set-up); failures are counted, not raised."""
    errors = 0
    if n <= 0:
        return {"requests": 0, "errors": 0}
    client = service.client(0)
    try:
        for index in range(n):
            try:
                client.post(client.compute(client.prepare(index)))
            except RequestError:
                errors += 1
    finally:
        client.close()
    return {"requests": n, "errors": errors}


# ---------------------------------------------------------------- the simulated engine


def simulate(
    plan: LevelPlan,
    service: SimulatedService,
    on_progress: Callable[[int], None] | None = None,
) -> LevelRun:
    """The same queue discipline as `run_requests`, in virtual time, without threads.

    Clients (closed loop) or workers (open loop) sit in a heap by the time they become free
    (ties: lowest id first). Request i goes to the earliest free one and starts at
    max(free time, scheduled time); `service.stage_times(i, in_flight)` says how long it takes,
    where in_flight counts the requests still running at its start, itself included."""
    offsets = plan.offsets_ns()
    free: list[tuple[int, int]] = [(0, cid) for cid in range(plan.concurrency)]
    running: list[int] = []  # end times of started requests
    records: list[RequestRecord] = []
    interrupted = False
    try:
        for index in range(plan.requests):
            ready, cid = heappop(free)
            scheduled = ready if offsets is None else int(offsets[index])
            start = max(ready, scheduled)
            while running and running[0] <= start:
                heappop(running)
            times = service.stage_times(index, len(running) + 1)
            stages = [round(s * NS) for s in (times.preprocess, times.compute, times.postprocess)]
            end = start + sum(stages)
            heappush(running, end)
            heappush(free, (end, cid))
            records.append(
                RequestRecord(
                    index=index,
                    client=cid,
                    scheduled_ns=scheduled,
                    start_ns=start,
                    queue_ns=start - scheduled,
                    preprocess_ns=stages[0],
                    compute_ns=stages[1],
                    postprocess_ns=stages[2],
                    total_ns=end - scheduled,
                    error=times.error,
                )
            )
    except KeyboardInterrupt:
        interrupted = True
    if on_progress is not None:
        on_progress(len(records))
    duration = max((r.scheduled_ns + r.total_ns for r in records), default=0)
    return LevelRun(plan, records, duration, "simulated", interrupted)


# ---------------------------------------------------------------- rates


def send_rate(times_ns: Sequence[int]) -> float | None:
    """Sends per second over the span of the given send times: (n - 1) / span."""
    if len(times_ns) < 2:
        return None
    span = (max(times_ns) - min(times_ns)) / NS
    return (len(times_ns) - 1) / span if span > 0 else math.inf


def default_late_threshold(rate: float) -> float:
    """A send is late when it starts more than min(1 ms, 10% of the mean inter-arrival time)
    after its schedule: 1 ms is well above the OS timer's wake-up jitter (tens of µs), and the
    10% cap keeps the threshold meaningful at rates above 100 requests/s."""
    return min(1e-3, 0.1 / rate)
