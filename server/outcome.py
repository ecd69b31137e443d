"""Did a run finish and train? The check behind ``umbel run``'s exit status.

Flower's ``flwr run`` can return 0 for a run whose ServerApp stopped early, so ``umbel run``
judges the run by what it wrote: a ``summary.json`` newer than the run's start (a re-used run
name keeps an old one) and at least one round with a usable train reply in ``metrics.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

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
