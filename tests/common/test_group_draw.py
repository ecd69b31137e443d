"""label-groups never claims more groups than it populated; "fill" populates every group it can."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from common.scenarios import ScenarioConfig, build_partition, populated_groups

SMALL = {"dataset": "digits", "num-clients": 6, "groups": 2, "samples-per-label": 20, "seed": 0}


def _partition(**kw):
    return build_partition(ScenarioConfig.from_run_config({**SMALL, **kw}))


def test_the_issue_case_six_clients_two_groups_seed_0(caplog):
    """The paper's draw puts all 6 clients in group 0: one group is claimed, and a warning says why."""
    with caplog.at_level(logging.WARNING, logger="flwr"):
        paper = _partition(**{"group-draw": "paper"})
    assert paper.num_groups == 1 and {c.group for c in paper.clients} == {0}
    assert any("1 of the 2 groups got no client" in r.getMessage() for r in caplog.records)
    filled = _partition()
    assert filled.num_groups == 2 and sorted({c.group for c in filled.clients}) == [0, 1]
    # the label sets follow the groups: the clients of one group hold the same two labels, the groups differ
    labels = {c.group: frozenset(np.unique(filled.dataset.y_train[c.train_idx]).tolist()) for c in filled.clients}
    for c in filled.clients:
        assert frozenset(np.unique(filled.dataset.y_train[c.train_idx]).tolist()) == labels[c.group]
    assert len(set(labels.values())) == 2


@pytest.mark.parametrize("seed", range(8))
def test_fill_populates_every_group_and_keeps_a_full_draw_unchanged(seed):
    rng = np.random.default_rng(seed)
    drawn = rng.integers(5, size=7)
    before = np.random.default_rng(seed + 100).bit_generator.state
    filled = populated_groups(drawn, 5, "fill", np.random.default_rng(seed + 100))
    assert set(filled.tolist()) == set(range(5))
    moved = np.flatnonzero(filled != drawn)
    assert len(moved) == 5 - len(set(drawn.tolist()))  # one client per empty group, no more
    full = np.arange(10) % 5
    gen = np.random.default_rng(seed + 100)
    np.testing.assert_array_equal(populated_groups(full, 5, "fill", gen), full)
    assert gen.bit_generator.state == before  # no draw taken: the rest of the partition is unchanged


def test_fewer_clients_than_groups_claims_only_the_populated_ones(caplog):
    with caplog.at_level(logging.WARNING, logger="flwr"):
        p = _partition(**{"num-clients": 3, "groups": 5})
    assert p.num_groups == len({c.group for c in p.clients}) == 3
    assert sorted({c.group for c in p.clients}) == list(range(3))  # renumbered 0..G'-1
    assert any("fewer clients (3) than groups" in r.getMessage() for r in caplog.records)


def test_export_claims_the_populated_groups(tmp_path):
    from common.export import export_partition

    written = export_partition(_partition(**{"group-draw": "paper"}), tmp_path / "fed", "npz")
    fed = json.loads(written.read_text())
    assert fed["num-groups"] == 1 == len(set(fed["true-groups"]))


def test_an_unknown_draw_names_the_key():
    with pytest.raises(ValueError, match=r"The 'group-draw' parameter of scenario 'label-groups' must be one of"):
        _partition(**{"group-draw": "random"})
