"""What a signal handler receives: the handler's type and the models a query carries."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from common import keys
from common.records import read_int

from ..task import SERVER_CONFIG, ClientTask

Handler = Callable[[ClientTask, RecordDict], dict[str, np.ndarray]]


def models_in(content: RecordDict) -> list[ArrayRecord]:
    """The models a message carries: ``arrays-0 .. arrays-{K-1}`` (``num-models`` in config) or ``arrays``."""
    cfg = content.config_records.get(keys.CONFIG)
    count = read_int(cfg, keys.NUM_MODELS, SERVER_CONFIG, default=0) if cfg is not None else 0
    if count:
        return [content.array_records[keys.model_record(k)] for k in range(count)]
    return [content.array_records[keys.ARRAYS]]
