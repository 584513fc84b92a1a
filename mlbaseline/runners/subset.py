"""`mlb subset`: a stratified, reproducible baseline subset with KL validation and a manifest.

Flow: check the destination → index the tree → plan per-class quotas → decode the reference
sample → for each seed tried, draw the subset (replacing images that fail to decode), compute
the KL figures → keep the try with the lowest mean KL → build the subset in `DIR.partial-XXXX`
(files, manifest, optional tensors, the result JSON) → rename it to DIR.

Only the images that are needed are decoded: the subset's candidates and the reference sample
(at most `subset.reference_max` images, all of them for a smaller dataset). Ctrl-C at any point
returns a result marked `interrupted` and leaves no subset behind.

Outputs inside DIR: class folders with `sample_0000.ext` files, `subset_manifest.json`,
`subset_result.json` (this result) and, with `save_tensors`, `baseline_subset.pt`: a dict
{"images": list of uint8 tensors C×H×W (RGB, each at its original size — resizing is the
training transform's job, and a list keeps images of different sizes lossless), "labels": int64
tensor (indices into "classes"), "classes": the source's non-empty classes, "files": output
paths}, readable with `torch.load(path, weights_only=True)`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline.config import Config
from mlbaseline.errors import DatasetError, UsageError
from mlbaseline.measure.gpu import GpuProbe, NullProbe
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Check, Result
from mlbaseline.safewrite import open_output, write_text
from mlbaseline.subset import features as feat
from mlbaseline.subset import validate
from mlbaseline.subset.index import Index, index_tree
from mlbaseline.subset.manifest import MANIFEST_NAME, Manifest, ManifestEntry, write_manifest
from mlbaseline.subset.output import PartialDir, check_destination, place_file
from mlbaseline.subset.sampling import draw_order, plan_quotas, reference_sample

RESULT_NAME = "subset_result.json"
TENSORS_NAME = "baseline_subset.pt"
MAX_DEFAULT_WORKERS = 8

Key = tuple[int, int]


@dataclass
class Try:
    """One seed's subset and how well it represents the full set."""

    seed: int
    quotas: list[int]
    picked: list[list[int]]  # per class, sorted file indices
    excluded: list[Key] = field(default_factory=list)  # did not decode, replaced
    kept_corrupt: list[Key] = field(default_factory=list)  # did not decode, kept
    kl: validate.FeatureKl | None = None
    class_kl: float = float("nan")
    per_class: dict[str, float | None] = field(default_factory=dict)

    @property
    def kl_mean(self) -> float:
        return self.kl.mean if self.kl is not None else float("inf")

    def keys(self) -> list[Key]:
        return [(c, i) for c, files in enumerate(self.picked) for i in files]


def draw_validated(
    index: Index,
    store: feat.FeatureStore,
    strategy: str,
    n: int,
    seed: int,
    keep_corrupt: bool,
    progress: Progress,
) -> Try:
    """Draw per-class quotas in seeded order; an image that fails to decode is replaced by the
    class's next draw. A class that runs out of decodable images is re-planned with its true
    capacity, so its shortfall moves to the other classes by the strategy's own rule."""
    names = index.classes
    counts = [len(f) for f in index.files]
    caps = list(counts)
    orders: dict[int, np.ndarray] = {}
    good: list[list[int]] = [[] for _ in names]
    bad: list[list[int]] = [[] for _ in names]
    pos = [0] * len(names)
    while True:
        try:
            quotas = plan_quotas(strategy, counts, n, names, caps)
        except DatasetError:
            usable = sum(caps)
            raise DatasetError(
                f"subset size {n} is larger than the {usable} images that decode "
                f"({sum(map(len, bad))} corrupt; --keep-corrupt keeps them)"
            ) from None
        need: list[Key] = []
        for c, quota in enumerate(quotas):
            deficit = quota - len(good[c])
            if deficit <= 0 or pos[c] >= counts[c]:
                continue
            order = orders.get(c)
            if order is None:
                order = orders[c] = draw_order(seed, names[c], counts[c])
            take = order[pos[c] : pos[c] + deficit]
            pos[c] += len(take)
            need.extend((c, int(i)) for i in take)
        if not need:
            break
        store.ensure(need, progress, f"decoding subset candidates (seed {seed})")
        for c, i in need:
            (good if store.entries[(c, i)].ok or keep_corrupt else bad)[c].append(i)
        for c, quota in enumerate(quotas):
            if len(good[c]) < quota and pos[c] >= counts[c]:
                caps[c] = len(good[c])  # exhausted: its real capacity is now known
    picked = [sorted(g[:q]) for g, q in zip(good, quotas, strict=True)]
    kept = [(c, i) for c, files in enumerate(picked) for i in files if not store.entries[(c, i)].ok]
    excluded = sorted((c, i) for c, files in enumerate(bad) for i in files)
    return Try(seed=seed, quotas=quotas, picked=picked, excluded=excluded, kept_corrupt=kept)


def evaluate(
    attempt: Try,
    index: Index,
    store: feat.FeatureStore,
    ref_keys: list[Key],
) -> None:
    """Fill in the KL figures of one try against the reference sample."""
    names = store.extractor.feature_names
    sub_keys = attempt.keys()
    sub = store.matrix(sub_keys)
    ref = store.matrix(ref_keys)
    if len(sub) and len(ref):
        attempt.kl = validate.feature_kl(sub, ref, names)
        sub_labels = np.array([c for c, i in sub_keys if store.entries[(c, i)].ok])
        ref_labels = np.array([c for c, i in ref_keys if store.entries[(c, i)].ok])
        attempt.per_class = validate.per_class_kl(sub, sub_labels, ref, ref_labels, index.classes)
    attempt.class_kl = validate.class_divergence([len(p) for p in attempt.picked], index.counts)


def _workers(cfg: Config) -> int:
    from mlbaseline.envinfo import usable_cpus

    return cfg.subset.workers or max(1, min(MAX_DEFAULT_WORKERS, usable_cpus()))


def _plan_rows(index: Index, quotas: list[int], attempt: Try | None) -> list[dict[str, Any]]:
    rows = []
    for c, name in enumerate(index.classes):
        row: dict[str, Any] = {"class": name, "images": len(index.files[c]), "quota": quotas[c]}
        if attempt is not None:
            row["selected"] = len(attempt.picked[c])
            row["corrupt_excluded"] = sum(1 for k in attempt.excluded if k[0] == c)
        rows.append(row)
    return rows


def _try_record(attempt: Try, threshold: float, index: Index) -> dict[str, Any]:
    return {
        "seed": attempt.seed,
        "kl_mean": attempt.kl.mean if attempt.kl else None,
        "passed": bool(attempt.kl and attempt.kl.passed(threshold)),
        "class_kl": attempt.class_kl,
        "corrupt_excluded": [index.relpath(*k) for k in attempt.excluded],
    }


def _output_name(index: Index, c: int, i: int, rank: int) -> str:
    suffix = Path(index.files[c][i]).suffix  # original extension, case kept
    return f"{index.classes[c]}/sample_{rank:04d}{suffix}"


def build_manifest(
    index: Index, attempt: Try, store: feat.FeatureStore, strategy: str, n: int
) -> Manifest:
    entries = []
    for c, files in enumerate(attempt.picked):
        for rank, i in enumerate(files):
            e = store.entries[(c, i)]
            entries.append(
                ManifestEntry(
                    source=index.relpath(c, i),
                    output=_output_name(index, c, i, rank),
                    cls=index.classes[c],
                    label=c,
                    bytes=e.nbytes,
                    sha256=e.sha256,
                    corrupt=not e.ok,
                )
            )
    counts = {
        name: {"available": len(index.files[c]), "selected": len(attempt.picked[c])}
        for c, name in enumerate(index.classes)
    }
    excluded = [
        {"path": index.relpath(*k), "error": store.entries[k].error or ""} for k in attempt.excluded
    ]
    return Manifest(
        strategy=strategy,
        seed=attempt.seed,
        n=n,
        classes=list(index.classes),
        counts=counts,
        entries=entries,
        excluded_corrupt=excluded,
    )


def _save_tensors(index: Index, manifest: Manifest, path: Path, progress: Progress) -> list[str]:
    """Decode the subset at full resolution into baseline_subset.pt; returns skipped paths."""
    import torch

    images, labels, files, skipped = [], [], [], []
    with progress.task("decoding tensors", total=len(manifest.entries)) as task:
        for entry in manifest.entries:
            if entry.corrupt:
                skipped.append(entry.source)
            else:
                pixels = feat.decode_uint8(index.root / entry.source)
                images.append(torch.from_numpy(pixels).permute(2, 0, 1).contiguous())
                labels.append(entry.label)
                files.append(entry.output)
            task.advance()
    tensors = {
        "images": images,
        "labels": torch.tensor(labels, dtype=torch.int64),
        "classes": list(manifest.classes),
        "files": files,
        "layout": "list of uint8 tensors C×H×W, RGB, original size",
    }
    with open_output(path, mode="wb") as fh:
        torch.save(tensors, fh)
    return skipped


def _materialize(
    index: Index,
    manifest: Manifest,
    out_dir: Path,
    link: str,
    save_tensors: bool,
    result: Result,
    write_result_file: bool,
    progress: Progress,
) -> None:
    with PartialDir(out_dir) as partial:
        for name in {e.cls for e in manifest.entries}:
            (partial.path / name).mkdir()
        verb = "copying" if link == "copy" else "linking"
        with progress.task(f"{verb} files", total=len(manifest.entries)) as task:
            for entry in manifest.entries:
                place_file(index.root / entry.source, partial.path / entry.output, link)
                task.advance()
        if save_tensors:
            skipped = _save_tensors(index, manifest, partial.path / TENSORS_NAME, progress)
            result.artifacts["tensors"] = TENSORS_NAME
            result.data["tensors"] = {"path": TENSORS_NAME, "skipped_corrupt": skipped}
        sha = write_manifest(manifest, partial.path / MANIFEST_NAME)
        assert sha == result.data["manifest_sha256"]  # the manifest is deterministic text
        if write_result_file:
            result.artifacts["result"] = RESULT_NAME
            write_text(partial.path / RESULT_NAME, result.to_json(), force=True)
        for note in partial.commit():
            result.warn("old_subset_left", note)


def run_subset(
    cfg: Config,
    source: Path | None,
    out_dir: Path | None,
    progress: Progress | None = None,
    *,
    dry_run: bool = False,
    force: bool = False,
    probe: GpuProbe | None = None,
    write_result_file: bool = True,
) -> Result:
    """Build (or, with dry_run, only plan) the baseline subset of `source` into `out_dir`.

    Raises MlbError subclasses for bad input (exit 2); a failed KL check is a failed verdict
    (exit 1); Ctrl-C returns the result marked `interrupted` with nothing left in `out_dir`.
    With `write_result_file`, the result is also saved as `out_dir/subset_result.json`."""
    progress = progress or NullProgress()
    s = cfg.subset
    source = Path(source) if source is not None else (Path(s.source) if s.source else None)
    if source is None:
        raise UsageError("no dataset given: pass SOURCE or set subset.source")
    if out_dir is None and not dry_run:
        raise UsageError("no output folder: pass -o DIR (or --dry-run to only plan)")
    if not source.exists():
        raise DatasetError(f"{source}: no such dataset folder")
    if out_dir is not None and not dry_run:
        check_destination(source, Path(out_dir), force)
    n = s.n or cfg.golden.subset_size
    result = Result(kind="subset", config=cfg.to_dict())
    result.data.update(
        source=str(source.resolve()),
        output=str(Path(out_dir).resolve()) if out_dir is not None and not dry_run else None,
        n=n,
        strategy=s.strategy,
        base_seed=cfg.golden.seed,
        link=s.link,
        dry_run=dry_run,
        timings_s={},
    )
    timings = result.data["timings_s"]
    try:
        _run(cfg, source, out_dir, progress, dry_run, result, timings, n, write_result_file)
    except KeyboardInterrupt:
        # nothing was placed: the result must not name a subset that does not exist
        result.data["output"] = None
        result.data.pop("manifest_sha256", None)
        result.artifacts.clear()
        result.environment = {"blocking": {}, "informational": {}}
        result.mark("interrupted", "interrupted: no subset was written (nothing half-made)")
    if not result.environment.get("blocking"):
        result.environment = _fingerprint(cfg, probe, result.data.get("manifest_sha256"))
    return result


def _fingerprint(cfg: Config, probe: GpuProbe | None, sha: str | None) -> dict[str, Any]:
    from mlbaseline.envinfo import fingerprint

    return fingerprint(cfg.to_dict(), probe or NullProbe("not used by subset"), "cpu", sha)


def _run(
    cfg: Config,
    source: Path,
    out_dir: Path | None,
    progress: Progress,
    dry_run: bool,
    result: Result,
    timings: dict[str, float],
    n: int,
    write_result_file: bool,
) -> None:
    s = cfg.subset
    index, quotas = _index_and_plan(cfg, source, progress, result, timings, n)
    if dry_run:
        result.verdict.checks.append(
            Check("subset.kl", "skip", threshold=s.kl_threshold, message="dry run: nothing decoded")
        )
        return
    store = _feature_store(cfg, index, result)
    t0 = time.perf_counter()
    ref_keys = _reference_keys(cfg, source, index, store, progress, result)
    tries = []
    for j in range(s.retries):
        attempt = draw_validated(
            index, store, s.strategy, n, cfg.golden.seed + j, s.keep_corrupt, progress
        )
        evaluate(attempt, index, store, ref_keys)
        tries.append(attempt)
    timings["extract"] = time.perf_counter() - t0
    best = min(tries, key=lambda t: (t.kl_mean, t.seed))
    _record(result, index, store, best, tries, quotas, cfg, n)
    if out_dir is None:
        return
    manifest = build_manifest(index, best, store, s.strategy, n)
    result.data["manifest_sha256"] = manifest.sha256()
    result.artifacts["manifest"] = MANIFEST_NAME
    result.environment = _fingerprint(cfg, None, manifest.sha256())
    t0 = time.perf_counter()
    _materialize(
        index, manifest, Path(out_dir), s.link, s.save_tensors, result, write_result_file, progress
    )
    timings["place"] = time.perf_counter() - t0


def _index_and_plan(
    cfg: Config,
    source: Path,
    progress: Progress,
    result: Result,
    timings: dict[str, float],
    n: int,
) -> tuple[Index, list[int]]:
    """Index the tree and plan the per-class quotas (all a dry run does)."""
    t0 = time.perf_counter()
    index = index_tree(source, progress)
    timings["index"] = time.perf_counter() - t0
    result.data["index"] = index.summary()
    _index_warnings(index, result)
    if index.total == 0:
        raise DatasetError(
            f"{source}: no images found (expected class folders with "
            ".jpg/.jpeg/.png/.bmp/.webp files)"
        )
    t0 = time.perf_counter()
    quotas = plan_quotas(cfg.subset.strategy, index.counts.tolist(), n, index.classes)
    timings["plan"] = time.perf_counter() - t0
    result.data["plan"] = _plan_rows(index, quotas, None)
    return index, quotas


def _feature_store(cfg: Config, index: Index, result: Result) -> feat.FeatureStore:
    s = cfg.subset
    extractor = feat.make_extractor(
        s.extractor, s.weights, cfg.golden.seed, s.feature_size, _extract_device(cfg)
    )
    result.data["extractor"] = {**extractor.info, "features": len(extractor.feature_names)}
    return feat.FeatureStore(index, extractor, _workers(cfg))


def _reference_keys(
    cfg: Config,
    source: Path,
    index: Index,
    store: feat.FeatureStore,
    progress: Progress,
    result: Result,
) -> list[tuple[int, int]]:
    """The reference sample the subsets are judged against, its features extracted."""
    s = cfg.subset
    ref_cls, ref_idx = reference_sample(index.counts, s.reference_max, cfg.golden.seed)
    ref_keys = [(int(c), int(i)) for c, i in zip(ref_cls, ref_idx, strict=True)]
    store.ensure(ref_keys, progress, "extracting reference features")
    ref_bad = [k for k in ref_keys if not store.entries[k].ok]
    if len(ref_bad) == len(ref_keys):
        raise DatasetError(f"{source}: none of the {len(ref_keys)} reference images decode")
    result.data["reference"] = {
        "requested_max": s.reference_max,
        "size": len(ref_keys) - len(ref_bad),
        "whole_dataset": len(ref_keys) == index.total,
        "corrupt": [index.relpath(*k) for k in ref_bad],
    }
    return ref_keys


def _extract_device(cfg: Config) -> str:
    if cfg.subset.extractor != "resnet18":
        return "cpu"
    from mlbaseline.measure.determinism import resolve_device

    return resolve_device(cfg.workload.device)


def _index_warnings(index: Index, result: Result) -> None:
    if index.empty_classes:
        result.warn(
            "empty_classes",
            f"{len(index.empty_classes)} class folder(s) hold no images and are left out: "
            + ", ".join(index.empty_classes[:10]),
            classes=index.empty_classes,
        )
    if index.ignored_files:
        kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(index.ignored_by_suffix.items()))
        result.warn("ignored_files", f"{index.ignored_files} non-image file(s) ignored ({kinds})")
    if index.unreadable_dirs:
        result.warn(
            "unreadable_dirs",
            f"{len(index.unreadable_dirs)} folder(s) could not be read and were skipped",
            dirs=index.unreadable_dirs,
        )
    if index.non_utf8_skipped:
        names = index.non_utf8_skipped
        result.warn(
            "non_utf8_names",
            f"{len(names)} file(s) or folder(s) whose names are not valid UTF-8 were skipped: "
            + ", ".join(names[:5]),
            names=names,
        )


def _record(
    result: Result,
    index: Index,
    store: feat.FeatureStore,
    best: Try,
    tries: list[Try],
    planned: list[int],
    cfg: Config,
    n: int,
) -> None:
    s = cfg.subset
    threshold = s.kl_threshold
    result.data["seed"] = best.seed
    result.data["plan"] = _plan_rows(index, best.quotas, best)
    if best.quotas != planned:
        result.data["planned_before_corrupt"] = planned
    result.data["counts"] = {
        "selected": sum(len(p) for p in best.picked),
        "per_class": {name: len(best.picked[c]) for c, name in enumerate(index.classes)},
    }
    result.data["kl"] = {
        "extractor": s.extractor,
        "threshold": threshold,
        "mean": best.kl.mean if best.kl else None,
        "per_feature": best.kl.per_feature if best.kl else {},
        "constant_features": best.kl.constant if best.kl else [],
        "class_proportion": best.class_kl,
        "per_class": best.per_class,
    }
    chosen = [store.entries.get(k) for k in Try.keys(best)]
    sizes = [e.size for e in chosen if e is not None and e.size]
    if sizes:
        result.data["image_size"] = {
            "mean_width": float(np.mean([w for w, _ in sizes])),
            "mean_height": float(np.mean([h for _, h in sizes])),
        }
    result.data["tries"] = [_try_record(t, threshold, index) for t in tries]
    corrupt = sorted({k for t in tries for k in t.excluded} | set(best.kept_corrupt))
    result.data["corrupt"] = [
        {"path": index.relpath(*k), "error": store.entries[k].error} for k in corrupt
    ]
    result.data["corrupt_kept"] = [index.relpath(*k) for k in best.kept_corrupt]
    if corrupt:
        verb = "kept (--keep-corrupt)" if best.kept_corrupt else "excluded and replaced"
        result.warn(
            "corrupt_images",
            f"{len(corrupt)} image(s) failed to decode and were {verb}: "
            + ", ".join(index.relpath(*k) for k in corrupt[:5]),
        )
    _checks(result, best, s.strategy, threshold, len(tries))


def _checks(result: Result, best: Try, strategy: str, threshold: float, n_tries: int) -> None:
    if best.kl is None:
        result.verdict.checks.append(
            Check("subset.kl", "fail", None, threshold, "no subset image decodes: KL undefined")
        )
    else:
        passed = best.kl.passed(threshold)
        tried = f" (best of {n_tries} seeds)" if n_tries > 1 else ""
        message = (
            f"mean Gaussian KL {best.kl.mean:.4f} < {threshold}{tried}"
            if passed
            else f"mean Gaussian KL {best.kl.mean:.4f} ≥ {threshold}{tried}: the subset does not "
            "represent the full set; try --retries, a larger --n or --strategy proportional"
        )
        result.verdict.checks.append(
            Check("subset.kl", "pass" if passed else "fail", best.kl.mean, threshold, message)
        )
    if strategy == "balanced":
        result.verdict.checks.append(
            Check(
                "subset.class_proportion",
                "skip",
                best.class_kl,
                None,
                "balanced strategy: class proportions differ from the source by design",
            )
        )
    else:
        ok = not best.class_kl > threshold
        result.verdict.checks.append(
            Check(
                "subset.class_proportion",
                "pass" if ok else "warn",
                best.class_kl,
                threshold,
                f"class-proportion KL {best.class_kl:.4g}"
                + ("" if ok else " (small n over many classes: proportions are coarse)"),
            )
        )
