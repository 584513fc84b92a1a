"""Regenerate the generated blocks of docs/REFERENCE.md (config reference, exit codes, CI gate).

Run `make docs`; `tests/test_readme.py` fails when the reference is out of date. The README is
the hand-written quick start and has no generated block.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "REFERENCE.md"
sys.path.insert(0, str(ROOT))

from mlbaseline.config import config_reference  # noqa: E402
from mlbaseline.errors import EXIT_CODE_TABLE  # noqa: E402
from mlbaseline.safewrite import write_text  # noqa: E402


def exit_code_table() -> str:
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| {int(code)} | {meaning} |" for code, meaning in EXIT_CODE_TABLE]
    return "\n".join(rows)


def ci_gate() -> str:
    text = (ROOT / "examples" / "ci-gate.mk").read_text(encoding="utf-8").rstrip("\n")
    return f"```make\n{text}\n```"


BLOCKS = {
    "config-reference": config_reference,
    "exit-codes": exit_code_table,
    "ci-gate": ci_gate,
}


def render(text: str) -> str:
    for name, fn in BLOCKS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", flags=re.DOTALL)
        if not pattern.search(text):
            raise SystemExit(f"{TARGET.relative_to(ROOT)} has no {name} block")
        text = pattern.sub(lambda m, fn=fn: m.group(1) + fn() + "\n" + m.group(2), text)
    return text


def main() -> None:
    # atomic, as every file mlb writes (mlbaseline/safewrite.py); the file is ours to replace
    write_text(TARGET, render(TARGET.read_text(encoding="utf-8")), force=True)


if __name__ == "__main__":
    main()
