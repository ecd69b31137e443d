"""What every run records in ``results/<run-name>/``.

``metrics.jsonl`` (a line per round, written as the round ends), ``assignments.json`` (the
client -> cluster history), ``summary.json`` and PNG plots.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.common import log

from common.metrics import final_mean, final_stretch, first_round_reaching
from strategies import ClusteredStrategy
from strategies.record import RoundRecord
from strategies.updates import StoredUpdates

from . import plots
from .figures import FIGURES
from .provenance import data_text
from .outcome import missing_clients
from .tracking import MetricsLogger

FINAL_FRACTION = 0.1
PLOTTED_CLIENTS = 2000
"""Clients ``distances.png`` shows at most (a seeded sample above)."""
MISSING = "n/a"  # a figure the run has none of, in the log (JSON files hold null)


def progress_line(record: RoundRecord, rounds: int) -> str:
    """``round  12/100 | train    | acc 0.7812 | ARI 1.000 | clusters  5 |  1.83 s``."""
    acc = "   -  " if record.accuracy is None else f"{record.accuracy:.4f}"
    ari = f"{MISSING:^5}" if record.ari is None else f"{record.ari:.3f}"
    return (
        f"round {record.round:>4}/{rounds} | {record.phase:<8} | acc {acc} | ARI {ari} | "
        f"clusters {record.num_clusters:>3} | {record.round_seconds:6.2f} s"
    )


class RunRecorder:
    """Writes a run's files; ``on_round`` is the strategy's per-round callback.

    Parameters
    ----------
    folder : Path
        ``results/<run-name>``; created if missing.
    run_config : mapping
        The full run-config, stored in ``summary.json``.
    loggers : sequence of MetricsLogger, default=()
        Trackers that get every round's record too (``server.tracking``).
    expected_clients : int, optional
        The run's ``num-clients``, stored as ``expected-clients`` beside the ``num-clients`` that took part.
    data : mapping, optional
        The data the run used (``server.provenance.describe_data``), stored as ``data`` and named in the figures.
    """

    def __init__(
        self,
        folder: Path,
        run_config: Mapping[str, Any],
        loggers: Sequence[MetricsLogger] = (),
        expected_clients: int | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.expected_clients = expected_clients
        self.data = dict(data) if data else None
        self.loggers = list(loggers)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run_config = dict(run_config)
        self.started = time.time()
        self._metrics = self.folder / "metrics.jsonl"
        self._metrics.unlink(missing_ok=True)  # a re-used run name starts afresh; rounds append

    def replay(self, history: Sequence[RoundRecord | Mapping[str, Any]]) -> None:
        """Write the rounds a resumed run already has (from its checkpoint) to ``metrics.jsonl``."""
        with self._metrics.open("a") as fh:
            for record in history:
                line = record.to_dict() if isinstance(record, RoundRecord) else dict(record)
                fh.write(json.dumps(line) + "\n")

    def on_round(self, strategy: ClusteredStrategy, record: RoundRecord) -> None:
        """Append the round's record and log the progress line."""
        line = record.to_dict()
        with self._metrics.open("a") as fh:
            fh.write(json.dumps(line) + "\n")
        log(INFO, "%s", progress_line(record, strategy.training.rounds))
        for logger in self.loggers:
            logger.log_round(line)

    def finish(self, strategy: ClusteredStrategy) -> dict[str, Any]:
        """Write ``summary.json``, ``assignments.json`` and the plots; return the summary."""
        history = strategy.history
        summary = summarise(history, FINAL_FRACTION)
        summary.update(
            {
                "strategy": type(strategy).name,
                "num-clients": len(strategy.clients),
                "expected-clients": self.expected_clients or len(strategy.clients),
                "data": self.data,
                "wall-seconds": round(time.time() - self.started, 3),
                "config": self.run_config,
                "details": strategy.run_details(),
                "not-learning": None if strategy.learning is None else strategy.learning.to_summary(),
                "delivery": None if strategy.delivery is None else strategy.delivery.to_dict(),
            }
        )
        _write_json(self.folder / "summary.json", summary)
        _write_json(
            self.folder / "assignments.json",
            {
                "true-groups": {str(p): strategy.true_group(p) for p in sorted(strategy.clients)},
                "history": strategy.assignment_changes,
            },
        )
        plot_history(history, self.folder, type(strategy).name, data_text(self.data) if self.data else "")
        self._plot_distances(strategy)
        figure = FIGURES.get(type(strategy).name)
        if figure is not None:
            figure(strategy, self.folder)
        for logger in self.loggers:
            logger.close()
        cover = summary["coverage"]
        log(
            INFO,
            "final accuracy %s (%s), final ARI %s (%s); results in %s",
            _shown(summary["final-accuracy"], 4),
            cover.get("final-accuracy", MISSING),
            _shown(summary["final-ari"], 3),
            cover.get("final-ari", MISSING),
            self.folder,
        )
        if missing := missing_clients(strategy, int(self.run_config.get("num-clients") or 0)):
            log(WARNING, "clients missing from the final figures: %s", missing)
        return summary

    def _plot_distances(self, strategy: ClusteredStrategy) -> None:
        """``distances.png`` of ``distance_pids`` (default: all assigned); above ``PLOTTED_CLIENTS`` a seeded
        sample, whose distances alone are computed or read (:func:`plotted_distances`)."""
        pids = list(strategy.distance_pids or sorted(strategy.assignment))
        keep = None
        if len(pids) > PLOTTED_CLIENTS:  # an image of 10,000 x 10,000 cells takes gigabytes and shows no more
            keep = np.sort(np.random.default_rng(strategy.training.seed).choice(len(pids), PLOTTED_CLIENTS, False))
        matrix = plotted_distances(strategy, len(pids), keep)
        if matrix is None:
            return
        shown = f"{len(pids)} clients"
        if keep is not None:
            pids, shown = [pids[i] for i in keep], f"a seeded sample of {PLOTTED_CLIENTS:,} of {shown}"
        if matrix.shape != (len(pids), len(pids)) or any(p not in strategy.assignment for p in pids):
            log(
                WARNING,
                "distance matrix of shape %s does not match its %d clients; not plotted",
                matrix.shape,
                len(pids),
            )
            return
        name = type(strategy).name
        rounds = [r.round for r in strategy.history if r.clustering_seconds > 0]
        when = f", round {rounds[-1]}" if rounds else ""
        plots.plot_distance_matrix(
            matrix,
            np.array([strategy.assignment[p] for p in pids]),
            self.folder / "distances.png",
            title=f"{name}: {distance_name(strategy)}{when}\n{shown} by cluster",
        )


def plotted_distances(strategy: ClusteredStrategy, count: int, keep: np.ndarray | None) -> np.ndarray | None:
    """The distances among the ``count`` clients of ``distance_pids``, or only those at positions ``keep``:
    computed for them alone from a store of updates (``StoredUpdates``), else sliced from
    ``distance_matrix`` (a matrix of another shape is returned whole)."""
    if isinstance(strategy, StoredUpdates):
        return strategy.plotted_distances(keep)
    if strategy.distance_matrix is None:
        return None
    matrix = np.asarray(strategy.distance_matrix)
    return matrix if keep is None or matrix.shape != (count, count) else matrix[np.ix_(keep, keep)]


def distance_name(strategy: ClusteredStrategy) -> str:
    """What ``strategy.distance_matrix`` measures, in words."""
    return strategy.describe_distances()


def clustering_rounds(history: Sequence[RoundRecord]) -> list[int]:
    """Rounds whose cluster count differs from the round before (round 1 when it starts above 1)."""
    marks, previous = [], 1
    for record in history:
        if record.num_clusters != previous:
            marks.append(record.round)
        previous = record.num_clusters
    return marks


def plot_history(history: Sequence[RoundRecord], folder: Path, name: str, data: str = "") -> None:
    """``accuracy.png`` (clustering rounds marked) and ``clustering.png`` of the rounds in ``history``;
    ``data`` (the run's data, in words) goes under each title.
    """
    where = f"\n{data}" if data else ""
    evaluated = [(r.round, r.accuracy, r.accuracy_std) for r in history if r.accuracy is not None]
    if evaluated:
        rounds, accuracy, spread = zip(*evaluated, strict=True)
        plots.plot_accuracy(
            list(rounds),
            list(accuracy),
            list(spread),
            folder / "accuracy.png",
            title=f"{name}: mean local test accuracy{where}",
            marks=clustering_rounds(history),
        )
    plots.plot_clustering(
        [r.round for r in history],
        [r.ari for r in history],
        [r.num_clusters for r in history],
        folder / "clustering.png",
        title=f"{name}: clustering{where}",
    )


def write_partial(folder: Path, run_config: Mapping[str, Any]) -> int:
    """``summary.json`` and plots of an interrupted run from its ``metrics.jsonl``; the rounds it holds.

    The summary says ``"interrupted": true``; ``final-accuracy`` is over the rounds that ran.
    """
    path = Path(folder) / "metrics.jsonl"
    if not path.exists():
        return 0
    history = [RoundRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    if not history:
        return 0
    summary = summarise(history, FINAL_FRACTION)
    summary.update({"interrupted": True, "strategy": run_config.get("strategy"), "config": dict(run_config)})
    _write_json(Path(folder) / "summary.json", summary)
    plot_history(history, Path(folder), str(run_config.get("strategy", "")))
    return len(history)


def summarise(history: Sequence[RoundRecord], fraction: float = FINAL_FRACTION) -> dict[str, Any]:
    """Headline numbers of a run from its per-round records.

    ``final-accuracy`` is the mean over the evaluations in the run's ``final_stretch`` (every
    round there is evaluated; never the best round), ``final-accuracy-spread`` their standard
    deviation across those rounds and ``final-evaluations`` how many there are. Without any
    there (a resumed run, old records) it falls back to the last ``fraction`` of evaluated
    rounds. ``rounds-to-truth`` is the first round whose ARI reached 1.0.
    """
    evaluated = [(r.round, r.accuracy, r.accuracy_std) for r in history if r.accuracy is not None]
    last_round = history[-1].round if history else 0
    stretch = [e for e in evaluated if e[0] > last_round - final_stretch(max(last_round, 1))]
    if stretch:
        evaluated = stretch
        fraction = 1.0
    accuracies = [acc for _, acc, _ in evaluated]
    final = accuracies[-max(1, int(np.ceil(fraction * len(evaluated)))) :]
    last = history[-1] if history else None
    return {
        "rounds": len(history),
        "final-accuracy": final_mean(accuracies, fraction) if evaluated else None,
        "final-accuracy-std": final_mean([std for _, _, std in evaluated], fraction) if evaluated else None,
        "final-accuracy-spread": float(np.std(final)) if final else None,
        "final-accuracy-range": [min(final), max(final)] if final else None,
        "final-evaluations": len(final),
        "final-ari": None if last is None else last.ari,
        "final-ami": None if last is None else last.ami,
        "final-num-clusters": None if last is None else last.num_clusters,
        "coverage": coverage(history, fraction),
        "rounds-to-truth": first_round_reaching([r.round for r in history], [r.ari for r in history]),
        "bytes-down-model": sum(r.bytes_down_model for r in history),
        "bytes-up-model": sum(r.bytes_up_model for r in history),
        "bytes-down-signal": sum(r.bytes_down_signal for r in history),
        "bytes-up-signal": sum(r.bytes_up_signal for r in history),
        "failures": sum(r.failures for r in history),
        "rejected": sum(r.rejected for r in history),
        "capped": sum(r.capped for r in history),
        "lost-replies-per-round": [r.failures + r.rejected for r in history],
        "clustering-seconds": round(sum(r.clustering_seconds for r in history), 6),
        "training-seconds": round(sum(r.round_seconds for r in history), 3),
    }


def coverage(history: Sequence[RoundRecord], fraction: float = FINAL_FRACTION) -> dict[str, str]:
    """How many clients each final figure covers, e.g. ``{"final-accuracy": "over 19 of 20 clients"}``.

    Accuracy counts the clients whose evaluation came back, at least in every round
    ``final-accuracy`` averages (the fewest of them); clustering scores count the clients
    with a cluster in the last round. Records without these counts give nothing.
    """
    out: dict[str, str] = {}
    evaluated = [
        (r.eval_clients, r.num_clients) for r in history if r.accuracy is not None and r.eval_clients is not None
    ]
    if evaluated:
        final = evaluated[-max(1, math.ceil(fraction * len(evaluated))) :]
        out["final-accuracy"] = f"over {min(e for e, _ in final)} of {max(n or 0 for _, n in final)} clients"
    if history and history[-1].num_clients is not None:
        last = history[-1]
        gone: set[int] = set()
        for record in history:
            gone = (gone | set(record.clients_lost)) - set(record.clients_rejoined)
        out["final-ari"] = out["final-ami"] = (
            f"over {last.num_clients} clients ({len(gone)} of them offline at the end)"
        )
    return out


def _shown(value: float | None, digits: int) -> str:
    """A figure for the log: ``digits`` decimals, ``n/a`` when there is none (as the progress line)."""
    return MISSING if value is None else f"{value:.{digits}f}"


def _write_json(path: Path, data: Any) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
