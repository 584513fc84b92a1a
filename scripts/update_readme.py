"""Regenerate the generated blocks of README.md (config reference, exit codes).

Run `make docs`; `tests/test_readme.py` fails when the README is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlbaseline.config import config_reference  # noqa: E402
from mlbaseline.errors import EXIT_CODE_TABLE  # noqa: E402


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
            raise SystemExit(f"README.md has no {name} block")
        text = pattern.sub(lambda m, fn=fn: m.group(1) + fn() + "\n" + m.group(2), text)
    return text


def main() -> None:
    readme = ROOT / "README.md"
    readme.write_text(render(readme.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
