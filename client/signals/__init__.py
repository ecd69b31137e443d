"""Client-side signal computation, one module per signal, answered as ``query.<action>``.

A handler takes the client's task and the query's content (models and config) and returns
the signal's arrays (``Signal.to_arrays()`` of a ``common.signals`` dataclass). ``client.app``
registers every handler in ``QUERIES`` with Flower. To add a signal: write a module here
with ``@register(action)`` and import it at the bottom of this file.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from common import keys

from ..task import ClientTask

Handler = Callable[[ClientTask, RecordDict], dict[str, np.ndarray]]
QUERIES: dict[str, Handler] = {}


def register(action: str) -> Callable[[Handler], Handler]:
    """Register ``handler`` for ``query.<action>``."""

    def decorator(handler: Handler) -> Handler:
        if action in QUERIES:
            raise ValueError(f"Query action {action!r} is registered twice.")
        QUERIES[action] = handler
        return handler

    return decorator


def models_in(content: RecordDict) -> list[ArrayRecord]:
    """The models a message carries: ``arrays-0 .. arrays-{K-1}`` (``num-models`` in config) or ``arrays``."""
    cfg = content.config_records.get(keys.CONFIG)
    count = int(cfg[keys.NUM_MODELS]) if cfg is not None and keys.NUM_MODELS in cfg else 0
    if count:
        return [content.array_records[keys.model_record(k)] for k in range(count)]
    return [content.array_records[keys.ARRAYS]]


from . import final_layer, flag, forces, losses, profile, subspaces, update  # noqa: F401  (each registers its handler)
