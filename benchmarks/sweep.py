"""Sweep one run-config key of a strategy and plot final accuracy and clusters against it.

FedClust's Fig. 4 (Islam et al., 2024): test accuracy and the number of clusters versus the
clustering threshold lambda. Each value is one ordinary run through the CLI
(``python -m server.cli run ...``, the same path as ``umbel run``); the sweep reads each run's
``summary.json`` and last ``metrics.jsonl`` record and writes ``sweep.json`` and ``sweep.png``
to ``<results-dir>/<name>/``.

Example::

    python -m benchmarks.sweep --strategy fedclust --key fedclust-lambda --values 0.5,1,2,4 \
        --name fedclust-lambda-sweep -- --scenario label-skew --rounds 20
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from benchmarks.runs import ROOT, read_run, run_cli


def run_one(strategy: str, key: str, value: str, run_name: str, results_dir: Path, extra: Sequence[str]) -> dict:
    """Run the CLI once with ``--<key> <value>``; the run's summary plus its final cluster count.

    Raises
    ------
    RuntimeError
        If the run fails (its output's tail is in the message).
    """
    run = read_run(run_cli(["--strategy", strategy, f"--{key}", value, *extra], run_name, results_dir))
    summary, last = run["summary"], run["metrics"][-1]
    return {
        "value": float(value),
        "run-name": run_name,
        "final-accuracy": summary.get("final-accuracy"),
        "final-ari": summary.get("final-ari"),
        "num-clusters": last["num-clusters"],
        "round-seconds": sum(m["round-seconds"] for m in run["metrics"]),
    }


def plot_sweep(rows: Sequence[dict], key: str, path: Path, title: str = "") -> Path:
    """Final accuracy (line, left axis) and number of clusters (bars, right axis) per value."""
    xs = list(range(len(rows)))
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    bars = ax.twinx()
    bars.bar(xs, [r["num-clusters"] for r in rows], color="tab:red", alpha=0.35, width=0.6)
    bars.set_ylabel("number of clusters", color="tab:red")
    bars.yaxis.set_major_locator(MaxNLocator(integer=True))
    acc = [100 * r["final-accuracy"] if r["final-accuracy"] is not None else float("nan") for r in rows]
    ax.plot(xs, acc, marker="o", color="tab:blue")
    ax.set_zorder(bars.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.set_ylabel("final accuracy (%)", color="tab:blue")
    ax.set_xticks(xs, [f"{r['value']:g}" for r in rows])
    ax.set_xlabel(key)
    ax.grid(alpha=0.3)
    FigureCanvasAgg(fig)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=120)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``umbel run`` per value of the swept key and plot accuracy and clusters against it."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to every run unchanged."
    )
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--key", required=True, help="run-config key to sweep, e.g. fedclust-lambda")
    parser.add_argument("--values", required=True, help="comma-separated numbers")
    parser.add_argument("--name", default="", help="sweep folder name (default: <strategy>-<key>-sweep)")
    parser.add_argument("--results-dir", default="results")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    try:
        values = [v.strip() for v in args.values.split(",") if v.strip()]
        [float(v) for v in values]
    except ValueError:
        parser.error(f"The 'values' parameter of sweep must be comma-separated numbers. Got {args.values!r} instead.")
    if not values:
        parser.error("The 'values' parameter of sweep must list at least one number. Got '' instead.")
    name = args.name or f"{args.strategy}-{args.key}-sweep"
    results = (ROOT / args.results_dir) if not Path(args.results_dir).is_absolute() else Path(args.results_dir)
    rows = []
    for value in values:
        row = run_one(args.strategy, args.key, value, f"{name}-{value}", results, extra)
        rows.append(row)
        print(json.dumps(row), flush=True)
    rows.sort(key=lambda r: r["value"])
    folder = results / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(
        json.dumps({"strategy": args.strategy, "key": args.key, "extra": extra, "runs": rows}, indent=2)
    )
    path = plot_sweep(rows, args.key, folder / "sweep.png", f"{args.strategy}: accuracy and clusters vs {args.key}")
    print(f"sweep written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
