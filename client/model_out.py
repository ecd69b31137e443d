"""Writing the final cluster model the server delivers (``query.model``) to node config ``model-out``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import RecordDict

from common import keys
from common.modelstore import write_bundle
from common.validation import check_str


def write_model_out(content: RecordDict, node_config: Mapping[str, Any]) -> bool:
    """Write the message's model to ``model-out`` atomically (a ``.npz`` bundle); False when there is none.

    The arrays keep the model's ``state_dict`` names; the bundle's JSON holds ``cluster-id`` and
    ``server-round`` (``common.modelstore.read_bundle`` reads it back).
    """
    out = check_str(node_config.get(keys.MODEL_OUT, ""), keys.MODEL_OUT, "the node config")
    if not out:
        return False
    cfg = content.config_records[keys.CONFIG]
    arrays = {name: arr.numpy() for name, arr in content.array_records[keys.ARRAYS].items()}
    meta = {keys.CLUSTER_ID: int(cfg[keys.CLUSTER_ID]), keys.SERVER_ROUND: int(cfg[keys.SERVER_ROUND])}  # type: ignore[arg-type]
    write_bundle(Path(out).expanduser(), arrays, meta)
    return True
