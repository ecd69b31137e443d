"""The k-models' random partition refuses no clusters by name and takes one: written for the
mutation run's survivors in ``common.clustering.kmodels`` (the check's name, owner or bound changed)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common.clustering import kmodels


def test_random_partition_refuses_no_clusters_naming_the_parameter_the_function_and_the_range():
    with pytest.raises(
        ValueError,
        match="^"
        + re.escape("The 'num_clusters' parameter of random_partition must be an int >= 1. Got 0 instead.")
        + "$",
    ):
        kmodels.random_partition([0, 1], 0, np.random.default_rng(0))


def test_random_partition_into_one_cluster_puts_every_client_in_it():
    assert kmodels.random_partition([3, 1], 1, np.random.default_rng(0)) == {1: 0, 3: 0}
