"""Client-side signal computation, one module per signal, answered as ``query.<action>``.

A handler takes the client's task and the query's content (models and config) and returns
the signal's arrays (``Signal.to_arrays()`` of a ``common.signals`` dataclass). ``client.app``
registers every handler in ``QUERIES`` with Flower. ``QUERIES`` (``queries.py``) is written by
``python -m server.derived`` from the signals the registered strategies declare in their
``queries``. To add a signal: write its handler in a module here, name it in the signal class's
``handler`` and list the class in the ``queries`` of the strategy that asks for it.
"""

from __future__ import annotations

from .messages import Handler, models_in
from .queries import QUERIES

__all__ = ["QUERIES", "Handler", "models_in"]
