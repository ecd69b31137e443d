"""Sattler's bi-partition and update norms: written for the mutation run's survivors in
``common.clustering.bipartition`` (the separation test looked up by another name or without its
fallback, the norms' errors and their float64 sums of low-precision updates)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common.clustering.bipartition import NormSums, fold_rows, sattler_bipartition, split_cluster, update_norms
from common.clustering.similarity import CountSketch


def _three_groups() -> list[np.ndarray]:
    """Twins along e1, e2 and (0, 0.3, 1): the e2 and third pairs (cosine 0.3 / sqrt(1.09)) join first."""
    third = np.array([0.0, 0.3, 1.0])
    return [np.array(v, dtype=np.float64) for v in ([1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], third, third)]


@pytest.mark.parametrize(
    "test, intra",
    [("nearest", 1.0), ("strict", 0.3 / np.sqrt(1.09)), ("off", 0.3 / np.sqrt(1.09))],
)
def test_sattler_bipartition_reports_the_named_tests_within_half_cosine_and_strict_for_off(test, intra):
    first, second, cross, within = sattler_bipartition(range(10, 16), _three_groups(), test=test)
    assert (first, second) == ([10, 11], [12, 13, 14, 15])
    assert cross == pytest.approx(0.0, abs=1e-6)
    assert within == pytest.approx(intra, abs=1e-6)


def test_sattler_bipartition_defaults_to_the_nearest_partner_test():
    *_, within = sattler_bipartition(range(6), _three_groups())
    assert within == pytest.approx(1.0, abs=1e-6)


def test_split_cluster_names_the_shape_it_was_given():
    with pytest.raises(
        ValueError,
        match=r"^The 'cosine' parameter of split_cluster must have shape \(len\(members\), len\(members\)\) = "
        r"\(3, 3\)\. Got \(2, 2\) instead\.$",
    ):
        split_cluster([4, 5, 6], np.eye(2))


@pytest.mark.parametrize(
    "call, shape",
    [
        (lambda: NormSums().add(np.zeros((0, 3))), "(0, 3)"),
        (lambda: NormSums().add_rows([np.zeros((0, 3))]), "(0, 3)"),
        (lambda: update_norms([]), "(0, 0)"),
        (lambda: update_norms(np.zeros(3)), "(3,)"),
        (lambda: NormSums().norms(), "(0, 0)"),
        (lambda: NormSums().ratio(), "(0, 0)"),
    ],
)
def test_update_norms_refuses_no_update_or_a_vector_by_name_and_shape(call, shape):
    with pytest.raises(
        ValueError,
        match=r"^The 'updates' parameter of update_norms must be a non-empty \(m, d\) array\. Got shape "
        + re.escape(shape)
        + r" instead\.$",
    ):
        call()


def test_update_norms_of_updates_without_coordinates_are_zero():
    assert update_norms(np.zeros((3, 0))) == (0.0, 0.0, 0.0)


def _feed_block(sums: NormSums, rows: np.ndarray) -> None:
    sums.add(rows)


def _feed_rows(sums: NormSums, rows: np.ndarray) -> None:
    sums.add_rows(list(rows))


@pytest.mark.parametrize("feed", [_feed_block, _feed_rows])
def test_norms_of_float16_updates_beyond_float16s_range_are_summed_in_float64(feed):
    """Two updates (60000, 60000): squared norms 7.2e9 and a sum of 120000, both past float16's 65504."""
    sums = NormSums()
    feed(sums, np.full((2, 2), 60000.0, dtype=np.float16))
    expected = 60000.0 * np.sqrt(2.0)
    np.testing.assert_allclose(sums.norms(), (expected, expected, expected), rtol=1e-12)
    assert sums.count == 2


def test_norms_of_integer_updates_are_those_of_their_floats():
    rows = np.array([[3, 4], [-3, 4]])
    np.testing.assert_allclose(update_norms(rows), (4.0, 5.0, 5.0), rtol=1e-12)


def test_fold_rows_refuses_a_scalar_row_by_name_and_shape():
    with pytest.raises(
        ValueError,
        match=r"^The 'rows' parameter of fold_rows must hold vectors of one length 0\. "
        r"Got shape \(\) at row 0 instead\.$",
    ):
        fold_rows([np.float32(1.0), np.ones(2, dtype=np.float32)], np.zeros(2, dtype=np.int64), 1)


def test_fold_rows_sums_and_squares_float16_rows_in_float64():
    rows = [np.full(2, 60000.0, dtype=np.float16)] * 2
    squares, sums = fold_rows(rows, np.zeros(2, dtype=np.int64), 1)
    np.testing.assert_array_equal(squares, [7.2e9, 7.2e9])
    np.testing.assert_array_equal(sums, [[120000.0, 120000.0]])


def test_fold_rows_of_a_single_row_is_that_row():
    squares, sums = fold_rows([np.array([3.0, 4.0])], np.zeros(1, dtype=np.int64), 1)
    np.testing.assert_array_equal(squares, [25.0])
    np.testing.assert_array_equal(sums, [[3.0, 4.0]])


def test_fold_rows_refuses_a_row_of_another_length():
    with pytest.raises(ValueError, match=r"^The 'rows' parameter of fold_rows must hold vectors of one length 3\."):
        fold_rows([np.ones(3), np.ones(2)], np.zeros(2, dtype=np.int64), 1)


def test_fold_rows_with_a_sketch_needs_projected_of_its_shape_and_fills_it():
    rows = [np.arange(5.0, dtype=np.float32), np.ones(5, dtype=np.float32)]
    sketch = CountSketch(5, 3, 0)
    groups = np.zeros(2, dtype=np.int64)
    for projected in (None, np.zeros((2, 2), dtype=np.float32)):
        with pytest.raises(
            ValueError, match=r"^The 'projected' parameter of fold_rows must be an array of shape \(2, 3\)"
        ):
            fold_rows(rows, groups, 1, sketch=sketch, projected=projected)
    projected = np.zeros((2, 3), dtype=np.float32)
    fold_rows(rows, groups, 1, sketch=sketch, projected=projected)
    np.testing.assert_array_equal(projected, sketch.project(np.stack(rows)))


def test_fold_rows_without_squares_gives_an_empty_squares_array():
    squares, sums = fold_rows([np.ones(2), np.ones(2)], np.zeros(2, dtype=np.int64), 1, squares=False)
    assert squares.shape == (0,)
    np.testing.assert_array_equal(sums, [[2.0, 2.0]])


def test_fold_rows_in_several_slices_reads_each_row_once(monkeypatch):
    from common.clustering import bipartition, similarity

    monkeypatch.setattr(bipartition, "over_rows", lambda count, work: similarity.over_rows(count, work, threads=3))
    rows = [np.full(2, float(i)) for i in range(9)]
    groups = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0])
    squares, sums = fold_rows(rows, groups, 2)
    np.testing.assert_array_equal(squares, [2.0 * i * i for i in range(9)])
    np.testing.assert_array_equal(sums, [[20.0, 20.0], [16.0, 16.0]])
