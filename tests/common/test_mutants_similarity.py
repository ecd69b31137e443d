"""The update store's factory and the sketches' input: written for the mutation run's survivors in
``common.clustering.similarity`` (``update_similarity``'s arguments dropped or swapped, its sketch or
its ``dense`` flag lost; the sketches' float32 input)."""

from __future__ import annotations

import numpy as np

from common.clustering import similarity as sim


def test_update_similarity_sketches_with_the_given_dimension_and_seed_and_keeps_s_dense_for_few_clients():
    store = sim.update_similarity(4, 10, 3, 7)
    assert store.dense is True
    assert isinstance(store.sketch, sim.CountSketch)
    x = np.arange(10.0)
    np.testing.assert_array_equal(store.sketch.project(x), sim.CountSketch(10, 3, 7).project(x))
    plain = sim.update_similarity(4, 10, 0, 7)
    assert plain.sketch is None and plain.dense is True


def test_update_similarity_of_many_large_updates_sketches_automatically_and_keeps_no_dense_s():
    """100,000 clients of 10,000 floats are 4 GB (> AUTO_SKETCH_BYTES): sketched though sketch_dim is 0;
    above SAMPLE_ABOVE clients S is not kept."""
    n, dim = 100_000, 10_000
    store = sim.update_similarity(n, dim, 0, 0)
    assert store.dense is False
    assert isinstance(store.sketch, sim.CountSketch)
    assert store.sketch.sketch_dim == sim.auto_sketch_dim(n, dim, 0) > 0


def test_sketches_project_float64_input_to_float32_rows():
    x = np.random.default_rng(0).normal(size=(3, 10))
    for sketch in (sim.CountSketch(10, 4, 0), sim.GaussianSketch(10, 4, 0)):
        out = sketch.project(x)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, sketch.project(x.astype(np.float32)))


def test_the_similarity_without_a_dense_s_is_one_plus_the_cosines_as_with_it() -> None:
    updates = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, -2.0, 0.0]], dtype=np.float32)
    want = 1.0 + np.array([[1.0, 0.5**0.5, 0.0], [0.5**0.5, 1.0, -(0.5**0.5)], [0.0, -(0.5**0.5), 1.0]])
    for dense in (True, False):
        store = sim.UpdateSimilarity(dense=dense)
        store.update([7, 3, 5], updates)
        np.testing.assert_allclose(store.matrix(), want, atol=1e-6)
        np.testing.assert_allclose(store.matrix([5, 7]), want[np.ix_([2, 0], [2, 0])], atol=1e-6)
