"""Exception types and the one exit-code table of the tool.

Library code raises these; only the CLI turns them into an `Error: …` line and an exit code.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes; part of the public interface (Makefiles and CI gate on them)."""

    OK = 0  # ran, and every verdict passed (warnings allowed)
    FAILED = 1  # ran, and a verdict failed (env-check, regression, SLA miss, subset KL)
    BAD_INPUT = 2  # usage, config, unreadable or invalid file, schema mismatch
    NOT_COMPARABLE = 3  # environment/workload mismatch, or required hardware missing
    INTERRUPTED = 130  # Ctrl-C; a partial result marked `interrupted` was still written
    TERMINATED = 143  # SIGTERM (timeout, docker stop, CI): handled as Ctrl-C is
    HANGUP = 129  # SIGHUP (the terminal closed): handled as Ctrl-C is


EXIT_CODE_TABLE: list[tuple[int, str]] = [
    (ExitCode.OK, "ran, and every verdict passed (warnings allowed)"),
    (
        ExitCode.FAILED,
        "ran, and a verdict failed: an env-check failure, a regression, an SLA miss, "
        "a subset that fails KL",
    ),
    (
        ExitCode.BAD_INPUT,
        "bad input: usage, config, unreadable or invalid file, schema mismatch",
    ),
    (
        ExitCode.NOT_COMPARABLE,
        "not comparable or not possible here: environment/workload mismatch, "
        "required hardware missing",
    ),
    (ExitCode.INTERRUPTED, "interrupted (Ctrl-C); the partial result is saved, marked"),
    (ExitCode.TERMINATED, "stopped by SIGTERM; the partial result is saved, marked interrupted"),
    (ExitCode.HANGUP, "stopped by SIGHUP; the partial result is saved, marked interrupted"),
]


class MlbError(Exception):
    """Base of every error the tool reports as one line."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(MlbError):
    """Bad command-line usage or option values."""


class ConfigError(MlbError):
    """Config file missing, unreadable, invalid YAML, unknown key, wrong type or range."""


class ResultFileError(MlbError):
    """Result file unreadable, malformed, of an unknown schema version or the wrong kind."""


class DatasetError(MlbError):
    """A dataset path that does not exist, has no classes, or cannot be used."""


class FactoryError(MlbError):
    """An import-path factory (`pkg.module:callable`) that does not exist or raised."""


class OutputExistsError(MlbError):
    """The output exists and --force was not given."""


class OutputError(MlbError):
    """The output could not be written (permission denied, disk full, inside the dataset)."""


class NotComparableError(MlbError):
    """Two results whose environment or workload differ in a blocking key."""

    exit_code = ExitCode.NOT_COMPARABLE


class HardwareUnavailableError(MlbError):
    """The requested hardware (e.g. a CUDA device) is not present here."""

    exit_code = ExitCode.NOT_COMPARABLE
