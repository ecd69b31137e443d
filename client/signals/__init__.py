"""Client-side signal computation, one module per signal, answered as ``query.<action>``.

A handler takes the client's task and the query's content (models and config) and returns
the signal's arrays (``Signal.to_arrays()`` of a ``common.signals`` dataclass). ``client.app``
registers every handler in ``QUERIES`` with Flower. To add a signal: write its handler in a
module here and add it to ``QUERIES`` under its action (a ``common.keys`` constant).
"""

from __future__ import annotations

from common import keys

from . import final_layer, flag, forces, losses, profile, subspaces, update
from .messages import Handler, models_in

# The handlers by module, so that each submodule stays reachable as ``client.signals.<module>``.
QUERIES: dict[str, Handler] = {
    keys.LOSSES_ACTION: losses.model_losses,
    keys.FINAL_LAYER_ACTION: final_layer.final_layer,
    keys.SUBSPACES_ACTION: subspaces.subspaces,
    keys.UPDATE_ACTION: update.model_update,
    keys.FORCES_ACTION: forces.forces,
    keys.PROFILE_ACTION: profile.gradient_profile,
    keys.HOLDOUT_ACTION: flag.holdout,
}

__all__ = ["QUERIES", "Handler", "models_in"]
