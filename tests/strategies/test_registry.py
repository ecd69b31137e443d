import pytest

from common.config import TrainingParams, params_from_run_config
from strategies import REGISTRY, FedProx, get_strategy
from strategies.fedprox import FedProxParams


def test_registry_names_match_classes():
    assert {"fedavg", "local", "fedprox"} <= set(REGISTRY)
    for name, cls in REGISTRY.items():
        assert cls.name == name and get_strategy(name) is cls


def test_unknown_strategy_lists_the_known_ones():
    with pytest.raises(
        ValueError, match=r"The 'strategy' parameter .* must be one of \{.*'fedavg'.*'local'.*\}\. Got 'nope' instead"
    ):
        get_strategy("nope")


def test_every_strategy_builds_from_defaults():
    for cls in REGISTRY.values():
        strategy = cls.from_run_config(TrainingParams(), {})
        assert strategy.models == [] and strategy.assignment == {}


def test_fedprox_mu_is_validated_and_sent():
    assert params_from_run_config(FedProxParams, {"fedprox-mu": 0.5}).mu == 0.5
    with pytest.raises(
        ValueError, match=r"The 'fedprox-mu' parameter of FedProx must be a float >= 0.0\. Got -1.0 instead"
    ):
        FedProxParams(mu=-1.0)
    assert FedProx(params=FedProxParams(0.3)).client_config(1, 0) == {"proximal-mu": 0.3}
