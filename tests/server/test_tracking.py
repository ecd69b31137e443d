"""Per-round metrics reach TensorBoard: the event files read back hold each round's numbers."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from common.config import OutputParams
from server.tracking import SCALARS, TensorBoardLogger, open_loggers, scalars


def _read(logdir):
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_each_round_is_read_back_at_its_step(tmp_path):
    logger = TensorBoardLogger(tmp_path / "tb")
    logger.log_round(
        {
            "round": 1,
            "accuracy": None,
            "ari": 0.0,
            "num-clusters": 1,
            "bytes-up-signal": 0,
            "round-seconds": 1.5,
            "phase": "pretrain",
        }
    )
    logger.log_round(
        {
            "round": 2,
            "accuracy": 0.75,
            "ari": 1.0,
            "num-clusters": 5,
            "bytes-up-signal": 8000,
            "round-seconds": 2.25,
            "phase": "cluster",
        }
    )
    logger.close()
    events = _read(tmp_path / "tb")
    assert events["accuracy/mean"] == [(2, 0.75)]
    assert events["clustering/ari"] == [(1, 0.0), (2, 1.0)]
    assert events["clustering/num-clusters"] == [(1, 1.0), (2, 5.0)]
    assert events["bytes/up-signal"] == [(1, 0.0), (2, 8000.0)]
    assert events["time/round-seconds"] == [(1, 1.5), (2, 2.25)]


def test_scalars_skip_missing_and_non_numbers():
    assert scalars({"round": 3, "accuracy": None, "phase": "train", "failures": 2, "ari": True}) == {
        "clients/failures": 2.0
    }
    assert len(set(SCALARS.values())) == len(SCALARS)


@pytest.mark.parametrize("on", [False, True])
def test_open_loggers_follows_the_tensorboard_key(tmp_path, on):
    loggers = open_loggers(OutputParams(tensorboard=on), tmp_path)
    assert [type(x).__name__ for x in loggers] == (["TensorBoardLogger"] if on else [])
    for x in loggers:
        x.close()
    assert (tmp_path / "tensorboard").exists() is on


def test_a_non_boolean_tensorboard_value_is_rejected():
    with pytest.raises(ValueError, match="The 'tensorboard' parameter of the run config must be a bool"):
        OutputParams(tensorboard="yes")
