"""Client-side clustering signals: per-class SVD bases."""

import numpy as np
import torch

from client.signals.subspaces import class_bases
from common.clustering.subspaces import principal_angles


def test_class_bases_recover_each_class_direction_and_counts():
    rng = np.random.default_rng(0)
    d = 12
    dirs = np.linalg.qr(rng.normal(size=(d, 2)))[0]
    x = np.vstack([np.outer(rng.normal(size=30), dirs[:, 0]), np.outer(rng.normal(size=5), dirs[:, 1])])
    y = np.r_[np.full(30, 3), np.full(5, 7)]
    sig = class_bases(x.reshape(-1, 3, 4), y, 2, torch.device("cpu"))
    assert sig.classes.tolist() == [3, 7] and sig.counts.tolist() == [30, 5]
    assert all(b.shape == (d, 2) for b in sig.bases)
    assert principal_angles(sig.basis(3)[:, :1], dirs[:, :1])[0] < 1e-3
    assert principal_angles(sig.basis(7)[:, :1], dirs[:, 1:])[0] < 1e-3
    np.testing.assert_allclose(sig.bases[0].T @ sig.bases[0], np.eye(2), atol=1e-5)
    small = class_bases(x[:2], y[:2], 5, torch.device("cpu"))
    assert small.bases[0].shape == (d, 2)


def test_final_layer_query_trains_by_steps_or_epochs_reproducibly():
    from flwr.app import ConfigRecord, RecordDict

    from client.signals.final_layer import final_layer
    from client.task import task_from_context
    from common import keys
    from server.experiment import Experiment
    from tests.helpers import small_run_config

    rc = small_run_config()
    task = task_from_context(rc, {"partition-id": 0})
    initial = Experiment.from_run_config(rc).initial_model()

    def head(steps):
        cfg = ConfigRecord(
            {
                keys.SERVER_ROUND: 1,
                keys.LOCAL_EPOCHS: 2,
                keys.BATCH_SIZE: 8,
                keys.LR: 0.05,
                keys.MOMENTUM: 0.0,
                keys.WEIGHT_DECAY: 0.0,
                keys.CLUSTER_EPOCHS: 1,
                keys.CLUSTER_STEPS: steps,
            }
        )
        return final_layer(task, RecordDict({keys.ARRAYS: initial, keys.CONFIG: cfg}))

    by_steps, by_epoch = head(3), head(0)
    assert set(by_steps) == {"weight", "bias"} and by_steps["weight"].shape == initial["head.weight"].shape
    np.testing.assert_array_equal(by_steps["weight"], head(3)["weight"])
    assert not np.allclose(by_steps["weight"], by_epoch["weight"])
    assert not np.allclose(by_steps["weight"], initial["head.weight"].numpy())
    # epochs: cluster-epochs (1), not the local epochs (2) the same config holds
    from client.task import train_local

    cfg = ConfigRecord({keys.SERVER_ROUND: 1, keys.BATCH_SIZE: 8, keys.LR: 0.05, keys.MOMENTUM: 0.0})
    cfg[keys.WEIGHT_DECAY] = 0.0
    one, two = (train_local(task, initial, cfg, epochs=e)[0].state_dict()["head.weight"].numpy().copy() for e in (1, 2))
    assert not np.allclose(one, two)
    np.testing.assert_array_equal(by_epoch["weight"], one)


def test_update_query_trains_exactly_cluster_steps_minibatches(monkeypatch):
    from flwr.app import ConfigRecord, RecordDict

    import client.task as task_module
    from client.signals.update import model_update
    from client.task import task_from_context
    from common import keys
    from server.experiment import Experiment
    from tests.helpers import small_run_config

    rc = small_run_config()
    task = task_from_context(rc, {"partition-id": 1})
    initial = Experiment.from_run_config(rc).initial_model()
    seen = []
    real_train = task_module.train_model

    def counting_train(model, x, y, **kwargs):
        seen.append((len(x), kwargs["batch_size"]))
        return real_train(model, x, y, **kwargs)

    monkeypatch.setattr(task_module, "train_model", counting_train)

    def update(steps):
        cfg = ConfigRecord(
            {
                keys.SERVER_ROUND: 4,
                keys.LOCAL_EPOCHS: 1,
                keys.BATCH_SIZE: 8,
                keys.LR: 0.05,
                keys.MOMENTUM: 0.0,
                keys.WEIGHT_DECAY: 0.0,
                keys.CLUSTER_STEPS: steps,
            }
        )
        return model_update(task, RecordDict({keys.ARRAYS: initial, keys.CONFIG: cfg}))["delta"]

    by_steps = update(3)
    assert seen == [(24, 8)]
    by_epochs = update(0)
    assert len(task.data.y_train) == 40
    assert seen == [(24, 8), (40, 8)]  # epochs: the train split once, not the step sampler
    np.testing.assert_array_equal(by_steps, update(3))
    assert np.linalg.norm(by_steps) > 0 and not np.allclose(by_steps, by_epochs)
