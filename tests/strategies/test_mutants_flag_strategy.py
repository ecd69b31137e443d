"""FLAG's strategy step on hand-made signals: its fresh state, the cache of A and its tree per set of
signals, the configured linkage, the exact and the sampled form's result, the run's seed in the
update sketch and the sweep model: written for the mutation run's survivors in ``strategies.flag``."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from common.config import TrainingParams
from common.data import DatasetInfo
from common.models import build_model
from common.signals.subspaces import ClassSubspaces
from common.signals.update import ModelUpdate
from strategies import FLAG
from strategies.federation import ClientInfo
from strategies.flag import FLAGParams

EYE = np.eye(6)
GROUPS = np.repeat([0, 1], 4)


def _signals(seed: int = 0) -> list[tuple[ClassSubspaces, ModelUpdate]]:
    """Clients 0-3 hold classes 0-1, clients 4-7 classes 2-3; the two groups' updates point apart."""
    rng = np.random.default_rng(seed)
    out = []
    for p, g in enumerate(GROUPS):
        classes = np.array([0, 1]) if g == 0 else np.array([2, 3])
        update = np.eye(5)[g] + rng.normal(scale=0.01, size=5)
        out.append((ClassSubspaces(classes, tuple(EYE[:, [c]] for c in classes), np.array([10 + p, 30])), update))
    return [(s, ModelUpdate(u)) for s, u in out]


def _flag(params: FLAGParams, training: TrainingParams | None = None) -> FLAG:
    s = FLAG(training or TrainingParams(), params)
    s.clients = {p: ClientInfo(p, 1000 + p, 40, 5, int(GROUPS[p])) for p in range(len(GROUPS))}
    s.initial = ArrayRecord(
        {"head.weight": Array(np.zeros((4, 5), np.float32)), "head.bias": Array(np.zeros(4, np.float32))}
    )
    return s


def _same_partition(labels: np.ndarray, truth: np.ndarray) -> bool:
    return len(set(zip(labels.tolist(), truth.tolist(), strict=True))) == len(set(truth.tolist())) == len(set(labels))


def test_a_new_flag_keeps_the_run_params_and_has_no_matrices_sweep_or_choice():
    s = FLAG(TrainingParams(seed=7), FLAGParams(alpha=0.5))
    assert s.training.seed == 7 and s.params.alpha == 0.5
    assert s.data_matrix is None and s.gradient_matrix is None and s.chosen_alpha is None
    assert s.sweep == [] and s.sweep_initial is None


def test_proximity_and_its_tree_are_made_once_per_set_of_signals():
    s = _flag(FLAGParams(alpha=0.5))
    signals = _signals()
    a, tree = s._proximity(signals)
    again = s._proximity(signals)
    assert again[0] is a and again[1] is tree and tree.shape == (7, 4)
    reversed_a = s.distances(signals[::-1])
    np.testing.assert_allclose(reversed_a, a[::-1, ::-1], atol=1e-12)
    assert not np.allclose(reversed_a, a)


def test_one_client_is_a_cluster_of_its_own():
    s = _flag(FLAGParams(alpha=0.5))
    found = s.cluster_signals(_signals()[:1])
    assert found.labels.tolist() == [0] and found.distances.shape == (1, 1)


@pytest.mark.parametrize(("linkage", "num_clusters"), [("single", 1), ("average", 2), ("complete", 2)])
def test_the_cut_follows_the_configured_linkage(linkage, num_clusters):
    """Gradient only: updates at 0, 45 and 90 degrees give A = [[0, .5, 1], [.5, 0, .5], [1, .5, 0]];
    at 0.6 single linkage chains all three, average (0.75) and complete (1) keep the third apart."""
    s = _flag(FLAGParams(alpha=0.6, beta=0.0, linkage=linkage))
    basis = ClassSubspaces(np.array([0]), (EYE[:, [0]],), np.array([5]))
    updates = [np.array([1.0, 0.0]), np.array([1.0, 1.0]) / np.sqrt(2), np.array([0.0, 1.0])]
    found = s.cluster_signals([(basis, ModelUpdate(u)) for u in updates])
    np.testing.assert_allclose(found.distances, [[0, 0.5, 1], [0.5, 0, 0.5], [1, 0.5, 0]], atol=1e-12)
    assert len(set(found.labels.tolist())) == num_clusters


@pytest.mark.parametrize("sample_above", [0, 4])
def test_the_exact_form_returns_its_a_and_the_sampled_form_no_matrix(sample_above):
    s = _flag(FLAGParams(alpha=0.5, sample_above=sample_above))
    signals = _signals()
    found = s.cluster_signals(signals)
    assert _same_partition(found.labels, GROUPS) and found.silhouette is None
    if sample_above:
        assert found.distances is None and s._sample(signals) is not None
    else:
        assert found.distances is s.distances(signals) and s._sample(signals) is None


def test_updates_are_sketched_with_the_runs_seed(monkeypatch):
    """Sketch thresholds lowered so that 5-coordinate updates are sketched to 2."""
    from common.clustering import similarity

    monkeypatch.setattr(similarity, "AUTO_SKETCH_BYTES", 0)
    monkeypatch.setattr(similarity, "AUTO_SKETCH_DIM", 2)
    gradients = []
    for seed in (3, 3, 4):
        s = _flag(FLAGParams(alpha=0.5), TrainingParams(seed=seed))
        s.distances(_signals())
        gradients.append(s.gradient_matrix)
    np.testing.assert_array_equal(gradients[0], gradients[1])
    assert not np.allclose(gradients[0], gradients[2])


def test_the_sweep_model_starts_from_the_runs_seed():
    info = DatasetInfo("digits", "classification", 10, (64,))
    s = FLAG(TrainingParams(), FLAGParams(flag_sweep_model="linear"))
    s.prepare_sweep(info, seed=5)
    for seed, same in ((5, True), (0, False)):
        expected = build_model("linear", (64,), 10, seed).state_dict()
        got = {k: v.numpy() for k, v in s.sweep_initial.items()}
        assert all(np.array_equal(got[k], t.numpy()) for k, t in expected.items()) == same
