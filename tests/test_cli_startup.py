"""`mlb` starts without torch: commands that never measure (compare, report, history) do not
pay its import (seconds on a busy machine); the runners import it when a command runs."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_does_not_import_torch() -> None:
    code = "import sys, mlbaseline.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
