"""benchmarks/scaling.py: every algorithm's step at tiny N, the exponent fit, the written table."""

import json
import math

import numpy as np
import pytest

from strategies import REGISTRY

from benchmarks import scaling

SHAPES = [("features.1.weight", (24, 40)), ("features.1.bias", (24,)), ("head.weight", (10, 24)), ("head.bias", (10,))]
SIZES = scaling.Sizes(sum(math.prod(s) for _, s in SHAPES), 24)
# every registered strategy has a server step measured, but those whose step is FedAvg's or none
ALGORITHMS = set(REGISTRY) - {"fedprox", "local"}


@pytest.fixture(scope="module")
def rows():
    return [scaling.measure(v, n, SIZES, SHAPES) for v in scaling.VARIANTS for n in (30, 60)]


def test_every_algorithm_is_measured_with_positive_times_and_memory(rows):
    assert {scaling.VARIANTS[r["variant"]].algorithm for r in rows} == ALGORITHMS
    assert {r["variant"] for r in rows} == set(scaling.VARIANTS)
    for r in rows:
        assert r["seconds"] > 0 and r["cpu_seconds"] > 0 and r["peak_mb"] > 0 and r["rss_mb"] >= 0, r


def test_the_steps_recover_the_planted_groups(rows):
    for r in rows:
        if r["variant"] in {"fedavg", "fedmedian"}:  # aggregation only: no clusters
            assert r["ari"] is None
        else:
            assert r["ari"] >= 0.9, r


def test_growth_exponent_recovers_a_known_power_law():
    ns = [100, 1000, 10_000]
    assert scaling.growth_exponent(ns, [3e-6 * n**1.5 for n in ns]) == pytest.approx(1.5)
    assert scaling.growth_exponent(ns, [0.2 * n**2 for n in ns]) == pytest.approx(2.0)
    assert scaling.growth_exponent([100], [1.0]) is None
    assert scaling.growth_exponent([100, 100], [1.0, 2.0]) is None  # two runs of one size: no slope
    assert scaling.growth_exponent([100, 100, 1000], [1.0, 1.0, 10.0]) == pytest.approx(1.0)
    rows = scaling.summarise(
        [{"variant": "fedavg", "n": n, "status": "ok", "seconds": 1e-3 * n, "peak_mb": None, "rss_mb": 2.0} for n in ns]
        + [{"variant": "flic", "n": 10, "status": "timed out"}]
    )
    assert rows[0]["time_exponent"] == pytest.approx(1.0) and rows[0]["memory_exponent"] == pytest.approx(0.0)
    assert rows[-1]["time_exponent"] is None


def test_the_table_files_are_written(tmp_path, rows):
    ok = [{**r, "status": "ok"} for r in rows] + [{"variant": "cfl-gp", "n": 10_000, "status": "not run: needs ~9 GB"}]
    table = scaling.summarise(ok)
    scaling.write(table, tmp_path, "dnn", SIZES)
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert len(saved["rows"]) == len(table) and saved["params"] == SIZES.params
    md = (tmp_path / "scaling.md").read_text()
    assert md.count("\n| ") == len(table) + 1 and "not run: needs ~9 GB" in md
    assert (tmp_path / "scaling.csv").read_text().splitlines()[0].startswith("algorithm,variant,signal,n,")


def test_planted_signals_are_seeded():
    a = scaling.vectors(scaling.planted(20, 4, np.random.default_rng(1)), 30, np.random.default_rng(2))
    b = scaling.vectors(scaling.planted(20, 4, np.random.default_rng(1)), 30, np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)
    assert sorted(np.concatenate(scaling.batches(23, np.random.default_rng(0))).tolist()) == list(range(23))


def test_aggregating_cohort_is_the_fraction_capped():
    assert scaling.cohort(10_000) == math.ceil(scaling.FRACTION * 10_000) < scaling.REPLY_CAP
    assert scaling.cohort(100_000) == scaling.REPLY_CAP
    assert scaling.cohort(1) == 1
    assert f"{scaling.REPLY_CAP:,}" in scaling.VARIANTS["fedavg"].signal(SIZES)
