"""Shared fixtures: a small digits federation that trains in well under a second."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from server.cli import PROJECT_ROOT, load_defaults


def small_run_config(**overrides: Any) -> dict[str, Any]:
    """The project's run-config defaults, shrunk to 6 digits clients in 2 true groups."""
    rc = load_defaults(PROJECT_ROOT)
    rc.update(
        {
            "strategy": "fedavg",
            "dataset": "digits",
            "num-clients": 6,
            "groups": 2,
            "samples-per-label": 20,
            "seed": 1,
            "rounds": 3,
            "fraction": 0.5,
            "eval-every": 1,
            "lr": 0.05,
            "local-epochs": 2,
        }
    )
    rc.update(overrides)
    return rc


@pytest.fixture
def run_config() -> dict[str, Any]:
    return small_run_config()
