"""Quota rules and seeded selection of `mlb subset`, against hand-computed expectations."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlbaseline.errors import DatasetError
from mlbaseline.subset.sampling import (
    balanced_quotas,
    draw_order,
    equal_shares,
    largest_remainder,
    proportional_quotas,
    reference_sample,
    select,
)

ABCD = ["A", "B", "C", "D"]


# ---------------------------------------------------------------- proportional


def test_proportional_exact_shares():
    assert proportional_quotas([50, 30, 20], 10) == [5, 3, 2]


def test_proportional_largest_remainder():
    # exact shares 6·7/13 = 3.23, 6·5/13 = 2.31, 6·1/13 = 0.46: floors 3, 2, 0 and the one
    # seat left goes to the largest remainder, C's 0.46
    assert proportional_quotas([7, 5, 1], 6, ["A", "B", "C"]) == [3, 2, 1]


def test_proportional_every_class_gets_one_when_n_covers_the_classes():
    # largest remainder alone gives 20, 0, 0 (19.70, 0.197, 0.099); the two small classes are
    # pinned at 1 and the other 18 go to the large one
    assert proportional_quotas([1000, 10, 5], 20) == [18, 1, 1]


def test_proportional_fewer_samples_than_classes_has_no_floor():
    # n = 3 < 5 classes: remainders 30/41 (A-D, equal) beat 3/41 (E); A, B, C by name
    assert proportional_quotas([10, 10, 10, 10, 1], 3, [*ABCD, "E"]) == [1, 1, 1, 0, 0]


def test_proportional_skips_empty_classes_and_respects_caps():
    assert proportional_quotas([0, 10, 10], 4) == [0, 2, 2]
    # a class with only one decodable image (cap 1) gives it; the other takes the rest
    assert proportional_quotas([10, 10], 6, caps=[1, 10]) == [1, 5]


def test_largest_remainder_ties():
    # 4·2/16 = 0.5 and 4·6/16 = 1.5 have equal remainders: the larger class wins
    assert largest_remainder([2, 6, 8], 4, ["A", "B", "C"]) == [0, 2, 2]
    # equal weights and remainders: the name decides
    assert largest_remainder([5, 5], 1, ["b", "a"]) == [0, 1]


def test_proportional_tie_then_floor():
    # LR gives 0, 2, 2; A is pinned at 1; 3 over B, C (6, 8): 1.29, 1.71 -> C gets the seat
    assert proportional_quotas([2, 6, 8], 4, ["A", "B", "C"]) == [1, 1, 2]


# ---------------------------------------------------------------- balanced


def test_balanced_divisible():
    assert balanced_quotas([10, 10, 10], 9) == [3, 3, 3]


def test_balanced_remainder_to_largest_classes_ties_by_name():
    # 10 // 4 = 2 each; the 2 left go to the largest, B and C (12 each, B first by name)
    assert balanced_quotas([8, 12, 12, 5], 10, ABCD) == [2, 3, 3, 2]
    assert equal_shares([8, 12, 12, 5], 10, ABCD) == [2, 3, 3, 2]


def test_balanced_small_class_gives_all_and_shortfall_is_reapportioned():
    # 3, 4, 3, 3 first; A has only 2: pinned, and 11 over B, C, D by the same rule gives
    # 3 each plus one each to the largest (B: 10, then C before D by name)
    assert balanced_quotas([2, 10, 5, 5], 13, ABCD) == [2, 4, 4, 3]


def test_balanced_several_rounds_of_pinning():
    # 5 each; A (1) and B (2) are short: 17 over C, D -> 9 and 8 (C first by name)
    assert balanced_quotas([1, 2, 20, 20], 20, ABCD) == [1, 2, 9, 8]


def test_balanced_fewer_samples_than_classes():
    assert balanced_quotas([3, 9, 9, 1], 2, ABCD) == [0, 1, 1, 0]


@pytest.mark.parametrize("fn", [proportional_quotas, balanced_quotas])
def test_n_larger_than_the_dataset_or_empty(fn):
    with pytest.raises(DatasetError, match="larger than the dataset"):
        fn([3, 4], 8)
    with pytest.raises(DatasetError, match="no usable images"):
        fn([0, 0], 1)


# ---------------------------------------------------------------- properties

class_counts = st.lists(st.integers(0, 60), min_size=1, max_size=25)


@settings(max_examples=300, deadline=None)
@given(counts=class_counts, data=st.data())
def test_proportional_properties(counts, data):
    total = sum(counts)
    if total == 0:
        return
    n = data.draw(st.integers(1, total))
    q = proportional_quotas(counts, n)
    assert sum(q) == n
    assert all(0 <= qi <= ci for qi, ci in zip(q, counts, strict=True))
    active = sum(1 for c in counts if c)
    if n >= active:
        assert all(qi >= 1 for qi, ci in zip(q, counts, strict=True) if ci)
    else:  # no bound binds: plain Hamilton, each quota is the floor or ceiling of its share
        for qi, ci in zip(q, counts, strict=True):
            assert abs(qi - n * ci / total) < 1


@settings(max_examples=300, deadline=None)
@given(counts=class_counts, data=st.data())
def test_balanced_properties(counts, data):
    total = sum(counts)
    if total == 0:
        return
    n = data.draw(st.integers(1, total))
    q = balanced_quotas(counts, n)
    assert sum(q) == n
    assert all(0 <= qi <= ci for qi, ci in zip(q, counts, strict=True))
    # water-filling: a class below its cap never has 2 fewer than any other class
    for qi, ci in zip(q, counts, strict=True):
        if qi < ci:
            assert max(q) <= qi + 1


# ---------------------------------------------------------------- selection


def test_same_seed_same_files_other_seed_other_files():
    classes, counts, quotas = ["a", "b"], [100, 50], [10, 5]
    first = select(classes, counts, quotas, seed=42)
    again = select(classes, counts, quotas, seed=42)
    other = select(classes, counts, quotas, seed=43)
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(first, other, strict=True))
    assert [len(x) for x in first] == quotas
    assert all(np.all(np.diff(x) > 0) for x in first)  # sorted, no repeats


def test_a_class_draw_does_not_depend_on_other_classes():
    alone = draw_order(7, "cats", 30)
    assert np.array_equal(alone, draw_order(7, "cats", 30))
    assert sorted(alone.tolist()) == list(range(30))
    with_more = select(["aardvarks", "cats"], [12, 30], [3, 4], seed=7)
    assert np.array_equal(with_more[1], np.sort(alone[:4]))


def test_reference_sample():
    cls, idx = reference_sample([3, 2], 10, seed=1)  # small: all of it, in order
    assert list(zip(cls.tolist(), idx.tolist(), strict=True)) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
    ]
    cls, idx = reference_sample([500, 300, 200], 100, seed=1)
    assert len(cls) == 100 and len(set(zip(cls.tolist(), idx.tolist(), strict=True))) == 100
    assert all(0 <= i < n for c, i in zip(cls, idx, strict=True) for n in [[500, 300, 200][c]])
    again = reference_sample([500, 300, 200], 100, seed=1)
    assert np.array_equal(cls, again[0]) and np.array_equal(idx, again[1])
