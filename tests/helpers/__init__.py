"""Helpers the tests share, imported as ``tests.helpers`` (pytest puts the repository root on the path).

``small_run_config`` is here (``server.inprocess`` holds the Grid that runs ClientApps in this process);
``hostile`` (a ClientApp that corrupts replies), ``minimal_client`` (a ClientApp written without
umbel), ``user_models`` (models defined outside umbel, named ``tests.helpers.user_models:<factory>``)
and ``forces`` (planted CFLGT trajectories) are its modules.
"""

from __future__ import annotations

from typing import Any

# 6 digits clients in 2 true groups: the federation the fast end-to-end tests run
SMALL_FEDERATION: dict[str, Any] = {"dataset": "digits", "num-clients": 6, "groups": 2, "samples-per-label": 20}
# the same federation as ``umbel run`` flags
SMALL_FEDERATION_ARGS: list[str] = [arg for key, value in SMALL_FEDERATION.items() for arg in (f"--{key}", str(value))]


def small_run_config(**overrides: Any) -> dict[str, Any]:
    """The project's run-config defaults, shrunk to 6 digits clients in 2 true groups."""
    # imported here: ``tests.helpers.minimal_client`` must import without any of umbel
    from server.cli import PROJECT_ROOT, load_defaults

    rc = load_defaults(PROJECT_ROOT)
    rc.update(
        {
            "strategy": "fedavg",
            **SMALL_FEDERATION,
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
