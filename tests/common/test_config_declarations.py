"""Every run-config key is declared exactly once: a ``_k`` entry of common/schema.py, or a field
declared with ``common.params.param`` (common.config's run-wide dataclasses, each strategy's own
parameters)."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

import common.schema
from common.config import FaultParams, OutputParams, TrainingParams
from common.params import SHARED_KEY, run_config_keys, spec_of
from strategies import REGISTRY
from strategies.schema import KEYS, SCHEMA

RUN_DATACLASSES = (TrainingParams, OutputParams, FaultParams)


def _schema_declarations() -> list[str]:
    """The names of the ``_k("name", ...)`` calls in common/schema.py's source."""
    tree = ast.parse(Path(common.schema.__file__).read_text())
    return [
        call.args[0].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "_k"
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
    declared = Counter(_schema_declarations() + _field_declarations())
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
        assert (key.default, type(key.default)) == (f.default, type(f.default)), f.name
        assert (key.help, key.choices, key.read_by) == (spec.help, spec.choices, ()), f.name


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
