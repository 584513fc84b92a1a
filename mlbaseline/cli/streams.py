"""Output to a reader that may leave: `mlb throughput -o b.json 2>&1 | head -4` closes the pipe
after four lines, and the next write raises BrokenPipeError (Python ignores SIGPIPE). Raised in
the summary, it lost the run's result (the result is written after the summary) and left its
telemetry CSV behind, so a rerun refused without --force. The screen's output goes through
`ScreenStream`, which drops what nobody reads and lets the run finish and write its files."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO


def silence(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null: what it still holds (and the interpreter's
    flush at exit) goes nowhere instead of raising again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)


class ScreenStream:
    """stderr for the screen (rich's console writes here), looked up at each write (a test's
    captured stderr too); once its reader is gone, writes are dropped, not raised."""

    def __init__(self) -> None:
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                sys.stderr.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                sys.stderr.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self.gone = True
        silence(sys.stderr)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: stderr's own
        return getattr(sys.stderr, name)
