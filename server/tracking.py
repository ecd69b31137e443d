"""Experiment tracking: each round's metrics to an external tracker (TensorBoard here).

A backend implements ``MetricsLogger``: ``log_round`` gets the round's record (the line
``metrics.jsonl`` holds) and ``close`` ends the run. ``RunRecorder`` calls every logger that
``open_loggers`` returns. A second backend (MLflow, W&B) is one more class and one more key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from common.config import OutputParams

TENSORBOARD_FOLDER = "tensorboard"
# the per-round numbers a tracker plots, under the tag each gets there
SCALARS: dict[str, str] = {
    "accuracy": "accuracy/mean",
    "accuracy-std": "accuracy/std",
    "loss": "accuracy/loss",
    "ari": "clustering/ari",
    "ami": "clustering/ami",
    "num-clusters": "clustering/num-clusters",
    "clustering-seconds": "time/clustering-seconds",
    "round-seconds": "time/round-seconds",
    "bytes-down-model": "bytes/down-model",
    "bytes-up-model": "bytes/up-model",
    "bytes-down-signal": "bytes/down-signal",
    "bytes-up-signal": "bytes/up-signal",
    "train-replies": "clients/train-replies",
    "failures": "clients/failures",
    "rejected": "clients/rejected",
}


class MetricsLogger(Protocol):
    """Where a run's per-round metrics go besides ``metrics.jsonl``."""

    def log_round(self, record: Mapping[str, Any]) -> None:
        """Record one finished round (keys as in ``metrics.jsonl``; ``round`` is the step)."""

    def close(self) -> None:
        """Flush and release the backend."""


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The tracked numbers of ``record`` by tag; missing, ``None`` and non-numeric values left out."""
    out = {}
    for key, tag in SCALARS.items():
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[tag] = float(value)
    return out


class TensorBoardLogger:
    """Scalars per round into TensorBoard event files under ``logdir``.

    Parameters
    ----------
    logdir : Path
        The run's ``results/<run-name>/tensorboard`` folder.
    data : str, default=""
        The data the run used, in words; written once as the text ``data``.
    """

    def __init__(self, logdir: Path, data: str = "") -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = Path(logdir)
        self._writer = SummaryWriter(log_dir=str(self.logdir))
        if data:
            self._writer.add_text("data", data, global_step=0)

    def log_round(self, record: Mapping[str, Any]) -> None:
        """Write the round's scalar metrics at step ``round``."""
        for tag, value in scalars(record).items():
            self._writer.add_scalar(tag, value, global_step=int(record["round"]))
        self._writer.flush()  # a run that is killed keeps its rounds

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


def check_tensorboard() -> None:
    """Raise ``ValueError`` before the run starts when the tensorboard package is missing."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ValueError(
            "The 'tensorboard' parameter of the run config needs the tensorboard package "
            "(pip install 'umbel[tensorboard]'). Got True without it instead."
        ) from None


def open_loggers(output: OutputParams, folder: Path, data: str = "") -> list[MetricsLogger]:
    """The loggers ``output`` asks for, writing under the run's ``folder``; ``data`` names the run's data."""
    loggers: list[MetricsLogger] = []
    if output.tensorboard:
        check_tensorboard()
        loggers.append(TensorBoardLogger(Path(folder) / TENSORBOARD_FOLDER, data))
    return loggers
