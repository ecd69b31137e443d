import re
from pathlib import Path

import numpy as np
import pytest

from common.config import TrainingParams, params_from_run_config
import strategies
from strategies import REGISTRY, ClusteredStrategy, FedAvg, FedProx, Local, get_strategy, registry
from strategies.fedprox import FedProxParams


def test_registry_names_match_classes():
    assert {"fedavg", "local", "fedprox"} <= set(REGISTRY)
    for name, cls in REGISTRY.items():
        assert cls.name == name and get_strategy(name) is cls


def test_the_registry_is_every_strategy_class_the_package_imports_in_import_order():
    source = Path(strategies.__file__).read_text()
    imported = re.findall(r"^from \.\w+ import (\w+) as \1$", source, flags=re.M)
    assert [cls.__name__ for cls in REGISTRY.values()] == imported  # one line each, nothing else lists them
    assert list(REGISTRY)[:2] == [FedAvg.name, Local.name]


def test_registry_skips_what_is_not_a_strategy_and_keeps_the_namespace_order():
    class Second(FedAvg):
        name = "second"

    namespace = {"np": np, "ClusteredStrategy": ClusteredStrategy, "Second": Second, "FedAvg": FedAvg, "n": 3}
    assert list(registry(namespace).items()) == [("second", Second), (FedAvg.name, FedAvg)]


def test_registry_refuses_an_inherited_or_repeated_name():
    class Unnamed(FedAvg):
        pass

    class Twin(Local):
        name = Local.name

    with pytest.raises(TypeError, match=r"The strategy Unnamed must declare its own 'name'\. Got 'fedavg' inherited"):
        registry({"Unnamed": Unnamed})
    with pytest.raises(ValueError, match=r"The 'name' of Twin must be unique\. Got 'local', Local's, instead"):
        registry({"Local": Local, "Twin": Twin})


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
