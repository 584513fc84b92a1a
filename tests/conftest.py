"""Suite-wide fixtures.

Every result the CLI writes is recorded in the history store: the suite points `MLB_HISTORY`
at a throwaway file for the whole session (subprocesses inherit it), so no test ever writes into
a real `mlb-results/history.sqlite`. Tests of the store itself use their own paths.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

_HISTORY_DIR = Path(tempfile.mkdtemp(prefix="mlb-test-history-"))
os.environ["MLB_HISTORY"] = str(_HISTORY_DIR / "history.sqlite")


def pytest_unconfigure(config: object) -> None:
    shutil.rmtree(_HISTORY_DIR, ignore_errors=True)
