"""The order of the suite's files: the long ones first, so that they do not end the run on one worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]

# The files that take minutes, longest first (end-to-end runs through Flower: process start-ups), as paths
# under tests/. pytest-xdist (``--dist loadfile --no-loadscope-reorder``) hands whole files to the two
# workers in collection order, so these start first, one per worker, and the short files fill in around
# them instead of a long file ending the run on one worker (the top-level files, test_packaging.py and
# test_oneshot_runs.py among them, are collected last). Order: each file's seconds in a full run on the
# 2-core box (s21: 683, 443, 302, 255, 237, 204, 158, 86, 78, 71, 51, 50).
LONG_FILES = (
    "test_deployment.py",
    "test_own_data_e2e.py",
    "benchmarks/test_paper_resume.py",
    "test_mutations.py",
    "test_reliability.py",
    "benchmarks/test_overhead.py",
    "test_integration.py",
    "test_packaging.py",
    "test_oneshot_runs.py",
    "client/test_warm.py",
    "server/test_cli.py",
    "test_flwr_run.py",
)


def long_files_first(items: list[Any]) -> None:
    """Sort test ``items`` in place: the files of ``LONG_FILES`` (paths under tests/) first, in its order; the
    rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}

    def key(item: Any) -> int:
        path = Path(item.path).resolve()
        name = path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else path.name
        return rank.get(name, len(LONG_FILES))

    items.sort(key=key)
