"""benchmarks.selection: its filters refuse unknown names, and FeSEM's cell measures its default K."""

from __future__ import annotations

import re

import pytest

from benchmarks.selection import Cell, main, measure


@pytest.mark.parametrize(
    "flag, value, match",
    [
        ("--scenarios", "rot", r"The '--scenarios' parameter must name scenarios of .* Got \['rot'\] instead"),
        ("--algorithms", "fesm", r"The '--algorithms' parameter must name algorithms of .* Got \['fesm'\] instead"),
    ],
)
def test_unknown_scenarios_or_algorithms_are_refused_naming_the_flag(flag, value, match, capsys):
    with pytest.raises(SystemExit):
        main(["--half", "dev", flag, value, "--dry-run"])
    assert re.search(match, capsys.readouterr().err)


def test_unknown_full_run_strategies_are_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--full-runs", str(tmp_path / "runs"), "--full-strategies", "flic,cfl"])
    err = capsys.readouterr().err
    assert re.search(r"The '--full-strategies' parameter must name strategies of .* Got \['cfl'\] instead", err)
    assert not (tmp_path / "runs").exists()


def test_the_filters_keep_only_the_named_cells(capsys):
    main(["--half", "dev", "--scenarios", "rotation", "--max-clients", "30", "--dry-run"])
    cells = capsys.readouterr().out.split()
    assert cells and all("/rotation/" in c and int(c.split("/N")[1].split("/")[0]) <= 30 for c in cells)


@pytest.mark.slow
def test_fesem_alone_measures_its_automatic_k_on_planted_digits_groups():
    rows = measure(Cell("dev", "digits", "label-groups", 3, 12, 100), ["fesem"])
    assert [r["algorithm"] for r in rows] == ["fesem"]
    assert rows[0]["true-groups"] == 3 and rows[0]["k-found"] == 3 and rows[0]["ari"] == 1.0
