"""Child of the bench section `history`: `mlb history check` over the store LOCATION, in this
fresh process; prints JSON: CLI start-up time, the command's wall time, series and change
points found, and the process's peak RSS (bytes)."""

from __future__ import annotations

import io
import json
import os
import resource
import sys
import time
from contextlib import redirect_stdout


def main() -> None:
    os.environ["MLB_HISTORY"] = sys.argv[1]
    start = time.perf_counter()
    from mlbaseline.cli import app

    loaded = time.perf_counter()
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = io.StringIO()
    with redirect_stdout(out):
        try:
            app(["history", "check", "--json", "--quiet"], standalone_mode=False)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    done = time.perf_counter()
    doc = json.loads(out.getvalue())
    print(
        json.dumps(
            {
                "startup_s": loaded - start,
                "check_s": done - loaded,
                "series": len(doc["series"]),
                "change_points": sum(len(s["change_points"]) for s in doc["series"]),
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "rss_after_startup": rss_loaded,
            }
        )
    )


if __name__ == "__main__":
    main()
