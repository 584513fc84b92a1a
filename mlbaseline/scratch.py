"""Temporary trees that a killed run does not leave behind for good.

A run removes its scratch folders when it ends, Ctrl-C and SIGTERM included, but SIGKILL (or
the OOM killer) gives it no chance. So every scratch folder carries its owner's pid in its
name, `mlb-KIND-PID-XXXXXXXX`, and the next `mlb` command that starts removes the ones whose
owner is gone (`sweep()`): a SIGKILLed run's trees live until the next run, not forever.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "mlb-"
_NAME = re.compile(r"^mlb-[a-z]+-(\d+)-[A-Za-z0-9_]+$")


def make(kind: str, parent: Path | None = None) -> Path:
    """A new empty scratch folder `mlb-KIND-PID-…` in `parent` (default: the temp folder)."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{os.getpid()}-", dir=parent))


@contextlib.contextmanager
def folder(kind: str, parent: Path | None = None) -> Iterator[Path]:
    """`make(kind, parent)` for the block, removed at its end (an exception included)."""
    path = make(kind, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive, and not ours to judge
    return True


def owner(path: Path) -> int | None:
    """The pid in a scratch folder's name, or None when the name is not one of ours."""
    match = _NAME.match(path.name)
    return int(match.group(1)) if match else None


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove this user's scratch folders in `parent` (default: the temp folder) whose owner
    process is gone; returns them. Best effort: a folder that cannot be read is left."""
    root = Path(parent or tempfile.gettempdir())
    removed: list[Path] = []
    uid = os.getuid()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        pid = owner(Path(entry.name))
        if pid is None or pid == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or st.st_uid != uid or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed
