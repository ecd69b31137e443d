"""A process serving many simulated clients builds one module and reads the data source once.

Nothing of one client's message may reach another's: every use of the shared module loads the
server's arrays first, and a client's own config still decides its partition.
"""

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from client import task as client_task
from client.app import app
from common import keys
from common.models import build_model
from common.records import read_float
from server.experiment import Experiment
from tests.helpers import small_run_config


def _evaluate(content: RecordDict, rc: dict, pid: int) -> tuple[float, float]:
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    msg = Message(content, dst_node_id=7, message_type="evaluate")
    msg.metadata.__dict__["_message_id"] = f"m{pid}"
    ctx = Context(
        run_id=1, node_id=7, node_config={"partition-id": pid, "num-partitions": 6}, state=RecordDict(), run_config=rc
    )
    metrics = app(msg, ctx).content[keys.METRICS]
    return read_float(metrics, keys.LOSS, "reply"), read_float(metrics, keys.ACCURACY, "reply")


def _train_config() -> ConfigRecord:
    return ConfigRecord(
        {
            keys.SERVER_ROUND: 1,
            keys.LOCAL_EPOCHS: 2,
            keys.BATCH_SIZE: 4,
            keys.LR: 0.5,
            keys.MOMENTUM: 0.0,
            keys.WEIGHT_DECAY: 0.0,
        }
    )


def test_clients_of_one_process_share_one_module_and_see_only_the_arrays_sent_to_them():
    rc = small_run_config()
    a = client_task.task_from_context(dict(rc), {"partition-id": 0})
    b = client_task.task_from_context(dict(rc), {"partition-id": 3})
    assert a is not b and a.partition_id == 0 and b.partition_id == 3
    sent = Experiment.from_run_config(rc).initial_model()
    assert a.model(sent) is b.model(sent)
    # client 0 trains the shared module far from what the server sent ...
    trained, _ = client_task.train_local(a, sent, _train_config())
    moved = ArrayRecord(trained.state_dict())
    assert not np.array_equal(moved["head.weight"].numpy(), sent["head.weight"].numpy())
    # ... and client 3 evaluates exactly the sent model, as a freshly built module holding it would
    fresh = build_model(b.model_name, b.info.input_shape, b.info.num_classes, seed=b.seed + 1)
    fresh.load_state_dict(sent.to_torch_state_dict(), strict=True)
    for name, value in b.model(sent).state_dict().items():
        assert torch.equal(value, fresh.state_dict()[name]), name
    content = RecordDict({keys.ARRAYS: sent})
    before = _evaluate(content, dict(rc), 3)
    client_task.train_local(a, moved, _train_config())
    assert _evaluate(content, dict(rc), 3) == before


def test_another_model_or_device_gets_its_own_module():
    shape = (1, 8, 8)
    one = client_task.shared_module("dnn", shape, 10, 0, "cpu")
    assert client_task.shared_module("dnn", shape, 10, 0, "cpu") is one
    assert client_task.shared_module("linear", shape, 10, 0, "cpu") is not one
    assert client_task.shared_module("dnn", shape, 10, 0, "cuda:1") is not one
    assert client_task.shared_module("dnn", shape, 4, 0, "cpu") is not one


def test_the_data_source_is_read_once_per_run_config_values_and_follows_every_change():
    rc = small_run_config()
    source = client_task._source(dict(rc), {"partition-id": 0, "num-partitions": 6})
    # a copy of the same values (each message unpickles its own) and another client: the same source
    assert client_task._source(dict(rc), {"partition-id": 5, "num-partitions": 6}) is source
    # any changed value of the run config, or a node's own data key, gives its own source
    other = client_task._source({**rc, "seed": rc["seed"] + 1}, {"partition-id": 0})
    assert other is not source and other.scenario.seed == rc["seed"] + 1
    own = client_task._source(dict(rc), {"partition-id": 0, "data-dir": "/elsewhere"})
    assert own is not source and own.data_dir == "/elsewhere"
    # partitions differ by the client's id, read from its own node config every time
    a = client_task.task_from_context(dict(rc), {"partition-id": 1})
    b = client_task.task_from_context(dict(rc), {"partition-id": 2})
    assert not np.array_equal(a.data.x_train, b.data.x_train)


def test_a_bad_value_is_refused_on_every_message_not_cached():
    rc = {**small_run_config(), "samples-per-label": -1}
    for _ in range(2):
        with pytest.raises(ValueError, match="samples-per-label"):
            client_task.task_from_context(dict(rc), {"partition-id": 0})


def test_an_unhashable_run_config_value_is_read_without_the_cache():
    rc = small_run_config()
    assert client_task._source({**rc, "unused": [1, 2]}, {"partition-id": 0}) == client_task._source(
        dict(rc), {"partition-id": 0}
    )
