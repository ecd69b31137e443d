"""benchmarks.records: a measured table survives the round trip to JSON with its provenance."""

import json
import os

import pytest

from benchmarks import exchange
from benchmarks.records import Record, Table, read_record, write_record


def test_a_record_reads_back_as_written(tmp_path):
    table = Table("t", ["clients", "seconds"], [[100, 1.5], [1000, None]], notes="2 rounds")
    record = Record(name="x", section="Scale", command="python -m benchmarks.x", tables=[table], load="0.5")
    path = write_record(record, tmp_path)
    assert path == tmp_path / "x.json"
    back = read_record(path)
    assert back == record
    assert back.machine and back.date.endswith("UTC")


def test_a_row_of_the_wrong_length_and_a_foreign_file_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Row 1 of table 't' has 1 values; the table has 2 columns"):
        Table("t", ["a", "b"], [[1, 2], [3]])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "tables": [{"title": "t"}]}))
    with pytest.raises(ValueError, match="bad.json: not a results record"):
        read_record(bad)


def test_the_exchange_benchmark_pairs_both_states_per_size(tmp_path, monkeypatch):
    seen = []

    def fake(clients, state, rounds, folder, extra):
        seen.append((clients, state))
        slow = state == "flower"
        return {
            "identity": 40.0 if slow else 10.0,
            "round": 8.0 if slow else 2.0,
            "wall": 60.0,
            "evaluated": 9,
            "expired": 0,
            "load": "1",
        }

    monkeypatch.setattr(exchange, "measure", fake)
    monkeypatch.setattr(exchange, "write_record", lambda record: write_record(record, tmp_path))
    assert exchange.main(["--sizes", "100,200"]) == 0
    assert seen == [(100, "flower"), (100, "indexed"), (200, "flower"), (200, "indexed")]
    (table,) = read_record(tmp_path / "exchange.json").tables
    assert [row[0] for row in table.rows] == [100, 200]
    assert table.rows[0][3] == 0.25 and table.rows[0][6] == 0.25


def test_the_machine_and_the_load_are_given_by_name_never_in_place_of_each_other():
    with pytest.raises(TypeError):
        Record("r", "s", "python -m x", [], "load 3")  # type: ignore[misc]
    record = Record("r", "s", "python -m x", [], load="3")
    assert record.load == "3" and record.machine.startswith(f"{os.cpu_count()} cores")


def test_steal_is_the_eighth_tick_count_of_the_cpu_line_over_the_ticks_between_two_readings(tmp_path):
    from benchmarks.records import cpu_ticks, steal_share

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 50 0 25 400 5 0 2 18 3 0\n")
    before = cpu_ticks(stat)
    assert before == (35, 1000), "guest time is inside user time: not counted twice"
    stat.write_text("cpu  150 0 60 900 10 0 5 75 7 0\n")
    after = cpu_ticks(stat)
    assert steal_share(before, after) == pytest.approx(40 / 200)
    assert steal_share(after, before) is None and steal_share(None, after) is None
    stat.write_text("intr 5\n")
    assert cpu_ticks(stat) is None and cpu_ticks(tmp_path / "absent") is None
