"""The clustering signals: final layer (FedClust), class subspaces (PACFL, FLAG), model update (FL+HC)."""

import numpy as np
import pytest

from common.signals import SignalError
from common.signals.final_layer import FinalLayer
from common.signals.subspaces import ClassSubspaces
from common.signals.update import ModelUpdate


def test_final_layer_round_trip_and_vector():
    w, b = np.arange(6, dtype=np.float64).reshape(2, 3), np.array([10.0, 11.0])
    sig = FinalLayer.from_arrays(FinalLayer(w, b).to_arrays(), outputs=2, features=3)
    assert sig.weight.dtype == np.float32
    np.testing.assert_array_equal(sig.vector(), [0, 1, 2, 3, 4, 5, 10, 11])


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"weight": np.ones((2, 4), np.float32), "bias": np.ones(2, np.float32)}, r"expected \[2, 3\]"),
        ({"weight": np.ones((2, 3), np.float32)}, r"missing \['bias'\]"),
        ({"weight": np.full((2, 3), np.inf, np.float32), "bias": np.ones(2, np.float32)}, "NaN or Inf"),
    ],
)
def test_final_layer_rejects(arrays, message):
    with pytest.raises(SignalError, match=message):
        FinalLayer.from_arrays(arrays, outputs=2, features=3)


def test_model_update_round_trip_and_rejects():
    assert ModelUpdate.from_arrays(ModelUpdate(np.ones(5)).to_arrays(), size=5).delta.dtype == np.float32
    with pytest.raises(SignalError, match=r"expected \[4\]"):
        ModelUpdate.from_arrays({"delta": np.ones(5, np.float32)}, size=4)


def _subspaces(with_counts=True):
    q = np.linalg.qr(np.random.default_rng(0).normal(size=(8, 3)))[0]
    counts = np.array([5, 9]) if with_counts else None
    return ClassSubspaces(np.array([1, 4]), (q[:, :2], q[:, 2:]), counts)


def test_class_subspaces_round_trip_lookup_and_stack():
    sig = ClassSubspaces.from_arrays(_subspaces().to_arrays(), dim=8, num_classes=10, max_vectors=2, with_counts=True)
    assert sig.dim == 8 and sig.basis(4).shape == (8, 1) and sig.basis(0) is None
    assert sig.stacked().shape == (8, 3) and sig.counts.tolist() == [5, 9]
    free = ClassSubspaces.from_arrays(_subspaces(False).to_arrays(), dim=None, num_classes=10, max_vectors=3)
    assert free.counts is None and set(_subspaces(False).to_arrays()) == {"classes", "basis-1", "basis-4"}


def _arrays(**changes):
    arrays = _subspaces().to_arrays()
    arrays.update(changes)
    return arrays


@pytest.mark.parametrize(
    "arrays, message",
    [
        (_arrays(classes=np.array([4, 1])), "not strictly increasing"),
        (_arrays(classes=np.array([1, 10])), "not strictly increasing"),
        (_arrays(**{"basis-1": 2 * _subspaces().bases[0].astype(np.float32)}), "not orthonormal"),
        (_arrays(**{"basis-1": np.ones((7, 2), np.float32)}), "has shape \\[7, 2\\], expected \\[8"),
        (_arrays(counts=np.array([0, 3])), "count is below 1"),
        ({k: v for k, v in _subspaces().to_arrays().items() if k != "basis-4"}, r"missing \['basis-4'\]"),
    ],
)
def test_class_subspaces_rejects(arrays, message):
    with pytest.raises(SignalError, match=message):
        ClassSubspaces.from_arrays(arrays, dim=8, num_classes=10, max_vectors=2, with_counts=True)


def test_class_subspaces_rejects_too_many_vectors_and_unasked_counts():
    with pytest.raises(SignalError, match="has 2 columns"):
        ClassSubspaces.from_arrays(_subspaces().to_arrays(), dim=8, num_classes=10, max_vectors=1, with_counts=True)
    with pytest.raises(SignalError, match=r"unexpected \['counts'\]"):
        ClassSubspaces.from_arrays(_subspaces().to_arrays(), dim=8, num_classes=10, max_vectors=2)
