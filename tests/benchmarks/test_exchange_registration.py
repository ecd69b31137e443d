"""benchmarks/exchange_registration.py: both registrations timed in fresh processes, one row a size."""

import pytest

from benchmarks import exchange_registration


@pytest.mark.slow
def test_each_way_registers_every_node_and_the_row_compares_them(monkeypatch, capsys):
    calls = []
    real = exchange_registration.measure
    monkeypatch.setattr(exchange_registration, "measure", lambda way, n: calls.append((way, n)) or real(way, n))
    assert exchange_registration.main(["--sizes", "3,5", "--no-record"]) == 0
    assert calls == [("flower", 3), ("umbel", 3), ("flower", 5), ("umbel", 5)]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert [row.split(",")[0] for row in rows] == ["[3", "[5"]
    got = real("umbel", 4)
    assert set(got) == {"cpu", "wall", "mb"} and got["cpu"] >= 0 and got["wall"] > 0
