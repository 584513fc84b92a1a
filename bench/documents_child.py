"""Child of the bench section `documents`: load one result file in this fresh process, ARM
`validated` (mlb's loader: the whole document through its pydantic model) or `plain` (the 1.0
loader: json.loads and its top-level checks); print JSON: the best load time of REPEATS and the
peak RSS the loads added to the process (VmHWM after the imports vs after the loads: pydantic-
core allocates in Rust, which tracemalloc would not see, and ru_maxrss keeps the parent's
high-water mark across exec, VmHWM starts afresh)."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any


def _numbers(seq: Any) -> bool:
    return isinstance(seq, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in seq
    )


def plain(body: bytes) -> Any:
    """The 1.0 loader (results.py before issue 25): json.loads, the version, the kind, each
    top-level section's type, each metric's samples; then the same Result as mlb builds."""
    from mlbaseline.results import _result_of

    doc = json.loads(body.decode("utf-8"))
    assert isinstance(doc, dict) and str(doc.get("schema_version", "")).startswith("1.")
    for key, tp in (("config", dict), ("environment", dict), ("measurements", dict)):
        assert isinstance(doc.get(key) or tp(), tp)
    for key, tp in (("warnings", list), ("data", dict), ("artifacts", dict), ("notes", list)):
        assert isinstance(doc.get(key) or tp(), tp)
    for raw in doc["measurements"].values():
        assert _numbers(raw["values"]) and _numbers(raw.get("warmup") or [])
        assert isinstance(raw["unit"], str) and isinstance(raw["higher_is_better"], bool)
    return _result_of(doc)


def validated(body: bytes, path: str) -> Any:
    from mlbaseline.results import parse_result

    return parse_result(body, path)


def peak_rss() -> int:
    """This process's peak resident set (bytes), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    arm, path, repeats = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    import mlbaseline.results  # noqa: F401  (imports before the baseline RSS)

    base = peak_rss()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        body = path.read_bytes()
        result = validated(body, str(path)) if arm == "validated" else plain(body)
        best = min(best, time.perf_counter() - start)
        del body, result
    peak = peak_rss()
    print(json.dumps({"load_s": best, "peak_added": peak - base}))


if __name__ == "__main__":
    main()
