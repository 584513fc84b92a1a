"""One child `mlb throughput --json --quiet` run, the one implementation behind `--repeats`
(runners.throughput, in a fresh process or forked from runners.forkserver's zygote) and
`mlb ab --processes` (runners.ab_process, always a fresh process: its arms may be another
interpreter or checkout). Re-exported by runners.throughput, where these names lived first."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbaseline.config import Config
from mlbaseline.errors import MlbError
from mlbaseline.results import Result, result_from_dict
from mlbaseline.safewrite import write_text
from mlbaseline.stopping import Terminated

CHILD_PREFIX = (sys.executable, "-m", "mlbaseline")  # this interpreter, this mlbaseline


@dataclass(frozen=True)
class ChildRun:
    """What one child process gave: its parsed result (None when it printed none), the last
    line of its stderr (or its exit code), its exit code, and whether Ctrl-C reached it."""

    result: Result | None
    error: str
    returncode: int
    interrupted: bool


def child_run(out: str, err: str, returncode: int, interrupted: bool) -> ChildRun:
    """The ChildRun of a finished child from its captured stdout and stderr."""
    tail = (err.strip().splitlines() or [f"exit code {returncode}"])[-1]
    return ChildRun(_parse_child(out), tail, returncode, interrupted)


def write_child_config(
    cfg: Config,
    directory: Path,
    name: str = "config.yaml",
    *,
    changes_only: bool = False,
    **throughput: Any,
) -> Path:
    """The config a child runs: `cfg` as one process (repeats 1, no telemetry: the parent's
    sampler, if any, watches), with `throughput` fields on top; written as YAML into
    `directory`. `changes_only`: only the profile's name and the fields where `cfg` differs
    from that profile, so that another checkout (whose config may lack fields added since)
    resolves it with its own profile and defaults filling the rest."""
    import yaml

    child = _changes_from_profile(cfg) if changes_only else cfg.to_dict()
    child["throughput"] = {
        **child.get("throughput", {}),
        "repeats": 1,
        "telemetry": False,
        **throughput,
    }
    # a child writes no file, so it records nothing (its parent does): the store's URL, and a
    # password in it, stays out of a config file on disk
    child.pop("history", None)
    path = directory / name
    # force: a rerun into the same scratch folder replaces its own earlier file
    return write_text(path, yaml.safe_dump(child, sort_keys=False), force=True)


def _changes_from_profile(cfg: Config) -> dict[str, Any]:
    from mlbaseline.config import deep_merge, flatten, nest, resolve

    base = flatten(resolve(None, cfg.profile).to_dict())
    out: dict[str, Any] = {"profile": cfg.profile}
    for key, value in flatten(cfg.to_dict()).items():
        if key != "profile" and (key not in base or base[key] != value):
            out = deep_merge(out, nest(key, value))
    return out


def child_command(config_path: Path, prefix: Sequence[str] = CHILD_PREFIX) -> list[str]:
    """`PREFIX throughput -c CONFIG --json --quiet`; PREFIX runs mlbaseline (another
    interpreter or checkout's `python -m mlbaseline`, or its `mlb`)."""
    return [*prefix, "throughput", "-c", str(config_path), "--json", "--quiet"]


def run_child(
    cmd: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> ChildRun:
    """Run one child (in `cwd`, with `env` as its whole environment; None: this process's);
    on Ctrl-C give the child (which got the SIGINT too) time to write its partial result, and
    pass SIGINT on if it did not; SIGTERM and SIGHUP, which only this process got, are passed
    on at once."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
    )
    interrupted = False
    try:
        out, err = proc.communicate()
    except KeyboardInterrupt as exc:
        interrupted = True
        if isinstance(exc, Terminated):  # SIGTERM/SIGHUP reached this process only: pass it on
            proc.send_signal(exc.signum)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
    return child_run(out, err, proc.returncode, interrupted)


def _parse_child(out: str) -> Result | None:
    if not out.strip():
        return None
    try:
        return result_from_dict(json.loads(out), "replicate")
    except (ValueError, MlbError):
        return None


__all__ = [
    "CHILD_PREFIX",
    "ChildRun",
    "child_command",
    "child_run",
    "run_child",
    "write_child_config",
]
