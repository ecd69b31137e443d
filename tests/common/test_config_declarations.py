"""Every run-config key is declared exactly once, on a field declared with ``common.params.param``
(common.config's run-wide dataclasses, ScenarioConfig, common.params.ClusteringParams, each strategy's
own parameters); common/schema.py declares none by hand, and no reader writes a key's default again."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

import common.schema
from common.clustering.hierarchical import LINKAGES
from common.config import DataParams, FaultParams, OutputParams, RunParams, TrainingParams
from common.models import MODELS
from common.params import SHARED_KEY, ClusteringParams, param, run_config_keys, shared, spec_of
from common.scenarios import ScenarioConfig
from strategies import DEFAULT_STRATEGY, REGISTRY
from strategies.schema import KEYS, SCHEMA

RUN_DATACLASSES = (TrainingParams, OutputParams, FaultParams, RunParams, ScenarioConfig, DataParams, ClusteringParams)
UMBEL = Path(common.schema.__file__).parents[1]


def _schema_declarations() -> list[str]:
    """The keys common/schema.py declares by hand: a ``Key(...)`` or ``_k(...)`` call whose name is a literal."""
    tree = ast.parse(Path(common.schema.__file__).read_text())
    return [
        call.args[0].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in ("Key", "_k")
        and call.args
        and isinstance(call.args[0], ast.Constant)
    ]


def _field_declarations() -> list[str]:
    """The keys of the fields declared with ``param`` (a ``shared`` field reads a key declared elsewhere)."""
    classes = [*RUN_DATACLASSES, *(cls.params_type for cls in REGISTRY.values())]
    return [
        run_config_keys(cls)[f.name]
        for cls in classes
        for f in dataclasses.fields(cls)
        if spec_of(f) is not None and not f.metadata.get(SHARED_KEY)
    ]


def test_every_run_config_key_has_exactly_one_declaration():
    assert _schema_declarations() == []
    declared = Counter(_field_declarations())
    assert {key: n for key, n in declared.items() if n != 1} == {}
    assert set(declared) == set(SCHEMA)
    assert len(KEYS) == len(SCHEMA)


@pytest.mark.parametrize("cls", RUN_DATACLASSES, ids=lambda c: c.__name__)
def test_each_run_wide_field_is_declared_and_its_key_is_what_the_declaration_says(cls):
    """No field of the run-wide dataclasses keeps a bare default, and each key carries its field's
    default, help and choices (a swapped or lost help line, default or choice fails here)."""
    keys = run_config_keys(cls)
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        assert spec is not None, f.name
        key = SCHEMA[keys[f.name]]
        if f.metadata.get(SHARED_KEY):  # read here, declared by one other run-wide field: the same declaration
            (owner,) = [c for c in RUN_DATACLASSES if c is not cls and keys[f.name] in run_config_keys(c).values()]
            (declared,) = [g for g in dataclasses.fields(owner) if run_config_keys(owner)[g.name] == keys[f.name]]
            assert (f.default, spec) == (declared.default, spec_of(declared)), f.name
            continue
        if key.name == "strategy":  # the registry's default and names
            assert (key.default, key.choices, f.default) == (DEFAULT_STRATEGY, tuple(sorted(REGISTRY)), "")
            assert key.help == spec.help
            continue
        default = common.schema.key_default(f.default)
        assert (key.default, type(key.default)) == (default, type(default)), f.name
        if cls is ClusteringParams:  # the readers' meanings follow the declared help
            readers = {n for n, c in REGISTRY.items() if keys[f.name] in run_config_keys(c.params_type).values()}
            assert (key.help.startswith(spec.help), key.choices, set(key.read_by)) == (True, spec.choices, readers)
            assert readers, f.name
            continue
        assert (key.help, key.choices, key.read_by) == (spec.help, spec.choices, ()), f.name


def test_scenario_angles_default_is_the_declared_tuple_written_as_run_config_text():
    assert SCHEMA["angles"].default == "0,90,180,270"
    assert ScenarioConfig.from_run_config({"angles": SCHEMA["angles"].default}).angles == ScenarioConfig().angles
    assert ScenarioConfig().angles == (0.0, 90.0, 180.0, 270.0)


def test_the_model_key_lists_the_built_in_models():
    assert SCHEMA["model"].choices == MODELS


def _literal_defaults() -> list[str]:
    """``run_config_value(rc, "<key>", <literal>)`` calls in umbel's source for a key declared on a field."""
    field_keys = set(_field_declarations())
    found = []
    for folder in ("common", "server", "client", "strategies", "benchmarks"):
        for path in sorted((UMBEL / folder).rglob("*.py")):
            for call in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(call, ast.Call) and len(call.args) == 3):
                    continue
                func = call.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                key, default = call.args[1], call.args[2]
                if (
                    name == "run_config_value"
                    and isinstance(key, ast.Constant)
                    and key.value in field_keys
                    and isinstance(default, ast.Constant)
                ):
                    found.append(f"{path.relative_to(UMBEL)}:{call.lineno} {key.value}")
    return found


def test_no_reader_writes_a_declared_keys_default_again():
    """A reader takes a field-declared key's default from its field (``ScenarioConfig.seed``), not a literal."""
    assert _literal_defaults() == []


@pytest.mark.parametrize(
    "cls", [c for c in RUN_DATACLASSES if c not in (RunParams, ClusteringParams)], ids=lambda c: c.__name__
)
def test_each_declared_range_and_choice_is_checked_naming_its_key(cls):
    """A value just outside a checked field's declaration fails naming its key, whatever order the
    dataclass checks its fields in (ScenarioConfig checks them one by one, between its own rules)."""
    keys = run_config_keys(cls)
    tried = 0
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if spec is None or not spec.checked:
            continue
        if spec.choices:
            bad: object = "no-such-" + keys[f.name]
        elif spec.low is not None:
            bad = type(f.default)(spec.low) if not spec.closed[0] else type(f.default)(spec.low) - 1
        elif spec.high is not None:
            bad = type(f.default)(spec.high) + 1
        else:
            continue
        with pytest.raises(ValueError, match=rf"The '{keys[f.name]}' parameter of .* must be "):
            cls(**{f.name: bad})
        tried += 1
    assert tried > 0


def test_the_run_wide_fields_keep_their_groups_and_places():
    """The declared keys sit where the schema places them: pyproject's and the docs' order."""
    names = [key.name for key in KEYS]
    training = [key.name for key in KEYS if key.group == common.schema.TRAINING]
    assert SCHEMA["seed"].group == common.schema.DATA
    assert names.index("model") + 1 == names.index("seed") == names.index("scenario") - 1
    assert training[training.index("max-rejected-rounds") + 1 : training.index("late-clients")] == ["device"]
    assert training[-2:] == ["min-nodes", "roster-path"]
    assert {SCHEMA[k].group for k in run_config_keys(OutputParams).values()} == {common.schema.OUTPUT}
    assert {SCHEMA[k].group for k in run_config_keys(FaultParams).values()} == {common.schema.FAULTS}


def test_a_run_wide_field_is_checked_from_its_declaration_naming_its_key():
    with pytest.raises(
        ValueError,
        match=r"The 'aggregation' parameter of the run config must be one of \{'mean', 'median'\}. Got 'max' instead.",
    ):
        TrainingParams.from_run_config({"aggregation": "max"})
    with pytest.raises(
        ValueError,
        match=r"The 'late-round' parameter of the run config must be an int in the range \[0, 3\]. Got 4 instead.",
    ):
        TrainingParams.from_run_config({"rounds": 3, "late-round": 4})
    with pytest.raises(
        ValueError, match=r"The 'slow-delay' parameter of the run config must be a float >= 0.0. Got -1.0 instead."
    ):
        FaultParams.from_run_config({"slow-delay": -1.0})
    with pytest.raises(
        ValueError, match=r"The 'save-models' parameter of the run config must be a bool. Got 'yes' instead."
    ):
        OutputParams.from_run_config({"save-models": "yes"})
    assert TrainingParams.from_run_config({"rounds": 3, "late-round": 3}).late_round == 3


def test_a_shared_field_takes_its_default_from_clustering_params_and_writes_none(monkeypatch):
    """A strategy's ``shared`` field writes no default: it gets the one ClusteringParams declares for
    its name when its class is made (a changed declaration changes it), and a name ClusteringParams
    does not declare is refused."""
    declared = {f.name: f.default for f in dataclasses.fields(ClusteringParams)}
    seen = set()
    for cls in REGISTRY.values():
        made = cls.params_type()
        for f in dataclasses.fields(cls.params_type):
            if f.metadata.get(SHARED_KEY):
                assert type(f.default) is type(declared[f.name]) and f.default == declared[f.name]
                assert getattr(made, f.name) == declared[f.name]
                seen.add(f.name)
    assert seen == set(declared)

    monkeypatch.setattr(ClusteringParams.__dataclass_fields__["max_clusters"], "default", 5)

    @dataclasses.dataclass(frozen=True)
    class OddParams:
        max_clusters: int = shared(low=2, help="its K")
        linkage: str = shared()
        odd_k: int = param(1, "a key of its own")

    assert dataclasses.asdict(OddParams()) == {"max_clusters": 5, "linkage": "average", "odd_k": 1}
    assert OddParams(3).max_clusters == 3 and spec_of(dataclasses.fields(OddParams)[0]).help == "its K"
    assert run_config_keys(OddParams) == {"max_clusters": "max-clusters", "linkage": "linkage", "odd_k": "odd-k"}

    with pytest.raises((ValueError, RuntimeError)) as raised:

        @dataclasses.dataclass(frozen=True)
        class Typo:
            num_cluster: int = shared(low=0)

    error = raised.value if isinstance(raised.value, ValueError) else raised.value.__cause__
    assert str(error) == (
        "The shared parameter 'num_cluster' of test_a_shared_field_takes_its_default_from_clustering_params_and_"
        "writes_none.<locals>.Typo must be one of the keys ClusteringParams declares, "
        f"{sorted(declared)}. Got 'num_cluster' instead."
    )


def test_the_shared_linkage_key_offers_the_linkages_the_clustering_code_accepts():
    assert (
        SCHEMA["linkage"].choices
        == LINKAGES
        == spec_of(next(f for f in dataclasses.fields(ClusteringParams) if f.name == "linkage")).choices
    )


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("data-format", "csv", r"one of \{'auto', 'hf', 'imagefolder', 'npz'\}"),
        ("num-classes", -1, r"an int >= 0"),
        ("val-fraction", 1.0, r"a float in the range \[0\.0, 1\.0\)"),
        ("truth-path", 3, r"a str"),
    ],
)
def test_the_data_keys_are_checked_from_their_declarations_before_any_data_is_read(key, value, allowed):
    """A run on a built-in scenario refuses a malformed data key too (DataParams checks every field)."""
    from common.sources import run_info

    with pytest.raises(
        ValueError, match=rf"^The '{key}' parameter of the run config must be {allowed}\. Got {value!r} instead\.$"
    ):
        run_info({"dataset": "digits", key: value})
