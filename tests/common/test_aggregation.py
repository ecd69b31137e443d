import numpy as np
import pytest
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from common.aggregation import weighted_average


def _models(rng, n):
    return [
        {"w": rng.normal(size=(4, 3)).astype(np.float32), "b": rng.normal(size=3).astype(np.float32)} for _ in range(n)
    ]


def test_equals_flower_fedavg_aggregation():
    rng = np.random.default_rng(0)
    models = _models(rng, 5)
    weights = [10, 50, 3, 7, 30]
    ours = weighted_average(models, weights)
    records = [
        RecordDict({"arrays": ArrayRecord([m["w"], m["b"]]), "metrics": MetricRecord({"num-examples": w})})
        for m, w in zip(models, weights, strict=True)
    ]
    flower = aggregate_arrayrecords(records, "num-examples").to_numpy_ndarrays()
    np.testing.assert_allclose(ours["w"], flower[0], rtol=1e-6)
    np.testing.assert_allclose(ours["b"], flower[1], rtol=1e-6)
    assert ours["w"].dtype == np.float32


def test_single_model_is_returned_unchanged_and_zero_weight_ignored():
    rng = np.random.default_rng(1)
    a, b = _models(rng, 2)
    out = weighted_average([a, b], [1.0, 0.0])
    np.testing.assert_array_equal(out["w"], a["w"])


def test_integer_buffers_are_rounded():
    out = weighted_average([{"n": np.array(3, dtype=np.int64)}, {"n": np.array(4, dtype=np.int64)}], [1, 2])
    assert out["n"].dtype == np.int64 and int(out["n"]) == 4


@pytest.mark.parametrize("weights", [[], [1.0], [0.0, 0.0], [-1.0, 2.0], [np.nan, 1.0]])
def test_bad_weights(weights):
    models = _models(np.random.default_rng(2), 2)
    with pytest.raises(ValueError, match="'weights' parameter of weighted_average"):
        weighted_average(models, weights)


def test_shape_mismatch_and_empty():
    with pytest.raises(ValueError, match="'models' parameter"):
        weighted_average([], [])
    with pytest.raises(ValueError, match="must have shape"):
        weighted_average([{"w": np.zeros(2)}, {"w": np.zeros(3)}], [1, 1])


def test_coordinate_median_takes_the_middle_value_per_coordinate_and_resists_outliers():
    from common.aggregation import coordinate_median

    models = [
        {"w": np.array([[1.0, 5.0]], dtype=np.float32), "n": np.array(1, dtype=np.int64)},
        {"w": np.array([[2.0, -7.0]], dtype=np.float32), "n": np.array(2, dtype=np.int64)},
        {"w": np.array([[1000.0, 4.0]], dtype=np.float32), "n": np.array(6, dtype=np.int64)},
    ]
    out = coordinate_median(models)
    np.testing.assert_array_equal(out["w"], [[2.0, 4.0]])
    assert out["w"].dtype == np.float32 and out["n"] == 2
    even = coordinate_median(models[:2])
    np.testing.assert_allclose(even["w"], [[1.5, -1.0]])


def test_coordinate_median_refuses_empty_and_mismatched_models():
    from common.aggregation import coordinate_median

    with pytest.raises(ValueError, match="'models' parameter of coordinate_median"):
        coordinate_median([])
    with pytest.raises(ValueError, match="Array 'w' must have shape"):
        coordinate_median([{"w": np.zeros(2)}, {"w": np.zeros(3)}])


def test_coordinate_median_in_bands_equals_numpys_median_of_the_whole_stack(monkeypatch):
    from common import aggregation

    rng = np.random.default_rng(3)
    models = [{"w": rng.standard_normal((6, 7)).astype(np.float32), "b": rng.standard_normal(())} for _ in range(9)]
    monkeypatch.setattr(aggregation, "MEDIAN_BAND_BYTES", 8 * 9 * 4)  # 4 coordinates at a time
    out = aggregation.coordinate_median(models)
    expected = np.median(np.stack([m["w"].astype(np.float64) for m in models]), axis=0).astype(np.float32)
    np.testing.assert_array_equal(out["w"], expected)
    assert out["b"].shape == () and out["b"] == np.median([float(m["b"]) for m in models])
