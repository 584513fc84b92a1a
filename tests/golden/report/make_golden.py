"""Regenerate the golden result files that tests/test_report.py renders.

    .venv/bin/python tests/golden/report/make_golden.py

Built with the real commands on tiny settings (CPU, builtin:tiny_cnn at 32 px, a 96-image
synthetic tree): `mlb run` (env-check, dataloader, throughput with its telemetry CSV, latency,
and the combined baseline.json of kind `run`) and `mlb subset` on a generated image tree (its
result, and its manifest under subset/ where the result's artifacts point). Only the JSON
results, the telemetry CSV and the manifest are kept; the subset's images and mlb run's own
report are dropped. Timings differ from run to run, so the files differ too; the tests check
structure (sections, figures), not numbers. Each file must stay under 200 KB.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
KEEP = (
    "baseline.json",
    "env_check.json",
    "dataloader.json",
    "throughput.json",
    "latency.json",
    "telemetry.csv",
)
TINY = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": "32",
    "throughput.min_time_s": "0.5",
    "throughput.max_time_s": "3",
    "throughput.max_steps": "60",
    "latency.requests": "150",
    "dataloader.synthetic_images": "96",
    "dataloader.batches": "4",
    "dataloader.batch_size": "8",
    "subset.n": "40",
}
MAX_BYTES = 200_000
MANIFEST = "subset_manifest.json"


def mlb(*args: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    cmd = [sys.executable, "-m", "mlbaseline", *args, *sets, "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    if proc.returncode not in (0, 1):  # 1: a verdict failed (a busy machine, a small subset)
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from mlbaseline.workloads.synthetic import write_image_tree

    with tempfile.TemporaryDirectory(prefix="mlb-golden-") as tmp:
        work = Path(tmp)
        mlb("run", "-o", str(work / "run"), "--ignore-env")
        write_image_tree(work / "tree", 200, 5, 32, 42, "png", None)
        mlb(
            "subset",
            str(work / "tree"),
            "-o",
            str(work / "subset"),
            "--result",
            str(work / "subset.json"),
        )
        for old in HERE.glob("*.json"):
            old.unlink()
        for name in KEEP:
            shutil.copyfile(work / "run" / name, HERE / name)
        shutil.copyfile(work / "subset.json", HERE / "subset.json")
        # where subset.json's artifacts["manifest"] points (relative to the JSON)
        (HERE / "subset").mkdir(exist_ok=True)
        shutil.copyfile(work / "subset" / "subset_manifest.json", HERE / "subset" / MANIFEST)
    for path in sorted([*HERE.iterdir(), *(HERE / "subset").iterdir()]):
        if path.suffix in (".json", ".csv"):
            size = path.stat().st_size
            flag = "  TOO LARGE" if size > MAX_BYTES else ""
            print(f"{path.name:24s} {size:>8d} B{flag}")


if __name__ == "__main__":
    main()
