"""What the one-shot strategies ask their clients for and which replies they keep, and PACFL's sampled
step: written for the mutation run's survivors in ``strategies.pacfl`` and ``strategies.flhc``."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from common.clustering import oneshot, subspaces
from common.config import TrainingParams
from common.signals.subspaces import ClassSubspaces
from strategies import FLHC, PACFL
from strategies.flhc import FLHCParams
from strategies.pacfl import ClassBases, PACFLParams

HEAD = ArrayRecord({"head.weight": Array(np.zeros((2, 3), np.float32)), "head.bias": Array(np.zeros(2, np.float32))})


def _bases(dim: int) -> ClassSubspaces:
    return ClassSubspaces(np.array([0]), (np.eye(dim)[:, :1],))


def _asked(strategy, replies: dict[int, ClassSubspaces]) -> list[dict]:
    """Make ``strategy.query_signal`` answer ``replies``; the keyword arguments of each query."""
    asked: list[dict] = []

    def query_signal(action, pids, server_round, from_arrays, **kwargs):
        asked.append(kwargs)
        return {p: replies[p] for p in pids if p in replies}

    strategy.query_signal = query_signal
    return asked


def _pacfl() -> PACFL:
    s = PACFL(TrainingParams(), PACFLParams(num_clusters=2))
    s.initial = HEAD
    return s


def test_pacfl_asks_for_the_heads_classes_and_keeps_the_bases_of_the_most_common_row_count():
    s = _pacfl()
    asked = _asked(s, {0: _bases(6), 1: _bases(4), 2: _bases(4)})
    got = s.collect([0, 1, 2], 1)
    assert sorted(got) == [1, 2]
    assert (asked[0]["num_classes"], asked[0]["max_vectors"], asked[0]["dim"]) == (2, 3, None)


def test_pacfl_keeps_the_newcomers_whose_row_count_is_the_clustered_clients():
    s = _pacfl()
    s.signals = {p: _bases(6) for p in range(3)}
    _asked(s, {5: _bases(4), 6: _bases(4), 7: _bases(6)})
    assert sorted(s.collect([5, 6, 7], 3)) == [7]


def test_pacfl_above_the_sample_size_draws_its_sample_with_the_runs_generator(monkeypatch):
    monkeypatch.setattr(oneshot, "SAMPLE_SIZE", 4)
    monkeypatch.setattr(subspaces, "SAMPLE_SIZE", 4)
    e = np.eye(4)
    signals = [ClassSubspaces(np.array([0]), (e[:, [p % 2]],)) for p in range(7)]
    s = PACFL(TrainingParams(seed=3), PACFLParams(num_clusters=2, pacfl_measure="smallest"))
    twin = np.random.default_rng()
    twin.bit_generator.state = s.rng.bit_generator.state
    found = s.cluster_signals(signals)
    want = oneshot.pacfl_clusters(ClassBases(signals), s.hc_cut, "smallest", twin)
    assert found.distances is None
    np.testing.assert_array_equal(found.labels, want.labels)
    assert s.rng.bit_generator.state == twin.bit_generator.state


def test_flhc_asks_for_updates_of_the_global_models_float_count():
    s = FLHC(TrainingParams(), FLHCParams(num_clusters=2))
    s.models = [HEAD]
    asked = _asked(s, {})
    s.collect([0, 1], 2)
    assert asked[0]["size"] == 8 and asked[0]["models"] == [HEAD]


@pytest.mark.parametrize("dims", [[4, 4, 6], [6, 4, 4]])
def test_pacfl_drops_a_minority_row_count_wherever_it_comes(dims):
    s = _pacfl()
    _asked(s, {p: _bases(d) for p, d in enumerate(dims)})
    assert sorted(s.collect([0, 1, 2], 1)) == [p for p, d in enumerate(dims) if d == 4]
