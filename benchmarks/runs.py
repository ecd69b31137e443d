"""One benchmark run = one ordinary ``umbel run`` (``python -m server.cli run``), and what it wrote.

Shared by ``compare.py``, ``overhead.py`` and ``sweep.py``, so every benchmark measures the
path a user runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_cli(
    args: Sequence[str], run_name: str, results_dir: Path, log: Path | None = None, app_root: Path = ROOT
) -> Path:
    """Run ``umbel run <args> --run-name <run_name> --results-dir <results_dir>``; its results folder.

    The run's output goes to ``log`` (default ``<results_dir>/<run_name>.log``). ``app_root`` is the
    working folder, whose ``server`` package and app ``flwr run`` packs (default: this repository).

    Raises
    ------
    RuntimeError
        If the run fails; the message holds the command and the tail of its output.
    """
    results_dir = Path(results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    log = log or results_dir / f"{run_name}.log"
    cmd = [sys.executable, "-m", "server.cli", "run", *args, "--run-name", run_name, "--results-dir", str(results_dir)]
    with log.open("w") as fh:
        code = subprocess.call(cmd, cwd=app_root, stdout=fh, stderr=subprocess.STDOUT)
    folder = results_dir / run_name
    if code != 0 or not (folder / "summary.json").exists():
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {code}:\n{tail}")
    return folder


def read_run(folder: Path) -> dict[str, Any]:
    """A finished run's ``summary``, per-round ``metrics`` (umbel's loop only) and ``round-times``."""
    folder = Path(folder)
    metrics_file = folder / "metrics.jsonl"
    times_file = folder / "round-times.json"
    return {
        "summary": json.loads((folder / "summary.json").read_text()),
        "metrics": [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
        if metrics_file.exists()
        else [],
        "round-times": json.loads(times_file.read_text()) if times_file.exists() else None,
    }


def training_round_seconds(run: dict[str, Any], skip_first: int = 1) -> list[float]:
    """Seconds of the rounds that only trained (no local evaluation), after the first ``skip_first``.

    Taken from ``round-times.json`` (end of round to end of round, measured the same way in
    umbel's and Flower's loops); evaluation rounds and the last round are left out.
    """
    times = {int(r): s for r, s in (run["round-times"] or {}).get("round-seconds", {}).items()}
    evaluated = {m["round"] for m in run["metrics"] if m.get("accuracy") is not None}
    last = max(times, default=0)
    return [s for r, s in sorted(times.items()) if r > skip_first and r != last and r not in evaluated]
