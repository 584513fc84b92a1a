"""Progress is an object the core calls; the rich bar in the CLI is only one listener."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Task(Protocol):
    def advance(self, n: int = 1) -> None: ...
    def update(self, description: str | None = None, total: int | None = None) -> None: ...


class Progress(Protocol):
    def task(self, description: str, total: int | None = None) -> Iterator[Task]: ...

    def log(self, message: str) -> None: ...


class _NullTask:
    def advance(self, n: int = 1) -> None:
        pass

    def update(self, description: str | None = None, total: int | None = None) -> None:
        pass


class NullProgress:
    """Progress that shows nothing (library use, --quiet, tests)."""

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Task]:
        yield _NullTask()

    def log(self, message: str) -> None:
        pass


class RecordingProgress(NullProgress):
    """Keeps log lines and task names; for tests."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.tasks: list[str] = []

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Task]:
        self.tasks.append(description)
        yield _NullTask()

    def log(self, message: str) -> None:
        self.lines.append(message)
