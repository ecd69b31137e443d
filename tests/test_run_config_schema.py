"""One source for the run-config: the keys (common/schema.py, strategies/schema.py) against pyproject,
the dataclasses and the registry."""

import dataclasses
import tomllib
from pathlib import Path

import pytest

from common.config import FaultParams, OutputParams, TrainingParams, params_from_run_config
from common.params import run_config_keys
from common.data import DATASETS
from common.models import MODELS
from common.scenarios import SCENARIOS, ScenarioConfig
from common.schema import RENAMED, check_renamed
from strategies import REGISTRY
from strategies.schema import GROUPS, KEYS, SCHEMA, defaults, disagreements

ROOT = Path(__file__).resolve().parent.parent


def pyproject_config() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["tool"]["flwr"]["app"]["config"]


def test_pyproject_defaults_are_the_schema_defaults():
    """Lists the keys to add to common/schema.py (or to pyproject) by name."""
    assert disagreements(pyproject_config()) == {"no-schema-entry": [], "not-in-config": [], "different-default": []}


def test_disagreements_names_each_kind_of_mismatch():
    config = {**defaults(), "new-key": 1, "rounds": 7, "flag-uniform-weights": 0}
    del config["seed"]
    found = disagreements(config)
    assert found["no-schema-entry"] == ["new-key"]
    assert found["not-in-config"] == ["seed"]
    assert found["different-default"] == [
        "rounds: schema 100, config 7",
        "flag-uniform-weights: schema False, config 0",
    ]


def _params_classes():
    return [TrainingParams, FaultParams, OutputParams, ScenarioConfig, *(c.params_type for c in REGISTRY.values())]


@pytest.mark.parametrize("cls", _params_classes(), ids=lambda c: c.__name__)
def test_dataclass_defaults_are_the_schema_defaults(cls):
    strategy_params = cls in [c.params_type for c in REGISTRY.values()]
    for field in dataclasses.fields(cls):
        key = run_config_keys(cls)[field.name]
        if field.default is dataclasses.MISSING or (key not in SCHEMA and not strategy_params):
            continue
        expected = SCHEMA[key].default
        if key == "angles":
            expected = tuple(float(a) for a in expected.split(","))
        assert field.default == expected, key


def test_every_strategy_parameter_has_a_key_and_its_readers():
    readers: dict[str, set[str]] = {}
    for name, cls in REGISTRY.items():
        for key in run_config_keys(cls.params_type).values():
            readers.setdefault(key, set()).add(name)
    assert set(readers) <= set(SCHEMA)
    assert {k.name: set(k.read_by) for k in KEYS if k.read_by} == readers


def test_a_key_one_strategy_reads_carries_its_prefix_and_a_shared_one_none():
    for key in KEYS:
        if len(key.read_by) == 1:
            assert key.name.startswith(f"{key.read_by[0]}-") and key.group == key.read_by[0], key.name
        elif key.read_by:
            assert key.group not in REGISTRY and not key.name.startswith(tuple(f"{s}-" for s in REGISTRY)), key.name
    prefixes = {name: getattr(cls.params_type, "key_prefix", name) for name, cls in REGISTRY.items()}
    assert prefixes == {name: name for name in REGISTRY}


def test_a_strategy_reads_its_prefixed_keys_and_names_them_in_errors():
    from strategies.cfl_sattler import CFLSattlerParams
    from strategies.cflgt import CFLGTParams
    from strategies.fedclust import FedClustParams

    params = params_from_run_config(CFLGTParams, {"cflgt-damping": 0.7, "cflgt-pretrain-rounds": 3})
    assert (params.damping, params.pretrain_rounds) == (0.7, 3)
    assert run_config_keys(FedClustParams)["fedclust_lambda"] == "fedclust-lambda"
    assert run_config_keys(FedClustParams)["num_clusters"] == "num-clusters"
    assert run_config_keys(CFLSattlerParams) == {
        "eps1": "cfl-sattler-eps1",
        "eps2": "cfl-sattler-eps2",
        "eps2_relative": "cfl-sattler-eps2-relative",
        "split_after": "cfl-sattler-split-after",
        "sketch_dim": "sketch-dim",
        "eps_absolute": "cfl-sattler-eps-absolute",
        "sample_above": "cfl-sattler-sample-above",
        "separation": "cfl-sattler-separation",
    }
    with pytest.raises(
        ValueError, match=r"The 'cflgt-damping' parameter of CFLGT must be a float in the range \[0.5, 1.0\)"
    ):
        CFLGTParams(damping=1.0)


def test_the_former_names_are_gone_and_their_new_names_exist():
    assert set(RENAMED).isdisjoint(SCHEMA) and set(RENAMED.values()) <= set(SCHEMA)
    assert set(RENAMED).isdisjoint(pyproject_config())
    unprefixed_before = {"pretrain-rounds", "damping", "beta", "eps1", "resolution", "profile-protocol", "proximal-mu"}
    assert unprefixed_before <= set(RENAMED)


@pytest.mark.parametrize(
    "old, new", [("damping", "cflgt-damping"), ("eps1", "cfl-sattler-eps1"), ("alpha", "flag-alpha")]
)
def test_a_former_name_fails_naming_its_new_name(old, new):
    message = f"The '{old}' key was renamed '{new}'"
    with pytest.raises(ValueError, match=message):
        check_renamed({"rounds": 3, old: 0.5})
    with pytest.raises(ValueError, match=message):
        params_from_run_config(TrainingParams, {old: 0.5})
    check_renamed({"rounds": 3, new: 0.5})


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
    assert SCHEMA["flag-uniform-weights"].parse(text) is value


@pytest.mark.parametrize("key, text", [("flag-uniform-weights", "flase"), ("rounds", "2.5"), ("lr", "fast")])
def test_a_bad_value_is_an_error_naming_the_key(key, text):
    with pytest.raises(ValueError, match=f"The '{key}' parameter of the run config must be .* Got '{text}' instead"):
        SCHEMA[key].parse(text)


def test_pyproject_and_the_parameters_page_are_what_the_registry_writes():
    """Run ``python -m server.derived`` when this fails (it names each stale file)."""
    from server.derived import stale

    assert stale() == []


def test_the_pyproject_table_is_rewritten_in_place_and_reads_back_as_the_defaults():
    from server.derived import pyproject_table, with_table

    table = pyproject_table(KEYS, GROUPS)
    text = "[a]\nx = 1\n\n[tool.flwr.app.config]\nold = 1\n\n# about b\n[b]\ny = 2\n"
    rewritten = with_table(text, table)
    parsed = tomllib.loads(rewritten)
    assert parsed["a"] == {"x": 1} and parsed["b"] == {"y": 2} and "# about b\n[b]" in rewritten
    assert parsed["tool"]["flwr"]["app"]["config"] == defaults()
    assert with_table(rewritten, table) == rewritten
    with pytest.raises(ValueError, match=r"The 'pyproject' parameter of with_table must hold \[tool.flwr.app.config\]"):
        with_table("[a]\n", table)


def test_the_parameters_page_has_each_declared_key_with_its_range():
    from server.derived import parameters_page

    page = parameters_page(dict(REGISTRY), KEYS)
    assert "| `cflgt-damping` | `0.5` | a float in the range [0.5, 1.0) |" in page
    assert "| `fesem-init` | `'clients'` | one of {'clients', 'random'} |" in page
    assert all(f"## {name} (" in page for name in REGISTRY)


class _Registered:
    def __init__(self, name, params_type):
        self.name, self.params_type = name, params_type


def test_a_new_strategy_adds_its_group_keys_and_readers_from_its_declaration_alone():
    from common.params import shared
    from common.params import check_params, param
    from common.schema import build

    @dataclasses.dataclass(frozen=True)
    class NewParams:
        key_prefix = "new"
        rate: float = param(0.5, "a rate, in (0, 1]", low=0.0, high=1.0, closed=(False, True))
        num_clusters: int = shared(low=0, help="its K")

        def __post_init__(self):
            check_params(self, "New")

    registry = {**REGISTRY, "new": _Registered("new", NewParams)}
    keys, groups = build(registry, "new")
    found = {k.name: k for k in keys}
    assert groups[-1] == "new" and found["new-rate"].default == 0.5 and found["new-rate"].read_by == ("new",)
    assert found["num-clusters"].read_by[-1] == "new" and found["strategy"].default == "new"
    assert "new" in found["strategy"].choices
    assert found["num-clusters"].help == SCHEMA["num-clusters"].help + "; new: its K"
    meanings = (
        "; cfl-gp: with num-clusters 0: the models run before App. G's estimate; ifca: K when num-clusters is 0; "
        "fesem: with num-clusters 0"
    )
    assert meanings in SCHEMA["max-clusters"].help
    with pytest.raises(ValueError, match=r"The 'new-rate' parameter of New must be a float in the range \(0.0, 1.0\]"):
        params_from_run_config(NewParams, {"new-rate": 0.0})


def test_an_undeclared_parameter_or_a_key_declared_twice_is_refused():
    from common.params import param
    from common.schema import build

    @dataclasses.dataclass(frozen=True)
    class Bare:
        key_prefix = "bare"
        rate: float = 0.5

    with pytest.raises(ValueError, match=r"The parameters of strategy 'bare' must each be declared .* Got \['rate'\]"):
        build({"bare": _Registered("bare", Bare)}, "bare")

    @dataclasses.dataclass(frozen=True)
    class Clash:
        key_prefix = ""  # no prefix: the field's key is its bare name
        seed: int = param(0, "clashes with the run's seed")

    with pytest.raises(ValueError, match=r"Each run-config key must be declared once. Got \['seed'\] more than once"):
        build({"seed": _Registered("seed", Clash)}, "seed")


def test_every_strategy_group_is_a_registered_name_and_the_generic_keys_are_declared_once():
    from common.schema import RUN_GROUPS, RUN_KEYS

    assert set(GROUPS[len(RUN_GROUPS) :]) <= set(REGISTRY)
    assert [k.name for k in KEYS[: len(RUN_KEYS)]] == [k.name for k in RUN_KEYS]
    assert SCHEMA["strategy"].default in REGISTRY
