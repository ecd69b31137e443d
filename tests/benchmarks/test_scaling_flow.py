"""benchmarks/scaling.py measures the strategies' own flow: Sattler's rows call ``sattler_split`` and
``scan_round`` (as ``CFLSattler``), FLAG's call ``flag_proximity`` and ``flag_labels`` (as ``FLAG``)."""

from __future__ import annotations

import math

import pytest

import strategies.cfl_sattler
import strategies.flag
from benchmarks import scaling
from common.clustering import bipartition, flag, sampled
from common.clustering.similarity import SAMPLE_ABOVE

SHAPES = [("features.1.weight", (24, 40)), ("features.1.bias", (24,)), ("head.weight", (10, 24)), ("head.bias", (10,))]
SIZES = scaling.Sizes(sum(math.prod(s) for _, s in SHAPES), 24)


def _spy(monkeypatch, module, name: str) -> list[dict]:
    calls: list[dict] = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_the_strategies_call_the_functions_the_benchmark_measures():
    assert strategies.cfl_sattler.sattler_split is sampled.sattler_split
    assert strategies.cfl_sattler.scan_round is bipartition.scan_round
    assert strategies.flag.flag_proximity is flag.flag_proximity
    assert strategies.flag.flag_labels is flag.flag_labels


@pytest.mark.parametrize(("variant", "sample_above"), [("cfl-sattler", SAMPLE_ABOVE), ("cfl-sattler-sampled", 1)])
def test_sattlers_rows_run_sattler_split_and_scan_round(monkeypatch, variant, sample_above):
    splits = _spy(monkeypatch, sampled, "sattler_split")
    rounds = _spy(monkeypatch, bipartition, "scan_round")
    row = scaling.measure(variant, 40, SIZES, SHAPES, trace_limit=0)
    assert len(splits) == 1 and splits[0]["sample_above"] == sample_above
    assert splits[0]["sample_size"] == strategies.cfl_sattler.SPLIT_SAMPLE
    assert splits[0]["batch"] == strategies.cfl_sattler.QUERY_BATCH
    assert len(rounds) == math.ceil(1 / scaling.FRACTION)  # one per round of FRACTION N clients
    assert row["ari"] == 1.0


@pytest.mark.parametrize(("variant", "sample_above"), [("flag", SAMPLE_ABOVE), ("flag-sampled", 1)])
def test_flags_rows_run_flag_proximity_and_flag_labels(monkeypatch, variant, sample_above):
    proximity = _spy(monkeypatch, flag, "flag_proximity")
    labels = _spy(monkeypatch, flag, "flag_labels")
    row = scaling.measure(variant, 30, SIZES, SHAPES, trace_limit=0)
    assert [c["sample_above"] for c in proximity] == [sample_above] and len(labels) == 1
    assert row["ari"] >= 0.9


def test_a_merged_record_replaces_only_the_rows_measured_again():
    from benchmarks.records import Record, Table, merge_record

    columns = ["algorithm", "variant", "signal", "N", "seconds"]
    old = Record(
        "scaling-x",
        "Server scaling",
        "python -m benchmarks.scaling --sizes 100000",
        [Table("t", columns, [["a", "a", "s", "100,000", "1"], ["b", "b", "s", "100,000", "2"]], "old notes")],
        load="3",
    )
    new = Record(
        "scaling-x",
        "Server scaling",
        "python -m benchmarks.scaling --only b",
        [Table("u", columns, [["b", "b", "s", "100,000", "9"], ["b", "b", "s", "10,000", "7"]], "new notes")],
        load="12",
    )
    merged = merge_record(old, new, key=lambda row: (row[1], row[3]))
    assert merged.tables[0].rows == [
        ["a", "a", "s", "100,000", "1"],
        ["b", "b", "s", "100,000", "9"],
        ["b", "b", "s", "10,000", "7"],
    ]
    assert merged.tables[0].title == "t" and merged.tables[0].notes == "old notes\n\nnew notes"
    assert merged.load == "3; 12" and merged.command.endswith("--only b")
