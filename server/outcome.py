"""Did a run finish and train? The check behind ``umbel run``'s exit status.

Flower's ``flwr run`` can return 0 for a run whose ServerApp stopped early, so ``umbel run``
judges the run by what it wrote: a ``summary.json`` newer than the run's start (a re-used run
name keeps an old one) and at least one round with a usable train reply in ``metrics.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # flwr loads only when a run needs it: `umbel --help` answers at once
    from strategies import ClusteredStrategy

SUMMARY = "summary.json"
METRICS = "metrics.jsonl"


def run_failure(folder: Path, started: float) -> str | None:
    """Why the run whose results are in ``folder`` failed, or ``None`` when it finished and trained.

    Parameters
    ----------
    folder : Path
        The run's results folder (``results-dir/run-name``).
    started : float
        When the run started (``time.time()``); files older than this are a previous run's.
    """
    summary = folder / SUMMARY
    if not summary.is_file() or summary.stat().st_mtime < started:
        return f"it wrote no {SUMMARY} (it stopped before its last round)"
    metrics = folder / METRICS
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    records = [json.loads(line) for line in lines if line.strip()]
    if not any(int(r.get("train-replies") or 0) > 0 for r in records):
        return (
            f"no client trained: none of its {len(records)} rounds had a usable train reply "
            "(every one failed, timed out or was rejected; see the log above)"
        )
    return None


def missing_clients(strategy: ClusteredStrategy, num_clients: int) -> str:
    """Who the final figures leave out, a few ids then a count each; ``""`` when nobody is missing.

    ``num_clients`` is the federation's size (run-config ``num-clients``): partitions that never
    joined are named too, as are clients whose last evaluation did not come back (clients that
    hold no test data are never evaluated, and are not counted here).
    """
    from strategies.outcome import some_ids

    joined = set(strategy.clients) | set(strategy.waiting)
    parts = []
    never = sorted(set(range(num_clients)) - joined)
    if never:
        parts.append(f"{len(never)} never took part {some_ids(never)}")
    if any(r.eval_clients is not None for r in strategy.history):
        tested = {p for p in strategy.assignment if strategy.clients[p].num_test > 0}
        unevaluated = sorted(tested - set(strategy.last_eval))
        if unevaluated:
            parts.append(f"{len(unevaluated)} not evaluated in the last evaluation {some_ids(unevaluated)}")
    return "; ".join(parts)
