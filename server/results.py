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

from . import plots
from .figures import FIGURES
from .tracking import MetricsLogger

FINAL_FRACTION = 0.1


def progress_line(record: Mapping[str, Any], rounds: int) -> str:
    """``round  12/100 | train    | acc 0.7812 | ARI 1.000 | clusters  5 |  1.83 s``."""
    acc = "   -  " if record["accuracy"] is None else f"{record['accuracy']:.4f}"
    ari = " n/a " if record["ari"] is None else f"{record['ari']:.3f}"
    return (
        f"round {record['round']:>4}/{rounds} | {record['phase']:<8} | acc {acc} | ARI {ari} | "
        f"clusters {record['num-clusters']:>3} | {record['round-seconds']:6.2f} s"
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
    """

    def __init__(self, folder: Path, run_config: Mapping[str, Any], loggers: Sequence[MetricsLogger] = ()) -> None:
        self.folder = Path(folder)
        self.loggers = list(loggers)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run_config = dict(run_config)
        self.started = time.time()
        self._metrics = self.folder / "metrics.jsonl"
        self._metrics.unlink(missing_ok=True)  # a re-used run name starts afresh; rounds append

    def replay(self, history: list[dict[str, Any]]) -> None:
        """Write the rounds a resumed run already has (from its checkpoint) to ``metrics.jsonl``."""
        with self._metrics.open("a") as fh:
            for record in history:
                fh.write(json.dumps(record) + "\n")

    def on_round(self, strategy: ClusteredStrategy, record: dict[str, Any]) -> None:
        """Append the round's record and log the progress line."""
        with self._metrics.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        log(INFO, "%s", progress_line(record, strategy.training.rounds))
        for logger in self.loggers:
            logger.log_round(record)

    def finish(self, strategy: ClusteredStrategy) -> dict[str, Any]:
        """Write ``summary.json``, ``assignments.json`` and the plots; return the summary."""
        history = strategy.history
        summary = summarise(history, FINAL_FRACTION)
        summary.update(
            {
                "strategy": type(strategy).name,
                "num-clients": len(strategy.clients),
                "wall-seconds": round(time.time() - self.started, 3),
                "config": self.run_config,
                "details": strategy.run_details(),
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
        plot_history(history, self.folder, type(strategy).name)
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
            summary["final-accuracy"],
            cover.get("final-accuracy", "n/a"),
            summary["final-ari"],
            cover.get("final-ari", "n/a"),
            self.folder,
        )
        return summary

    def _plot_distances(self, strategy: ClusteredStrategy) -> None:
        """``distances.png`` from ``strategy.distance_matrix`` over ``distance_pids`` (default: all assigned)."""
        matrix = getattr(strategy, "distance_matrix", None)
        if matrix is None:
            return
        matrix = np.asarray(matrix)
        pids = list(getattr(strategy, "distance_pids", None) or sorted(strategy.assignment))
        if matrix.shape != (len(pids), len(pids)) or any(p not in strategy.assignment for p in pids):
            log(
                WARNING,
                "distance matrix of shape %s does not match its %d clients; not plotted",
                matrix.shape,
                len(pids),
            )
            return
        name = type(strategy).name
        rounds = [r["round"] for r in strategy.history if r["clustering-seconds"] > 0]
        when = f", round {rounds[-1]}" if rounds else ""
        plots.plot_distance_matrix(
            matrix,
            np.array([strategy.assignment[p] for p in pids]),
            self.folder / "distances.png",
            title=f"{name}: {distance_name(strategy)}{when}\n{len(pids)} clients by cluster",
        )


def distance_name(strategy: ClusteredStrategy) -> str:
    """What ``strategy.distance_matrix`` measures, in words."""
    params = getattr(strategy, "params", None)
    names = {
        "cflgt": "trajectory distance (mean point-wise L2)",
        "fedclust": "Euclidean distance of final layers",
        "pacfl": f"principal angles ({getattr(params, 'pacfl_measure', '')}), degrees",
        "flhc": f"{getattr(params, 'flhc_metric', '')} distance of updates",
        "flag": "A = beta V + (1 - beta) G (data and gradient angles)",
        "flic": "cosine distance 1 - cos of updates",
        "cfl-sattler": "cosine distance 1 - cos of updates",
        "cfl-gp": "Euclidean distance of the profiles' spectral features",
    }
    return names.get(type(strategy).name, "client distance")


def clustering_rounds(history: list[dict[str, Any]]) -> list[int]:
    """Rounds whose cluster count differs from the round before (round 1 when it starts above 1)."""
    marks, previous = [], 1
    for record in history:
        if record["num-clusters"] != previous:
            marks.append(record["round"])
        previous = record["num-clusters"]
    return marks


def plot_history(history: list[dict[str, Any]], folder: Path, name: str) -> None:
    """``accuracy.png`` (clustering rounds marked) and ``clustering.png`` of the rounds in ``history``."""
    evaluated = [r for r in history if r["accuracy"] is not None]
    if evaluated:
        plots.plot_accuracy(
            [r["round"] for r in evaluated],
            [r["accuracy"] for r in evaluated],
            [r["accuracy-std"] for r in evaluated],
            folder / "accuracy.png",
            title=f"{name}: mean local test accuracy",
            marks=clustering_rounds(history),
        )
    plots.plot_clustering(
        [r["round"] for r in history],
        [r["ari"] for r in history],
        [r["num-clusters"] for r in history],
        folder / "clustering.png",
        title=f"{name}: clustering",
    )


def write_partial(folder: Path, run_config: Mapping[str, Any]) -> int:
    """``summary.json`` and plots of an interrupted run from its ``metrics.jsonl``; the rounds it holds.

    The summary says ``"interrupted": true``; ``final-accuracy`` is over the rounds that ran.
    """
    path = Path(folder) / "metrics.jsonl"
    if not path.exists():
        return 0
    history = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not history:
        return 0
    summary = summarise(history, FINAL_FRACTION)
    summary.update({"interrupted": True, "strategy": run_config.get("strategy"), "config": dict(run_config)})
    _write_json(Path(folder) / "summary.json", summary)
    plot_history(history, Path(folder), str(run_config.get("strategy", "")))
    return len(history)


def summarise(history: list[dict[str, Any]], fraction: float = FINAL_FRACTION) -> dict[str, Any]:
    """Headline numbers of a run from its per-round records.

    ``final-accuracy`` is the mean over the evaluations in the run's ``final_stretch`` (every
    round there is evaluated; never the best round), ``final-accuracy-spread`` their standard
    deviation across those rounds and ``final-evaluations`` how many there are. Without any
    there (a resumed run, old records) it falls back to the last ``fraction`` of evaluated
    rounds. ``rounds-to-truth`` is the first round whose ARI reached 1.0.
    """
    evaluated = [r for r in history if r["accuracy"] is not None]
    last_round = history[-1]["round"] if history else 0
    stretch = [r for r in evaluated if r["round"] > last_round - final_stretch(max(last_round, 1))]
    if stretch:
        evaluated = stretch
        fraction = 1.0
    final = [r["accuracy"] for r in evaluated][-max(1, int(np.ceil(fraction * len(evaluated)))) :]
    accuracy = final_mean([r["accuracy"] for r in evaluated], fraction) if evaluated else None
    last = history[-1] if history else {}
    totals = {
        key: sum(r[key] for r in history)
        for key in ("bytes-down-model", "bytes-up-model", "bytes-down-signal", "bytes-up-signal")
    }
    return {
        "rounds": len(history),
        "final-accuracy": accuracy,
        "final-accuracy-std": final_mean([r["accuracy-std"] for r in evaluated], fraction) if evaluated else None,
        "final-accuracy-spread": float(np.std(final)) if final else None,
        "final-accuracy-range": [min(final), max(final)] if final else None,
        "final-evaluations": len(final),
        "final-ari": last.get("ari"),
        "final-ami": last.get("ami"),
        "final-num-clusters": last.get("num-clusters"),
        "coverage": coverage(history, fraction),
        "rounds-to-truth": first_round_reaching([r["round"] for r in history], [r["ari"] for r in history]),
        **totals,
        "failures": sum(r["failures"] for r in history),
        "rejected": sum(r["rejected"] for r in history),
        "capped": sum(r.get("capped", 0) for r in history),
        "lost-replies-per-round": [r["failures"] + r["rejected"] for r in history],
        "clustering-seconds": round(sum(r["clustering-seconds"] for r in history), 6),
        "training-seconds": round(sum(r["round-seconds"] for r in history), 3),
    }


def coverage(history: list[dict[str, Any]], fraction: float = FINAL_FRACTION) -> dict[str, str]:
    """How many clients each final figure covers, e.g. ``{"final-accuracy": "over 19 of 20 clients"}``.

    Accuracy counts the clients whose evaluation came back, at least in every round
    ``final-accuracy`` averages (the fewest of them); clustering scores count the clients
    with a cluster in the last round. Records without these counts give nothing.
    """
    out: dict[str, str] = {}
    evaluated = [r for r in history if r.get("accuracy") is not None and r.get("eval-clients") is not None]
    if evaluated:
        final = evaluated[-max(1, math.ceil(fraction * len(evaluated))) :]
        out["final-accuracy"] = (
            f"over {min(r['eval-clients'] for r in final)} of {max(r['num-clients'] for r in final)} clients"
        )
    if history and history[-1].get("num-clients") is not None:
        last = history[-1]
        gone: set[int] = set()
        for record in history:
            gone = (gone | set(record.get("clients-lost", []))) - set(record.get("clients-rejoined", []))
        out["final-ari"] = out["final-ami"] = (
            f"over {last['num-clients']} clients ({len(gone)} of them offline at the end)"
        )
    return out


def _write_json(path: Path, data: Any) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
