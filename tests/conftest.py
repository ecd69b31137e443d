"""Shared fixtures (a small digits federation that trains in well under a second); long files first."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import small_run_config
from tests.helpers.schedule import long_files_first


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in the test process, as in every ClientApp of a simulation (Ray gives each client
    actor one CPU, and so one OpenMP thread) and of the deployment tests (``OMP_NUM_THREADS=1``).

    Two xdist workers on two cores, each with torch's default of one thread a core, wait on each
    other's OpenMP threads: the in-process runs took 3-5x the CPU time they take with one thread.
    What a test computes does not depend on it (the golden run and the in-process reference runs of
    the resume tests compare to 1e-6; those of tests/benchmarks/test_paper_resume.py already ran with one).
    """
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start with the long files (``tests.helpers.schedule``)."""
    long_files_first(items)


@pytest.fixture
def run_config() -> dict[str, Any]:
    return small_run_config()
