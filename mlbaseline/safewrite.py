"""The one writer of every file mlb writes: results, CSV, PNG, Markdown, traces, manifests.

`tests/test_one_writer.py` fails on any other write in the package. The rules, for every entry
point (we may run as root, in folders other users can write to):
- `lstat` the final name first and never follow a link there: a planted symlink must not make us
  write its target (outside the output folder), a dangling one must not create an outside file;
- refuse a name that is not a regular file (a device, FIFO, socket or folder), with or without
  `force`: replacing `/dev/null` with a regular file breaks the machine, writing into a FIFO
  blocks;
- without `force` an existing name (a dangling link too) is `already exists`; with `force` only
  a regular file or the link itself is replaced, never the link's target;
- write into a temp file in the target folder, fsync, then rename (or hard-link, so that a new
  file never overwrites one that appeared meanwhile): no reader sees half a file, a failure leaves
  nothing behind. The one exception is `open_stream`, for a file that must keep what was written
  when the process dies (the telemetry CSV, a child's log): it creates the name with
  `O_CREAT|O_EXCL|O_NOFOLLOW`, which never follows a link and never opens an existing node.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from mlbaseline.errors import MlbError, OutputError, OutputExistsError

__all__ = [
    "check_in_place",
    "check_target",
    "create_new",
    "move_into_place",
    "open_output",
    "open_stream",
    "write_bytes",
    "write_text",
]

_NODE_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)
# file systems that cannot hard-link: placing a new file is then only as safe as a check
_NO_HARDLINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


def _exists_error(path: Path) -> OutputExistsError:
    return OutputExistsError(f"{path}: already exists (use --force to overwrite)")


def _cannot(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"{path}: cannot write ({exc.strerror or exc})")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a parent that is a file, a name too long, no permission
        raise _cannot(path, exc) from None


def check_target(path: Path, force: bool) -> None:
    """Refuse `path` as an output unless it is free, or (with `force`) a regular file or a
    symlink, which a write then replaces as a name. Call it before measuring, too, so a run
    never ends at a refusal."""
    path = Path(path)
    st = _lstat(path)
    if st is None:
        return
    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
        if not force:
            raise _exists_error(path)
        return
    kind = next((name for test, name in _NODE_KINDS if test(st.st_mode)), "not a file")
    raise OutputError(f"{path}: not a regular file ({kind}); refusing to write over it")


def check_in_place(path: Path) -> None:
    """For a file that is opened and changed in place (the SQLite history store), where no
    rename can help: the name must be free or a regular file. A symlink is refused too (SQLite
    would create or change its target), and so is a node (reading a FIFO would block)."""
    path = Path(path)
    st = _lstat(path)
    if st is None or stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISLNK(st.st_mode):
        kind = "a symbolic link"
    else:
        kind = next((name for test, name in _NODE_KINDS if test(st.st_mode)), "not a file")
    raise OutputError(f"{path}: not a regular file ({kind}); refusing to open it in place")


def _mkparent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot(path, exc) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_quietly(path: str | Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _place_new(tmp: str | Path, path: Path) -> None:
    """Move `tmp` to `path` only if `path` does not exist yet, atomically: a hard link fails
    when the name exists (a dangling link included), so of two writers racing for one new
    file exactly one wins (an exists-check and a rename would let the second overwrite)."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError as exc:
        if exc.errno not in _NO_HARDLINKS:
            raise
        if _lstat(path) is not None:
            raise _exists_error(path) from None
        os.replace(tmp, path)
        return
    _remove_quietly(tmp)


def move_into_place(src: str | Path, path: Path, force: bool = False) -> Path:
    """Rename the finished file `src` (in the same file system) to `path` under the rules:
    `rename` replaces a name, never what a link at it points to."""
    path = Path(path)
    check_target(path, force)  # again, right before: narrows the window for a planted node
    if force:
        os.replace(src, path)
    else:
        _place_new(src, path)
    return path


@contextlib.contextmanager
def open_output(
    path: Path,
    force: bool = False,
    mode: str = "w",
    newline: str | None = None,
    encoding: str = "utf-8",
    sync: bool = True,
) -> Iterator[IO[Any]]:
    """`with open_output(p, force=…, mode="w"|"wb") as fh:` write, and `p` appears (renamed
    from a temp file in its folder) only when the block ends without an error. `sync=False`
    skips the fsync, for scratch files made again on every run (a generated image tree)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_output: mode {mode!r} is not 'w' or 'wb'")
    path = Path(path)
    check_target(path, force)
    _mkparent(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _cannot(path, exc) from None
    text = {} if "b" in mode else {"encoding": encoding, "newline": newline}
    try:
        with os.fdopen(fd, mode, **text) as fh:
            yield fh
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs are ordinary files
        move_into_place(tmp, path, force)
    except MlbError:
        _remove_quietly(tmp)
        raise
    except OSError as exc:
        _remove_quietly(tmp)
        raise _cannot(path, exc) from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def write_text(path: Path, text: str, force: bool = False) -> Path:
    """Write `text` (UTF-8) to `path` atomically; an existing file needs `force`."""
    with open_output(path, force=force) as fh:
        fh.write(text)
    return Path(path)


def write_bytes(path: Path, data: bytes, force: bool = False) -> Path:
    """Write `data` to `path` atomically; an existing file needs `force`."""
    with open_output(path, force=force, mode="wb") as fh:
        fh.write(data)
    return Path(path)


def create_new(path: Path, force: bool = False) -> int:
    """A write-only descriptor of `path`, made new here: with `force` a regular file or a
    link at the name is first removed (the link itself, never its target). `O_EXCL` makes
    the open fail on any name that reappeared, `O_NOFOLLOW` on a link."""
    path = Path(path)
    check_target(path, force)
    _mkparent(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        st = _lstat(path)
        if force and st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            os.unlink(path)
        return os.open(path, flags, 0o666)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError as exc:
        raise _cannot(path, exc) from None


def open_stream(
    path: Path,
    force: bool = False,
    mode: str = "w",
    newline: str | None = None,
    encoding: str = "utf-8",
) -> IO[Any]:
    """A file object on a new `path` (see `create_new`) for a file written as it goes, so that
    a crash keeps what was written: the one writer without temp file and rename."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_stream: mode {mode!r} is not 'w' or 'wb'")
    fd = create_new(path, force)
    text = {} if "b" in mode else {"encoding": encoding, "newline": newline}
    return os.fdopen(fd, mode, **text)
