"""The order of the suite's files: the long ones first, so that they do not end the run on one worker."""

from __future__ import annotations

from typing import Any

# The files that take minutes, longest first (CPU-bound end-to-end runs through Flower). pytest-xdist
# (``--dist loadfile --no-loadscope-reorder``) hands whole files to the two workers in collection
# order, so these start first, one per worker, and the short files fill in around them instead of
# two long files ending the run on one worker.
LONG_FILES = (
    "test_deployment.py",
    "test_own_data_e2e.py",
    "test_reliability.py",
    "test_mutations.py",
    "test_integration.py",
)


def long_files_first(items: list[Any]) -> None:
    """Sort test ``items`` in place: the files of ``LONG_FILES`` first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))
