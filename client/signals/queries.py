"""The signal queries the ClientApp answers, by action: every registered strategy's ``queries``.

Written by ``python -m server.derived`` from the strategies (``strategies.queries.client_table``):
declare a signal in the ``queries`` of the strategy that asks for it, not here.
"""

from __future__ import annotations

from common import keys

from . import final_layer, flag, forces, losses, profile, subspaces, update
from .messages import Handler

QUERIES: dict[str, Handler] = {
    keys.FORCES_ACTION: forces.forces,
    keys.FINAL_LAYER_ACTION: final_layer.final_layer,
    keys.HOLDOUT_ACTION: flag.holdout,
    keys.LOSSES_ACTION: losses.model_losses,
    keys.PROFILE_ACTION: profile.gradient_profile,
    keys.SUBSPACES_ACTION: subspaces.subspaces,
    keys.UPDATE_ACTION: update.model_update,
}
