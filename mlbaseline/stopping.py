"""SIGTERM and SIGHUP as requests to stop cleanly, like Ctrl-C.

`timeout`, `docker stop`, CI runners and a closed terminal send SIGTERM or SIGHUP, not SIGINT.
While `stop_signals()` is active both raise `Terminated`, a `KeyboardInterrupt` subclass, so
every path that keeps its finished work on Ctrl-C keeps it on them too, with no change there.
The signal is remembered so that the exit code (128 + signal: 143, 129) and the result's note
can name it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from mlbaseline.errors import ExitCode

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []  # the stop signals this process got, in order


class Terminated(KeyboardInterrupt):
    """A stop signal other than Ctrl-C: unwinds every Ctrl-C path, carrying the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, _frame: FrameType | None) -> None:
    _received.append(signum)
    if len(_received) == 1:
        raise Terminated(signum)
    # a second signal while the first one's work is being saved: the save goes on (a
    # KeyboardInterrupt in a `finally` would lose it); a caller that must end at once uses SIGKILL


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Terminated` in the main thread inside the block (elsewhere,
    e.g. a test runner's worker thread, signals cannot be handled: nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {sig: signal.signal(sig, _raise) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def received() -> int | None:
    """The first stop signal this process got (SIGTERM, SIGHUP), or None (none, or Ctrl-C)."""
    return _received[0] if _received else None


def signal_of(exc: BaseException | None = None) -> int:
    """The signal behind an interruption: `exc`'s if it carries one, else the one received,
    else SIGINT (Ctrl-C)."""
    if isinstance(exc, Terminated):
        return exc.signum
    return received() or signal.SIGINT


def exit_code(exc: BaseException | None = None) -> int:
    """130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP: the shell's 128 + signal."""
    signum = signal_of(exc)
    return int(ExitCode.INTERRUPTED) if signum == signal.SIGINT else 128 + signum


def note(exc: BaseException | None = None) -> str:
    """The note an interrupted result gets: which signal stopped it."""
    signum = signal_of(exc)
    if signum == signal.SIGINT:
        return "interrupted by the user (Ctrl-C)"
    return f"stopped by {signal.Signals(signum).name}: the work finished before it is kept"


def annotate(result: Any) -> None:
    """Name the stop signal in an interrupted result's notes (once): its runner caught the
    interruption as a Ctrl-C and wrote its own note without knowing which signal it was."""
    if result.status != "interrupted" or received() is None:
        return
    text = note()
    if text not in result.notes:
        result.notes.append(text)


def reset() -> None:
    """Forget the signals received (a test in the same process, a fork server's child)."""
    _received.clear()


def signal_name(exc: BaseException | None = None) -> str:
    """'Ctrl-C', 'SIGTERM' or 'SIGHUP', for a one-line message."""
    signum = signal_of(exc)
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


LEFTOVER = "incomplete"
LEFTOVER_NOTE = (
    "the run that wrote it never finished (killed, crashed or out of disk): "
    "the file still says 'running'"
)


def as_read(status: str) -> str:
    """A result's status as a reader shows and keeps it: a file read back that still says
    `running` was left by a run that did not end (a running `mlb run` only writes it), so it
    is `incomplete`."""
    return LEFTOVER if status == "running" else status
