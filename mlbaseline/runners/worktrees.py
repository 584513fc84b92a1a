"""Temporary `git worktree`s of the current repository at two refs, for `mlb ab --ref-a/--ref-b`.

Each ref gets a detached worktree in one scratch folder (`scratch.make("worktree")`, named by
this process's pid, so a SIGKILLed run's folder is swept by the next `mlb` that starts). They
are removed when the block ends, whatever ends it: an error, Ctrl-C, or SIGTERM/SIGHUP (which
`stopping.stop_signals` turns into the same `KeyboardInterrupt`). The removal itself runs with
those signals blocked, so a second Ctrl-C cannot cut it halfway and leave a registered worktree
behind; a signal that came meanwhile is delivered when it is done. `git worktree remove
--force` unregisters each one, `git worktree prune` forgets any whose folder is already gone.

Each arm runs in the same sub-folder of its worktree as the caller's working directory is of
the repository, so `cd proj/train && mlb ab --ref-a main --ref-b HEAD -- python train.py`
finds `train.py` in both. Only tracked files are there: ignored data or a virtual environment
stay in the main checkout (absolute paths in the command still reach them).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from mlbaseline import scratch
from mlbaseline.errors import UsageError

GIT_TIMEOUT_S = 120.0  # a checkout of a large tree takes a while; a hung git does not
_HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass(frozen=True)
class Checkout:
    """One arm's worktree: the ref asked for, the commit it names, the worktree's root and the
    folder the arm runs in (the caller's sub-folder of the repository, there)."""

    ref: str
    commit: str
    root: Path
    cwd: Path
    # tracked files with changes not committed in the caller's checkout: in neither worktree
    uncommitted: tuple[str, ...] = ()

    def describe(self) -> dict[str, str]:
        return {"ref": self.ref, "commit": self.commit}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", *args],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
            timeout=GIT_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise UsageError("--ref-a/--ref-b need git, and no `git` is on PATH") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {' '.join(args[:2])}: no answer in {GIT_TIMEOUT_S:g} s") from None


def repo_root(cwd: Path) -> Path:
    """The top folder of the git repository holding `cwd`; not in one → UsageError."""
    done = _git(cwd, "rev-parse", "--show-toplevel")
    if done.returncode != 0 or not done.stdout.strip():
        raise UsageError(
            f"{cwd}: not inside a git repository (--ref-a/--ref-b make worktrees of the "
            "current repository)"
        )
    return Path(done.stdout.strip()).resolve()


def resolve_ref(repo: Path, ref: str, flag: str) -> str:
    """The full commit id `ref` names in `repo`; not a commit → UsageError naming the flag."""
    if not ref or ref.startswith("-"):  # never let a ref be read as an option of git
        raise UsageError(f"{flag}: {ref!r}: not a git ref")
    done = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise UsageError(f"{flag}: {ref!r}: no such commit in {repo}")
    return done.stdout.strip()


def uncommitted(repo: Path) -> tuple[str, ...]:
    """The tracked files of `repo` whose changes are not committed (staged or not): a
    worktree holds a commit, so an edit still in the caller's checkout is in neither arm."""
    done = _git(repo, "status", "--porcelain=v1", "--untracked-files=no", "-z")
    if done.returncode != 0:
        return ()
    entries = iter(done.stdout.split("\0"))
    out = []
    for entry in entries:
        if len(entry) < 4:
            continue
        out.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: its source path follows
            next(entries, None)
    return tuple(out)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done (cleanup that must finish)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def remove(repo: Path, paths: list[Path], folder: Path) -> list[str]:
    """Unregister and delete the worktrees, forget stale ones, delete the scratch folder.
    Best effort, every step tried: returns what failed (empty when all went)."""
    problems: list[str] = []
    with signals_held():
        for path in paths:
            done = _git(repo, "worktree", "remove", "--force", str(path))
            if done.returncode != 0 and path.exists():
                problems.append(f"git worktree remove {path}: {done.stderr.strip()}")
        shutil.rmtree(folder, ignore_errors=True)
        done = _git(repo, "worktree", "prune")
        if done.returncode != 0:
            problems.append(f"git worktree prune: {done.stderr.strip()}")
    return problems


def _add(repo: Path, path: Path, commit: str) -> None:
    done = _git(repo, "worktree", "add", "--detach", str(path), commit)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise UsageError(f"git worktree add {commit[:12]}: {tail}")


@contextlib.contextmanager
def worktrees(refs: Mapping[str, str], cwd: Path | None = None) -> Iterator[dict[str, Checkout]]:
    """A detached worktree per arm (`refs`: arm → ref) of the repository holding `cwd`
    (default: the working directory), removed when the block ends however it ends. Bad refs
    are refused before anything is made."""
    here = (cwd or Path.cwd()).resolve()
    repo = repo_root(here)
    commits = {arm: resolve_ref(repo, ref, f"--ref-{arm}") for arm, ref in refs.items()}
    sub = here.relative_to(repo) if here.is_relative_to(repo) else Path()
    edits = uncommitted(repo)
    folder = scratch.make("worktree")
    made: list[Path] = []
    try:
        out: dict[str, Checkout] = {}
        for arm, commit in commits.items():
            path = folder / arm
            made.append(path)  # before git runs: a Ctrl-C inside `add` still removes it
            _add(repo, path, commit)
            out[arm] = Checkout(refs[arm], commit, path, path / sub, edits)
        yield out
    finally:
        remove(repo, made, folder)


__all__ = [
    "Checkout",
    "remove",
    "repo_root",
    "resolve_ref",
    "signals_held",
    "uncommitted",
    "worktrees",
]
