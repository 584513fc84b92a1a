"""Smoke tests of the `make bench` suite: it imports, names its sections, and shows a missed
target as missed. Nothing here measures (timing belongs in `make bench`, not `make test`)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_sections  # noqa: E402
from bench_common import Row, interleave, spread  # noqa: E402


def _load_run():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sections_cover_every_figure_the_issues_ask_for():
    required = {"accuracy", "overhead", "repro", "scale", "compare", "time"}  # the first issues
    required |= {"drift", "ab", "noise"}  # reproducible on a noisy machine
    required |= {"api"}  # real projects
    required |= {"history"}  # baseline history
    required |= {"documents"}  # typed result documents (issue 25)
    assert required <= set(bench_sections.SECTIONS)
    assert all(callable(fn) for fn in bench_sections.SECTIONS.values())


def test_documents_bench_arms_read_the_same_result():
    """The bench section `documents` times two loaders of one file: they must agree."""
    import documents_child

    body = (ROOT / "tests" / "data" / "schema_1_0" / "throughput.json").read_bytes()
    plain, validated = documents_child.plain(body), documents_child.validated(body, "t.json")
    assert plain.to_dict() == validated.to_dict()


def test_render_shows_a_missed_row_as_missed():
    run = _load_run()
    rows = [
        Row("scale", "10k files: index vs walk", "2.50×", "≤ 2× the walk", False),
        Row("time", "mlb run", "30 s", "< 90 s", True),
        Row("repro", "torch spread", "1%", "reference", None),
    ]
    table = run.render(rows, 12.0)
    lines = table.splitlines()
    assert lines[2].endswith("| MISSED |") and "10k files" in lines[2]
    assert lines[3].endswith("| met |") and lines[4].endswith("| info |")
    assert "3 figures, 1 missed their target" in table


def test_interleave_alternates_the_order_every_round():
    calls: list[str] = []
    out = interleave({"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert out == {"a": [1, 1, 1], "b": [2, 2, 2]}
    assert abs(spread([1.0, 1.02, 1.01]) - 0.02) < 1e-12


def test_generated_tree_is_what_the_index_sees(tmp_path):
    from mlbaseline.subset import index_tree

    bench_sections.make_tree(tmp_path / "tree", 2000, per_class=500)
    index = index_tree(tmp_path / "tree")
    assert index.total == 2000 and len(index.classes) == 4
