"""The `data` payload of a `run` result (`baseline.json`, written by `runners/run.py`).

One record per phase as it ended (its file and verdict, or why it failed), the phases skipped,
the output folder, and, once the phases ran, the run-wide telemetry sampler's overhead, the CPU
account of every phase and the input-bound finding. A run stopped early (Ctrl-C, a failed
env-check) lacks the later sections.
"""

from __future__ import annotations

from pydantic import Field

from mlbaseline.documents.base import FiniteFloat, Strict
from mlbaseline.documents.data_throughput import Contamination, Overhead


class Phase(Strict):
    """One phase: its kind (`report` for the report step), the file it wrote (null when it
    failed), its status, and its verdict or error. A hand-written run file may name only the
    file (`mlb report` follows it), so all but `file` are optional."""

    phase: str | None = None
    kind: str | None = None
    file: str | None = None
    status: str | None = None
    verdict: str | None = None
    error: str | None = None


class InputBound(Strict):
    """`runners.run._input_bound`: the data-wait share of the golden batch size's step."""

    batch: str
    share: FiniteFloat
    level: str


class Data(Strict):
    """`data` of a run result."""

    # a phase, or (hand-written run files, which `mlb report` follows) just its file name
    phases: list[Phase | str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    output_dir: str | None = None
    env_check_ignored: bool | None = None  # --ignore-env after a failed env-check
    telemetry: Overhead | None = None
    contamination: Contamination | None = None
    input_bound: InputBound | None = None
