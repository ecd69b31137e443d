"""benchmarks.mutation: the counts and the survivors' kinds of a mutmut folder."""

from __future__ import annotations

import json
from collections import Counter

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
    counts = mutation.module_counts(folder)
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
