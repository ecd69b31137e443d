import pytest

from server.experiment import Experiment
from tests.helpers import small_run_config


def test_builds_every_part_from_run_config():
    exp = Experiment.from_run_config(small_run_config(strategy="fedprox", **{"fedprox-mu": 0.2}))
    assert exp.strategy == "fedprox" and exp.strategy_params.mu == 0.2
    assert exp.scenario.num_clients == 6 and exp.training.rounds == 3 and exp.model == "dnn"
    strategy = exp.build_strategy()
    assert type(strategy).name == "fedprox" and strategy.params.mu == 0.2


def test_initial_model_is_seeded():
    a = Experiment.from_run_config(small_run_config(seed=3)).initial_model()
    b = Experiment.from_run_config(small_run_config(seed=3)).initial_model()
    c = Experiment.from_run_config(small_run_config(seed=4)).initial_model()
    assert (a["head.weight"].numpy() == b["head.weight"].numpy()).all()
    assert not (a["head.weight"].numpy() == c["head.weight"].numpy()).all()


@pytest.mark.parametrize(
    "overrides, pattern",
    [
        ({"strategy": "nope"}, r"'strategy' parameter .* must be one of \{.*'fedavg'.*'local'"),
        ({"scenario": "nope"}, r"'scenario' parameter .* must be one of"),
        ({"dataset": "imagenet"}, r"'dataset' parameter .* must be one of"),
        ({"model": "gpt"}, r"'model' parameter .* must be one of"),
        ({"model": "lenet5"}, r"'model'.*28"),
        (
            {"dataset": "fashion-mnist", "labels-per-group": 11},
            (
                r"'labels-per-group' parameter of scenario 'label-groups' must be an int in the range \[1, 10\]\. "
                r"Got 11 instead"
            ),
        ),
        ({"num-clients": 0}, r"'num-clients'"),
        ({"fraction": 0.0}, r"'fraction' parameter of the run config must be a float in the range \(0.0, 1.0\]"),
        ({"fraction": 1.01}, r"'fraction'"),
        (
            {"device": "tpu"},
            r"'device' parameter of the run config must be 'auto', 'cpu', 'cuda' or 'cuda:N'\. Got 'tpu' instead",
        ),
        ({"fedprox-mu": -1.0, "strategy": "fedprox"}, r"'fedprox-mu' parameter of FedProx"),
    ],
)
def test_bad_input_names_the_key(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        Experiment.from_run_config(small_run_config(**overrides))


def test_impossible_partition_fails_when_building():
    exp = Experiment.from_run_config(small_run_config(**{"samples-per-label": 500}))
    with pytest.raises(ValueError, match="'samples-per-label' parameter of scenario 'label-groups' asks for more"):
        exp.partition()


def test_results_path_is_absolute_and_named():
    exp = Experiment.from_run_config(small_run_config(**{"results-dir": "out", "run-name": "r1"}))
    path = exp.results_path()
    assert path.is_absolute() and path.name == "r1" and path.parent.name == "out"
    auto = Experiment.from_run_config(small_run_config()).results_path().name
    assert auto.startswith("fedavg-label-groups-digits-s1-")
