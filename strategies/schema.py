"""Every run-config key: the generic ones of ``common.schema`` and each registered strategy's own.

Built once from ``strategies.REGISTRY`` (``common.schema.build``): ``KEYS`` in ``GROUPS`` order,
``SCHEMA`` by name. The ``umbel`` flags, pyproject's ``[tool.flwr.app.config]`` and the parameter
tables in docs/ (``python -m server.derived``) are derived from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.schema import Key, Scalar, build

from . import DEFAULT_STRATEGY, REGISTRY

KEYS, GROUPS = build(REGISTRY, DEFAULT_STRATEGY)
SCHEMA: dict[str, Key] = {key.name: key for key in KEYS}


def defaults() -> dict[str, Scalar]:
    """Every key's default, in schema order."""
    return {key.name: key.default for key in KEYS}


def disagreements(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """How a run-config table (e.g. pyproject's) differs from the schema.

    Returns the keys the schema lacks (``no-schema-entry``), the keys the table lacks
    (``not-in-config``) and the keys whose default or type differs (``different-default``).
    """
    return {
        "no-schema-entry": [k for k in config if k not in SCHEMA],
        "not-in-config": [k for k in SCHEMA if k not in config],
        "different-default": [
            f"{k}: schema {SCHEMA[k].default!r}, config {v!r}"
            for k, v in config.items()
            if k in SCHEMA and (type(v) is not type(SCHEMA[k].default) or v != SCHEMA[k].default)
        ],
    }
