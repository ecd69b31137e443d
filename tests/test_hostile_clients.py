"""Hostile and broken clients (tests/helpers/hostile.py) against the real strategies, in process.

Each fault comes from one partition; the run must finish, the fault must be logged for that
client only, and every cluster model must stay finite and keep the initial model's dtypes.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict

from common import keys
from common.aggregation import coordinate_median, weighted_average
from common.signals.update import ModelUpdate
from server.experiment import Experiment
from strategies.replies import (
    ReplyFault,
    decode_arrays,
    decode_signal,
    decode_train_reply,
)
from tests.helpers import small_run_config
from client.faults import npy_bytes, relabelled
from tests.helpers.hostile import INFLATED, hostile_app
from server.inprocess import InProcessGrid

HOSTILE = 2


def _run(strategy: str, faults: dict[int, str], rounds: int = 3, **overrides):
    rc = small_run_config(strategy=strategy, rounds=rounds, fraction=1.0, **overrides)
    exp = Experiment.from_run_config(rc)
    s = exp.build_strategy()
    initial = exp.initial_model()
    s.start(InProcessGrid(hostile_app(faults), rc, rc["num-clients"]), initial, expected_clients=rc["num-clients"])
    return s, initial


def _rejected_clients(text: str) -> set[int]:
    return {int(p) for p in re.findall(r"client (\d+) reply rejected", text)}


def _assert_models_sound(strategy, initial: ArrayRecord) -> None:
    for model in strategy.models:
        assert list(model.keys()) == list(initial.keys())
        for name, arr in model.items():
            values = arr.numpy()
            assert values.dtype == initial[name].numpy().dtype and values.shape == tuple(initial[name].shape)
            assert np.all(np.isfinite(values))


# ----------------------------------------------------------------- decoding trusts no label
def _reference() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.ones((2, 3), dtype=np.float32)), "n": Array(np.array(7, dtype=np.int64))})


@pytest.mark.parametrize(
    "data, fault",
    [
        (b"\x93garbag", "cannot be decoded"),
        (npy_bytes(np.zeros(3, dtype=np.float32)), "holding float32[3] data"),
        (npy_bytes(np.zeros((2, 3), dtype=np.float64)), "holding float64[2, 3] data, expected float32[2, 3]"),
        (npy_bytes(np.zeros((2, 3), dtype=np.float32))[:-4], "expected 24"),
        (npy_bytes(np.zeros((2, 3), dtype=np.float32)) + b"xxxx", "expected 24"),
    ],
    ids=["garbage", "other-shape", "float64-as-float32", "short", "long"],
)
def test_decoding_checks_the_bytes_not_the_labels(data, fault):
    ref = _reference()
    sent = ArrayRecord({"w": relabelled(ref["w"], data), "n": ref["n"]})
    with pytest.raises(ReplyFault, match=re.escape(fault)):
        decode_arrays(sent, ref)


def test_decoding_gives_the_reference_dtype_and_keeps_0d_integer_buffers():
    ref = _reference()
    out = decode_arrays(ArrayRecord({"w": Array(np.full((2, 3), 0.5, dtype=np.float32)), "n": ref["n"]}), ref)
    assert out["w"].dtype == np.float32 and out["w"].flags.writeable
    assert out["n"].shape == () and out["n"].dtype == np.int64 and int(out["n"]) == 7


def test_signal_with_garbage_bytes_is_a_reply_fault():
    good = ArrayRecord({"delta": Array(np.zeros(4, dtype=np.float32))})
    content = RecordDict({keys.SIGNAL: ArrayRecord({"delta": relabelled(good["delta"], b"\x93garbag")})})
    with pytest.raises(ReplyFault, match="'delta' cannot be decoded"):
        decode_signal(content, ModelUpdate.from_arrays, size=4)
    content = RecordDict(
        {keys.SIGNAL: ArrayRecord({"delta": relabelled(good["delta"], npy_bytes(np.zeros(4, dtype=np.float64)))})}
    )
    with pytest.raises(ReplyFault, match="holding float64"):
        decode_signal(content, ModelUpdate.from_arrays, size=4)


def test_aggregation_is_cast_to_the_reference_dtype():
    ref = {"w": np.zeros(2, dtype=np.float32), "n": np.array(3, dtype=np.int64)}
    odd = {"w": np.ones(2, dtype=np.float64), "n": np.array(4.0)}
    for merged in (weighted_average([odd, ref], [1, 1], ref), coordinate_median([odd, ref], ref)):
        assert merged["w"].dtype == np.float32 and merged["n"].dtype == np.int64
        assert isinstance(merged["n"], np.ndarray) and merged["n"].shape == ()
        Array(merged["n"])  # Flower's Array takes it (it rejects numpy scalars)


# ----------------------------------------------------------------- whole runs, one hostile client
@pytest.mark.parametrize("fault", ["garbage", "other-shape", "float64"])
@pytest.mark.parametrize("strategy", ["fedavg", "fedmedian"])
def test_bad_train_bytes_cost_only_that_client(strategy, fault, caplog):
    with caplog.at_level(logging.WARNING):
        s, initial = _run(strategy, {HOSTILE: fault})
    assert _rejected_clients(caplog.text) == {HOSTILE}
    # the honest five stay accepted in every round: one reply cannot change the cluster's dtype
    assert [r.train_replies for r in s.history] == [5, 5, 5]
    assert [r.rejected for r in s.history] == [1, 1, 1]
    _assert_models_sound(s, initial)


@pytest.mark.parametrize(
    "strategy, overrides",
    [
        ("fedclust", {"num-clusters": 2}),
        ("flhc", {"flhc-warmup-rounds": 1, "num-clusters": 2}),
    ],
)
def test_bad_signal_bytes_cost_only_that_client(strategy, overrides, caplog):
    with caplog.at_level(logging.WARNING):
        s, initial = _run(strategy, {HOSTILE: "garbage"}, **overrides)
    signal_lines = [line for line in caplog.text.splitlines() if "query." in line and "rejected" in line]
    assert signal_lines and all(f"client {HOSTILE} reply rejected" in line for line in signal_lines)
    assert _rejected_clients(caplog.text) == {HOSTILE}
    assert len(s.history) == 3
    _assert_models_sound(s, initial)


def _distance_to_constant(strategy) -> float:
    floats = [a.numpy() for a in strategy.models[0].values() if np.issubdtype(a.numpy().dtype, np.floating)]
    return float(np.mean([np.abs(v - 5.0).mean() for v in floats]))


def test_inflated_size_claims_are_capped_against_the_federation(caplog):
    with caplog.at_level(logging.WARNING):
        s, initial = _run("fedavg", {HOSTILE: "inflated"}, rounds=1)
    sizes = sorted(c.num_train for p, c in s.clients.items() if p != HOSTILE)
    cap = int(10 * np.median([*sizes, INFLATED]))
    assert f"client {HOSTILE} claims num-examples {INFLATED}; its weight is capped at {cap}" in caplog.text
    assert caplog.text.count("weight is capped") == 1 and s.history[0].capped == 1
    # uncapped, the constant model takes the cluster over; capped, it counts as `cap` examples
    uncapped, _ = _run("fedavg", {HOSTILE: "inflated"}, rounds=1, **{"weight-cap": 0.0})
    assert _distance_to_constant(uncapped) < 1e-3
    assert _distance_to_constant(s) > 0.5
    median, _ = _run("fedavg", {HOSTILE: "inflated"}, rounds=1, aggregation="median")
    assert _distance_to_constant(median) > 4.0
    _assert_models_sound(median, initial)


def test_a_node_claiming_anothers_partition_is_left_out_and_logged(caplog):
    with caplog.at_level(logging.WARNING):
        s, initial = _run("fedavg", {5: "duplicate-id"}, rounds=1)
    assert "refused: it claims client 0, but client 0 is held by node 1000" in caplog.text
    assert sorted(s.clients) == [0, 1, 2, 3, 4] and s.clients[0].node_id == 1000
    _assert_models_sound(s, initial)


def test_reply_decoding_with_num_train_is_unchanged_for_good_replies():
    ref = _reference()
    content = RecordDict({keys.ARRAYS: ref, keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: 3, keys.TRAIN_LOSS: 0.5})})
    update = decode_train_reply(content, ref, num_train=3)
    assert update.num_examples == 3 and np.array_equal(update.arrays["w"], ref["w"].numpy())
