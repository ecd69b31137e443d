"""One source for the run-config: common/schema.py against pyproject, the dataclasses and the registry."""

import dataclasses
import tomllib
from pathlib import Path

import pytest

from common.config import FaultParams, OutputParams, TrainingParams
from common.data import DATASETS
from common.models import MODELS
from common.scenarios import SCENARIOS, ScenarioConfig
from common.schema import GROUPS, KEYS, SCHEMA, defaults, disagreements
from strategies import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


def pyproject_config() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["tool"]["flwr"]["app"]["config"]


def test_pyproject_defaults_are_the_schema_defaults():
    """Lists the keys to add to common/schema.py (or to pyproject) by name."""
    assert disagreements(pyproject_config()) == {"no-schema-entry": [], "not-in-config": [], "different-default": []}


def test_disagreements_names_each_kind_of_mismatch():
    config = {**defaults(), "new-key": 1, "rounds": 7, "uniform-weights": 0}
    del config["seed"]
    found = disagreements(config)
    assert found["no-schema-entry"] == ["new-key"]
    assert found["not-in-config"] == ["seed"]
    assert found["different-default"] == ["rounds: schema 100, config 7", "uniform-weights: schema False, config 0"]


def _params_classes():
    return [TrainingParams, FaultParams, OutputParams, ScenarioConfig, *(c.params_type for c in REGISTRY.values())]


@pytest.mark.parametrize("cls", _params_classes(), ids=lambda c: c.__name__)
def test_dataclass_defaults_are_the_schema_defaults(cls):
    for field in dataclasses.fields(cls):
        key = field.name.replace("_", "-")
        if not field.init or field.default is dataclasses.MISSING or key not in SCHEMA:
            continue
        expected = SCHEMA[key].default
        if key == "angles":
            expected = tuple(float(a) for a in expected.split(","))
        assert field.default == expected, key


def test_every_strategy_parameter_has_a_key_and_its_readers():
    readers: dict[str, set[str]] = {}
    for name, cls in REGISTRY.items():
        for field in dataclasses.fields(cls.params_type):
            readers.setdefault(field.name.replace("_", "-"), set()).add(name)
    assert set(readers) <= set(SCHEMA)
    assert {k.name: set(k.read_by) for k in KEYS if k.read_by} == readers


def test_choices_are_what_the_code_accepts():
    assert set(SCHEMA["strategy"].choices) == set(REGISTRY)
    assert SCHEMA["dataset"].choices == DATASETS
    assert SCHEMA["model"].choices == MODELS
    assert SCHEMA["scenario"].choices == SCENARIOS


def test_every_key_is_documented_and_grouped():
    assert [k.group for k in KEYS if k.group not in GROUPS] == []
    assert [k.name for k in KEYS if len(k.help) < 15] == []
    used = [g for g in GROUPS if any(k.group == g for k in KEYS)]
    assert used == list(GROUPS)


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), ("1", True), ("off", False)])
def test_booleans_parse_strictly(text, value):
    assert SCHEMA["uniform-weights"].parse(text) is value


@pytest.mark.parametrize("key, text", [("uniform-weights", "flase"), ("rounds", "2.5"), ("lr", "fast")])
def test_a_bad_value_is_an_error_naming_the_key(key, text):
    with pytest.raises(ValueError, match=f"The '{key}' parameter of the run config must be .* Got '{text}' instead"):
        SCHEMA[key].parse(text)
