"""benchmarks.mutation: the counts and the survivors' kinds of a mutmut folder."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from benchmarks import mutation

SOURCE = """
def x_cut__mutmut_orig(d, linkage="average", k: int = 2):
    if k < 1:
        raise ValueError(f"The 'k' parameter of cut must be >= 1. Got {k} instead.")
    return tree(d, linkage)[:k]


def x_cut__mutmut_1(d, linkage="average", k: int = 2):
    if k < 1:
        raise ValueError(f"XXThe 'k' parameter of cut must be >= 1. Got {k} instead.XX")
    return tree(d, linkage)[:k]


def x_cut__mutmut_2(d, linkage="XXaverageXX", k: int = 2):
    if k < 1:
        raise ValueError(f"The 'k' parameter of cut must be >= 1. Got {k} instead.")
    return tree(d, linkage)[:k]


def x_cut__mutmut_3(d, linkage="average", k: int = 2):
    if k <= 1:
        raise ValueError(f"The 'k' parameter of cut must be >= 1. Got {k} instead.")
    return tree(d, linkage)[:k]


def x_cut__mutmut_4(d, linkage="average", k: int = 2):
    if k < 1:
        raise ValueError(f"The 'k' parameter of cut must be >= 1. Got {k} instead.")
    return tree(d, None)[:k]


def x_size__mutmut_orig(n):
    n = check_int(n, "n", "size", low=1)
    return n


def x_size__mutmut_1(n):
    n = check_int(n, "XXnXX", "size", low=1)
    return n
"""


def _folder(tmp_path, codes):
    package = tmp_path / "mutants" / "common"
    package.mkdir(parents=True)
    (package / "cut.py").write_text(SOURCE)
    keys = {f"common.cut.x_cut__mutmut_{n}": code for n, code in codes.items()} | {"common.cut.x_size__mutmut_1": 0}
    (package / "cut.py.meta").write_text(json.dumps({"exit_code_by_key": keys}))
    return tmp_path / "mutants"


def test_each_survivor_gets_its_edit_and_kind(tmp_path):
    folder = _folder(tmp_path, {1: 0, 2: 0, 3: 0, 4: 1})
    found = {s.name.rsplit("_", 1)[-1]: s for s in mutation.survivors(folder) if "x_cut" in s.name}
    assert set(found) == {"1", "2", "3"}, "the killed mutant 4 is no survivor"
    (size,) = [s for s in mutation.survivors(folder) if "x_size" in s.name]
    assert size.kind == "message", "a name a check's error gives"
    assert found["1"].kind == "message", "only the raised message's wording changed"
    assert found["2"].kind == "string", "a default value's string, not a message"
    assert found["3"].kind == "code"
    assert found["3"].edit == ("-    if k < 1:", "+    if k <= 1:")
    assert found["2"].edit[1].startswith('+def x_cut__mutmut_orig(d, linkage="XXaverageXX"')


def test_the_table_counts_each_status_and_the_kill_rate_counts_timeouts_as_caught(tmp_path):
    folder = _folder(tmp_path, {1: 1, 2: 1, 3: -24, 4: None})
    counts = mutation.module_counts(mutation.results(folder))
    assert counts == {"common/cut.py": Counter({"survived": 1, "killed": 2, "timeout": 1, "not run": 1})}
    assert mutation.kill_rate(counts["common/cut.py"]) == 3 / 4
    assert mutation.kill_rate(Counter({"not run": 4})) is None
    kinds = {"common/cut.py": Counter({"message": 1})}
    rows = mutation.table(counts, kinds).splitlines()
    assert rows[2] == "| `common/cut.py` | 5 | 1 | 2 | 1 | 1 | 0 | 75% | 1 | 0 | 0 |"
    assert rows[3] == "| **all** | 5 | 1 | 2 | 1 | 1 | 0 | 75% | 1 | 0 | 0 |"


def test_the_listing_gives_each_survivor_one_line_under_its_module(tmp_path):
    folder = _folder(tmp_path, {1: 1, 2: 1, 3: 0, 4: 1})
    text = mutation.listing(mutation.survivors(folder))
    assert text.splitlines() == [
        "### `common/cut.py`",
        "",
        "- `x_cut__mutmut_3` (code): `if k < 1:` → `if k <= 1:`",
        (
            "- `x_size__mutmut_1` (message): "
            '`n = check_int(n, "n", "size", low=1)` → `n = check_int(n, "XXnXX", "size", low=1)`'
        ),
    ]


def test_a_rerun_s_decided_results_win_and_its_undecided_ones_do_not(tmp_path):
    folder = _folder(tmp_path, {1: 0, 2: 0, 3: 0, 4: 1})
    again = tmp_path / "again" / "common"
    again.mkdir(parents=True)
    later = {"common.cut.x_cut__mutmut_1": 1, "common.cut.x_cut__mutmut_2": None, "common.cut.x_cut__mutmut_4": 0}
    (again / "cut.py.meta").write_text(json.dumps({"exit_code_by_key": later}))
    codes = mutation.results(folder, tmp_path / "again")["common/cut.py"]
    assert codes["common.cut.x_cut__mutmut_1"] == 1, "killed by the wider selection"
    assert codes["common.cut.x_cut__mutmut_2"] == 0, "not rerun: the first run's result stays"
    assert codes["common.cut.x_cut__mutmut_3"] == 0, "absent from the rerun"
    assert codes["common.cut.x_cut__mutmut_4"] == 0, "the rerun decides, whatever it says"
    names = {
        s.name.rsplit(".", 1)[-1] for s in mutation.survivors(folder, mutation.results(folder, tmp_path / "again"))
    }
    assert names == {"x_cut__mutmut_2", "x_cut__mutmut_3", "x_cut__mutmut_4", "x_size__mutmut_1"}


def test_verdicts_are_read_counted_and_listed(tmp_path):
    folder = _folder(tmp_path, {1: 0, 2: 0, 3: 0, 4: 1})
    triage = tmp_path / "triage"
    triage.mkdir()
    (triage / "common.cut.tsv").write_text(
        "# common/cut.py\n\nx_cut__mutmut_3\tkilled\ttests/test_cut.py::test_k_of_one\n"
        "x_size__mutmut_1\tharmless\tthe name in a message\n"
    )
    verdicts = mutation.read_verdicts(triage)
    assert verdicts == {
        "common.cut.x_cut__mutmut_3": ("killed", "tests/test_cut.py::test_k_of_one"),
        "common.cut.x_size__mutmut_1": ("harmless", "the name in a message"),
    }
    alive = mutation.survivors(folder)
    rows = mutation.verdict_table(alive, verdicts).splitlines()
    assert rows[0] == "| module | survivors | killed | equivalent | harmless | open | untriaged |"
    assert rows[2] == "| `common/cut.py` | 4 | 1 | 0 | 1 | 0 | 2 |"
    assert rows[3] == "| **all** | 4 | 1 | 0 | 1 | 0 | 2 |"
    lines = mutation.listing(alive, verdicts).splitlines()
    assert lines[-2].endswith("`if k <= 1:` — **killed**: tests/test_cut.py::test_k_of_one")
    assert lines[2].endswith("— **untriaged**"), "mutant 1 has no verdict"


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("x_cut__mutmut_3\tfine\tbecause", "verdict in"),
        ("x_cut__mutmut_3\tequivalent\t ", "a reason"),
        ("x_cut__mutmut_3 equivalent because", "name<TAB>verdict<TAB>reason"),
        ("x_cut__mutmut_3\tequivalent\tsame\nx_cut__mutmut_3\topen\tagain", "a second time"),
    ],
)
def test_a_malformed_verdict_line_is_an_error_naming_the_file_and_line(tmp_path, line, match):
    (tmp_path / "cut.tsv").write_text("# header\n" + line + "\n")
    with pytest.raises(ValueError, match=match) as error:
        mutation.read_verdicts(tmp_path)
    assert "cut.tsv:" in str(error.value)


def test_the_command_prints_both_tables_and_writes_the_listing_page(tmp_path, capsys):
    folder = _folder(tmp_path, {1: 1, 2: 1, 3: 0, 4: 1})
    triage = tmp_path / "triage"
    triage.mkdir()
    (triage / "common.cut.tsv").write_text("x_cut__mutmut_3\topen\tk of one untested\n")
    page = tmp_path / "survivors.md"
    mutation.main(["--mutants", str(folder), "--verdicts", str(triage), "--listing", str(page)])
    out = capsys.readouterr().out
    assert "| `common/cut.py` | 5 | 0 | 3 | 0 | 2 | 0 | 60% | 1 | 0 | 1 |" in out
    assert "| `common/cut.py` | 2 | 0 | 0 | 0 | 1 | 1 |" in out
    text = page.read_text()
    assert text.startswith("# Survivors of the mutation run\n")
    assert "- `x_cut__mutmut_3` (code): `if k < 1:` → `if k <= 1:` — **open**: k of one untested" in text


def test_a_verdict_belongs_to_its_own_modules_mutant_of_that_name(tmp_path):
    folder = _folder(tmp_path, {1: 0, 2: 0, 3: 0, 4: 1})
    triage = tmp_path / "triage"
    triage.mkdir()
    (triage / "common.other.tsv").write_text("x_cut__mutmut_3\tequivalent\tanother module's mutant\n")
    (triage / "common.cut.tsv").write_text("x_cut__mutmut_3\tkilled\ttests/test_cut.py::test_k\n")
    verdicts = mutation.read_verdicts(triage)
    assert verdicts["common.other.x_cut__mutmut_3"] == ("equivalent", "another module's mutant")
    assert verdicts["common.cut.x_cut__mutmut_3"] == ("killed", "tests/test_cut.py::test_k")
    (triage / "common.cut.tsv").unlink()
    rows = mutation.verdict_table(mutation.survivors(folder), mutation.read_verdicts(triage)).splitlines()
    assert rows[2] == "| `common/cut.py` | 4 | 0 | 0 | 0 | 0 | 4 |", "common.other's verdict judges no mutant of cut"
