"""One run per output folder: an exclusive `flock` on `DIR/.mlb.lock`, holding the pid.

Two `mlb run -o DIR` at once would mix their files (one run's seed in one file, the other's in
the next, telemetry rows interleaved). The lock is taken before anything is written into the
folder and held to the end; a second command gets `Error: DIR is in use by pid N` (exit 2) and
writes nothing. The kernel drops a `flock` when its holder dies, SIGKILL included, so a lock is
never stale: a lock file left behind by a killed run is simply taken by the next one.

The file is removed when the lock is released (while still held); a process that opened the
old file in that moment finds it unlinked after its own `flock` and tries again, so two
holders never coexist. Within one process the lock is re-entrant (the command holds it through
the history record, the runner inside it takes it again): a second `flock` on a new descriptor
would otherwise conflict with the process's own first one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from mlbaseline.errors import OutputError
from mlbaseline.safewrite import check_in_place

LOCK_NAME = ".mlb.lock"
_held: dict[str, FolderLock] = {}  # this process's locks, by the folder's real path


class FolderInUseError(OutputError):
    """Another process holds the folder's lock."""


class FolderLock:
    """The lock of one folder; `release()` (or the `with` block's end) gives it up."""

    def __init__(self, folder: Path, fd: int, key: str, created: bool) -> None:
        self.folder = folder
        self.created = created  # made by acquire(): removed at release if nothing was written
        self.path = folder / LOCK_NAME
        self._fd: int | None = fd
        self._key = key
        self._depth = 1

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def release(self) -> None:
        self._depth -= 1
        if self._fd is None or self._depth > 0:
            return
        _held.pop(self._key, None)
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # still held: no other process can hold this inode's lock
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None
        if self.created:  # a command refused or failed before writing leaves no empty folder
            with contextlib.suppress(OSError):
                self.folder.rmdir()


def _holder(path: Path) -> str:
    """'pid N' from the lock file, or a description when it cannot be read yet."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "another mlb process"


def _open(path: Path) -> int:
    # the pid is written into this file: a device or FIFO planted at the name is never opened
    # (opening some devices acts on them), nor is a link followed
    check_in_place(path)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{path}: is a symbolic link; refusing to use it as a lock") from None
        raise OutputError(f"{path.parent}: cannot lock the folder ({exc.strerror})") from None


def acquire(folder: Path) -> FolderLock:
    """Create `folder` if needed and lock it for this process; FolderInUseError (exit 2) when
    another process holds it."""
    folder = Path(folder)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{folder}: cannot create the folder ({exc.strerror})") from None
    key = os.path.realpath(folder)
    if key in _held:  # this process holds it already
        _held[key]._depth += 1
        return _held[key]
    path = folder / LOCK_NAME
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderInUseError(f"{folder} is in use by {_holder(path)}") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed this file as it let go: lock the one there now
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[key] = FolderLock(folder, fd, key, created)
    return _held[key]


@contextlib.contextmanager
def locked(folder: Path | None) -> Iterator[FolderLock | None]:
    """`acquire(folder)` for the block; nothing when `folder` is None."""
    if folder is None:
        yield None
        return
    lock = acquire(folder)
    try:
        yield lock
    finally:
        lock.release()


def is_lock_file(path: Path) -> bool:
    """Whether `path` is a folder's lock file (not an output: an emptiness check skips it)."""
    return path.name == LOCK_NAME
