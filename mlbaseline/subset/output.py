"""Placing the subset on disk without ever touching the source or leaving a half-made subset.

- The destination is checked before any work: it may not be inside the source tree, nor
  contain it (both paths resolved); a non-empty destination needs `force`, and even then it
  is replaced only if it is an earlier subset (it holds a manifest), so `--force` can never
  delete an unrelated folder.
- Everything is built in a sibling temp folder `DIR.partial-XXXX` (same filesystem, so the
  final step is a rename). The manifest is written last; on any failure, Ctrl-C included, the
  partial folder is removed. An existing subset is replaced only after the new one is
  complete: old → `DIR.old-XXXX`, partial → DIR, then the old one is deleted.
- Files go from source to destination only: `shutil.copyfile` (copy), `os.link` (hardlink —
  the subset then shares inodes with the source, so editing a subset file in place would
  change the source; use copy when in doubt) or `os.symlink` to the resolved source path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from mlbaseline.errors import OutputError, OutputExistsError
from mlbaseline.safewrite import write_text
from mlbaseline.subset.manifest import MANIFEST_NAME

LINK_MODES = ("copy", "hardlink", "symlink")
PARTIAL_MARKER = ".mlb-partial"


def check_destination(source: Path, out: Path, force: bool) -> None:
    """Refuse a destination that is unsafe or occupied; call before doing any work."""
    src, dst = Path(source).resolve(), Path(out).resolve()
    if dst == src or dst.is_relative_to(src):
        raise OutputError(f"{out}: the output is inside the source tree {source}; choose another")
    if src.is_relative_to(dst):
        raise OutputError(f"{out}: the output folder contains the source tree {source}")
    out = Path(out)
    if not (out.exists() or out.is_symlink()):
        return
    if not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder")
    if not any(out.iterdir()):
        return
    if not force:
        raise OutputExistsError(f"{out}: not empty (use --force to replace an earlier subset)")
    if not (out / MANIFEST_NAME).is_file():
        raise OutputError(
            f"{out}: not empty and not an mlb subset (no {MANIFEST_NAME}); --force only "
            "replaces earlier subsets, remove this folder yourself"
        )


def place_file(src: Path, dst: Path, link: str) -> None:
    """Put one source file at `dst` (inside the partial folder); the source is only read."""
    if link == "copy":
        shutil.copyfile(src, dst)
    elif link == "hardlink":
        try:
            os.link(src, dst)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise OutputError(
                    f"{dst.parent}: hardlinks cannot cross filesystems; use --link copy"
                ) from None
            raise
    elif link == "symlink":
        os.symlink(Path(src).resolve(), dst)
    else:
        raise ValueError(f"unknown link mode {link!r}")


class PartialDir:
    """`with PartialDir(out) as p: …build in p.path…; p.commit()` — removed unless committed."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out).absolute()
        self.committed = False
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.path = Path(
                tempfile.mkdtemp(prefix=f"{self.out.name}.partial-", dir=self.out.parent)
            )
            write_text(self.path / PARTIAL_MARKER, "incomplete mlb subset\n")
        except OSError as exc:
            raise OutputError(f"{out}: cannot create the output ({exc.strerror or exc})") from None

    def __enter__(self) -> PartialDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)

    def commit(self) -> list[str]:
        """Move the finished subset into place; returns problems that did not stop it."""
        notes: list[str] = []
        try:
            (self.path / PARTIAL_MARKER).unlink()
            if self.out.is_dir() and any(self.out.iterdir()):
                old = Path(tempfile.mkdtemp(prefix=f"{self.out.name}.old-", dir=self.out.parent))
                os.replace(self.out, old)  # onto the fresh empty folder: atomic
                os.replace(self.path, self.out)
                self.committed = True
                try:
                    shutil.rmtree(old)
                except OSError as exc:
                    notes.append(f"could not delete the replaced subset {old}: {exc}")
            else:
                if self.out.is_dir():
                    with contextlib.suppress(OSError):
                        self.out.rmdir()
                os.replace(self.path, self.out)
                self.committed = True
        except OSError as exc:
            raise OutputError(f"{self.out}: cannot move the subset into place ({exc})") from None
        return notes
