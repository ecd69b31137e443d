"""Shared fixtures: a small digits federation that trains in well under a second."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import small_run_config


@pytest.fixture
def run_config() -> dict[str, Any]:
    return small_run_config()
