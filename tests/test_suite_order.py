"""The suite's schedule: the long files that tests/conftest.py starts first exist and run first."""

import tomllib
from pathlib import Path

from tests.helpers.schedule import LONG_FILES, long_files_first

TESTS = Path(__file__).resolve().parent


def test_every_long_file_exists():
    assert len(set(LONG_FILES)) == len(LONG_FILES)
    for name in LONG_FILES:
        assert (TESTS / name).is_file(), f"tests/conftest.py LONG_FILES names {name}, which is not in tests/"


def test_the_long_files_come_first_and_the_rest_keep_their_order():
    class Item:
        def __init__(self, path: Path) -> None:
            self.path = path

    names = ["benchmarks/test_a.py", LONG_FILES[1], "test_b.py", LONG_FILES[0], "client/test_c.py", LONG_FILES[1]]
    items = [Item(TESTS / n) for n in names]
    long_files_first(items)
    assert [item.path.relative_to(TESTS).as_posix() for item in items] == [
        LONG_FILES[0],
        LONG_FILES[1],
        LONG_FILES[1],
        "benchmarks/test_a.py",
        "test_b.py",
        "client/test_c.py",
    ]


def test_a_long_file_in_a_folder_is_named_by_its_path_under_tests():
    class Item:
        def __init__(self, path: Path) -> None:
            self.path = path

    nested = next(name for name in LONG_FILES if "/" in name)
    folder, name = nested.rsplit("/", 1)
    other = "client" if folder != "client" else "server"
    items = [Item(TESTS / other / name), Item(TESTS / "test_b.py"), Item(TESTS / nested)]
    long_files_first(items)
    # the long file first; a file of the same name in another folder keeps its place
    assert [item.path.relative_to(TESTS).as_posix() for item in items] == [nested, f"{other}/{name}", "test_b.py"]


def test_the_workers_take_whole_files_in_collection_order():
    with (TESTS.parent / "pyproject.toml").open("rb") as fh:
        addopts = tomllib.load(fh)["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert "--no-loadscope-reorder" in addopts  # xdist's default reorders files by their number of tests
    assert addopts[addopts.index("--dist") + 1] == "loadfile"
