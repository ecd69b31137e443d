"""The load-and-faults benchmark's injected replies: late ones are dropped, malformed ones broken
as the hostile drills break them (tests/test_hostile_clients.py, the metric-range tests of
tests/test_reliability.py show the server rejecting those), each drawn per client and round."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from benchmarks.faults import BROKEN_ACCURACY, fault, malformed_draw
from client.faults import fault_draws
from common import keys

SEED = 1


def _reply(message_type, content):
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    msg = Message(RecordDict({keys.CONFIG: ConfigRecord({})}), dst_node_id=7, message_type=message_type)
    msg.metadata.__dict__["_message_id"] = "m1"
    return Message(content, reply_to=msg)


def _train_reply():
    arrays = ArrayRecord({"w": Array(np.ones((3, 2), dtype=np.float32)), "b": Array(np.zeros(2, dtype=np.float32))})
    return _reply("train", RecordDict({keys.ARRAYS: arrays, keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: 4})}))


def _first(pred):
    return next((r, p) for r in range(1, 50) for p in range(200) if pred(r, p))


def test_draws_hit_their_fractions_and_differ_from_the_fail_and_slow_draws():
    draws = np.array([malformed_draw(SEED, r, p) for r in range(1, 21) for p in range(200)])
    assert abs(np.mean(draws < 0.05) - 0.05) < 0.01
    slow = np.array([fault_draws(SEED, r, p)[1] for r in range(1, 21) for p in range(200)])
    assert abs(np.corrcoef(draws, slow)[0, 1]) < 0.05


def test_a_late_reply_is_dropped_and_a_malformed_one_is_broken_the_rest_untouched():
    r, p = _first(lambda r, p: fault_draws(SEED, r, p)[1] < 0.1)
    assert fault(SEED, p, 0.1, 0.05)(_train_reply(), r) is None
    r, p = _first(lambda r, p: fault_draws(SEED, r, p)[1] >= 0.1 and malformed_draw(SEED, r, p) < 0.05)
    broken = fault(SEED, p, 0.1, 0.05)(_train_reply(), r)
    assert broken is not None and bytes(broken.content[keys.ARRAYS]["b"].data) == b"\x93garbag"
    evaluated = _reply("evaluate", RecordDict({keys.METRICS: MetricRecord({keys.ACCURACY: 0.5})}))
    assert fault(SEED, p, 0.1, 0.05)(evaluated, r).content[keys.METRICS][keys.ACCURACY] == BROKEN_ACCURACY
    r, p = _first(lambda r, p: fault_draws(SEED, r, p)[1] >= 0.1 and malformed_draw(SEED, r, p) >= 0.05)
    kept = fault(SEED, p, 0.1, 0.05)(_train_reply(), r)
    assert np.array_equal(kept.content[keys.ARRAYS]["b"].numpy(), np.zeros(2, dtype=np.float32))
