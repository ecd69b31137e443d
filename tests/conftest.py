"""Shared fixtures (a small digits federation that trains in well under a second); long files first."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import small_run_config
from tests.helpers.schedule import long_files_first


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start with the long files (``tests.helpers.schedule``)."""
    long_files_first(items)


@pytest.fixture
def run_config() -> dict[str, Any]:
    return small_run_config()
