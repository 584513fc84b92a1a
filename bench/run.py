"""`make bench`: measure the instrument itself and print one table.

Each section returns rows (figure, value, target, met). Timings are ratios or medians over
repeated runs measured side by side in one run, because shared machines are noisy. The table
goes to stdout and, with the machine's description, to bench/RESULTS.md.

    make bench                 # everything
    make bench BENCH=overhead  # one section (comma-separated list allowed)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import Row, machine_class  # noqa: E402  (bench/ is on sys.path only from here on)

__all__ = ["Row", "machine", "render", "sections"]


def machine() -> str:
    import psutil

    ram = psutil.virtual_memory().total / 2**30
    return (
        f"{machine_class()}, {ram:.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def sections() -> dict[str, Callable[[], list[Row]]]:
    import bench_sections as bs

    return bs.SECTIONS


def render(rows: list[Row], elapsed: float) -> str:
    lines = [
        "| section | figure | value | target | |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r.section} | {r.figure} | {r.value} | {r.target} | {r.mark} |" for r in rows]
    missed = sum(r.met is False for r in rows)
    lines += ["", f"{len(rows)} figures, {missed} missed their target; {elapsed:.0f} s in all."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="all", help="comma-separated sections, or 'all'")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/RESULTS.md")
    args = parser.parse_args()
    # the bench's own `mlb` runs must not land in the user's history store
    os.environ.setdefault(
        "MLB_HISTORY", str(Path(tempfile.mkdtemp(prefix="mlb-bench-")) / "h.sqlite")
    )
    available = sections()
    chosen = list(available) if args.only == "all" else args.only.split(",")
    unknown = [c for c in chosen if c not in available]
    if unknown:
        print(f"Error: unknown bench section(s) {unknown}; known: {', '.join(available)}")
        return 2
    rows: list[Row] = []
    start = time.perf_counter()
    for name in chosen:
        print(f"[bench] {name} …", file=sys.stderr, flush=True)
        try:
            rows += available[name]()
        except Exception as exc:  # a broken section is a missed figure, not a lost table
            rows.append(Row(name, "section failed", f"{type(exc).__name__}: {exc}", "runs", False))
    table = render(rows, time.perf_counter() - start)
    print(table)
    if not args.no_write:
        header = (
            "# `make bench` results\n\n"
            f"Machine: {machine()}  \n"
            f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, sections: "
            f"{', '.join(chosen)}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n\n"
        )
        # a partial run must not replace the committed full table
        out = ROOT / "bench" / "RESULTS.md"
        if args.only != "all":
            out = ROOT / "bench" / "out" / f"RESULTS-{args.only.replace(',', '-')}.md"
            out.parent.mkdir(exist_ok=True)
        # the notes and per-section write-ups under the table (## headings) are kept
        kept = ""
        if out.exists():
            old = out.read_text(encoding="utf-8")
            kept = old[old.index("\n## ") :] if "\n## " in old else ""
        out.write_text(header + table + "\n" + kept, encoding="utf-8")
        print(f"[bench] written to {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
