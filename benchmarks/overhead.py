"""umbel's FedAvg against plain Flower FedAvg: the ratio of mean round times, side by side.

Both are ordinary ``umbel run``s with the same model, data, clients, rounds and local
training; one uses umbel's server loop (``--strategy fedavg``), the other Flower's own
``flwr.serverapp.strategy.FedAvg`` driving the same ClientApp (``benchmarks.flower_fedavg_app``,
run from a copy of the app whose ServerApp it is). The
runs alternate (umbel first, then Flower first, ...) so that drift in the machine's load falls
on both. Round times come from ``round-times.json`` (end of round to end of round, measured
the same way in both loops); the first round (actor start-up) and the last (umbel's only
evaluation) are left out. Writes ``overhead.md`` and ``overhead.json`` to
``<results-dir>/overhead/``.

Example::

    python -m benchmarks.overhead --pairs 3 --rounds 20
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.flower_fedavg_app import flower_fedavg_tree
from benchmarks.records import Table, load_average
from benchmarks.report import OVERHEAD, add_record_flag, save_tables, tables_from_markdown
from benchmarks.runs import ROOT, read_run, run_cli, training_round_seconds
from strategies import FedAvg

LOOPS = ("umbel", "flower")
RESOLUTION = 0.02  # the ratio's 95% interval should be within +-2%


def bootstrap_ratio(
    numerator: Sequence[float], denominator: Sequence[float], resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Ratio of the means and its 95% percentile-bootstrap interval (each side resampled on its own).

    Raises
    ------
    ValueError
        If either side is empty.
    """
    if not numerator or not denominator:
        raise ValueError(
            "The 'numerator' and 'denominator' parameters of bootstrap_ratio must be non-empty. "
            f"Got {len(numerator)} and {len(denominator)} values instead."
        )
    a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    rng = np.random.default_rng(seed)
    ratios = a[rng.integers(0, a.size, (resamples, a.size))].mean(axis=1) / b[
        rng.integers(0, b.size, (resamples, b.size))
    ].mean(axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(a.mean() / b.mean()), float(low), float(high)


def pairs_for_resolution(pair_ratios: Sequence[float], resolution: float = RESOLUTION) -> int | None:
    """Pairs whose mean ratio has a 95% half-width of ``resolution``, from the spread of these pairs.

    ``None`` with fewer than two pairs (no spread to go by).
    """
    if len(pair_ratios) < 2:
        return None
    spread = statistics.stdev(pair_ratios)
    return max(len(pair_ratios), math.ceil((1.96 * spread / resolution) ** 2))


def run_pair(index: int, common: Sequence[str], folder: Path, flower_root: Path) -> dict[str, Any]:
    """One umbel run and one Flower run (order alternating with ``index``): each loop's training-round
    seconds under its name, and its last train loss under ``<loop>-train-loss``. The Flower run
    starts in ``flower_root`` (a ``flower_fedavg_tree``).
    """
    order = LOOPS if index % 2 == 0 else LOOPS[::-1]
    roots = {"umbel": ROOT, "flower": flower_root}
    times: dict[str, Any] = {}
    for loop in order:
        run = read_run(run_cli(["--strategy", FedAvg.name, *common], f"{loop}-{index}", folder, app_root=roots[loop]))
        times[loop] = training_round_seconds(run)
        times[f"{loop}-train-loss"] = run["round-times"]["final-train-loss"]
    return times


def ratio_report(pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean round time of each loop over all pairs, their ratio, and the per-pair ratios."""
    umbel = [s for p in pairs for s in p["umbel"]]
    flower = [s for p in pairs for s in p["flower"]]
    if not umbel or not flower:
        raise ValueError("No training rounds to compare: use at least 4 rounds.")
    pair_ratios = [statistics.fmean(p["umbel"]) / statistics.fmean(p["flower"]) for p in pairs]
    _, low, high = bootstrap_ratio(umbel, flower)
    return {
        "umbel-mean-round-seconds": statistics.fmean(umbel),
        "flower-mean-round-seconds": statistics.fmean(flower),
        "ratio": statistics.fmean(umbel) / statistics.fmean(flower),
        "ratio-ci95": [low, high],
        "median-ratio": statistics.median(umbel) / statistics.median(flower),
        "pair-ratios": pair_ratios,
        "pairs-for-2-percent": pairs_for_resolution(pair_ratios),
        "rounds-compared": len(umbel),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pairs, then print and write the ratio with its interval."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to every run unchanged."
    )
    parser.add_argument("--pairs", type=int, default=3, help="umbel/Flower run pairs")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--results-dir", default="results/bench")
    add_record_flag(parser)
    args, extra = parser.parse_known_args(argv)
    load_before = load_average()
    extra = [a for a in extra if a != "--"]
    if args.pairs < 1:
        parser.error(
            f"The 'pairs' parameter of overhead must be an int in the range [1, inf). Got {args.pairs} instead."
        )
    if args.rounds < 4:
        parser.error(
            f"The 'rounds' parameter of overhead must be an int in the range [4, inf). Got {args.rounds} instead."
        )
    common = [
        "--num-clients",
        "100",
        "--fraction",
        "0.2",
        "--local-epochs",
        "1",
        "--rounds",
        str(args.rounds),
        "--eval-every",
        str(args.rounds),
        *extra,
    ]
    results_dir = Path(args.results_dir)
    folder = (results_dir if results_dir.is_absolute() else ROOT / results_dir) / "overhead"
    pairs = []
    with tempfile.TemporaryDirectory(prefix="umbel-flower-fedavg-") as tmp:
        flower_root = flower_fedavg_tree(ROOT, Path(tmp))
        for i in range(args.pairs):
            pairs.append(run_pair(i, common, folder, flower_root))
            print(
                f"pair {i}: umbel {statistics.fmean(pairs[-1]['umbel']):.3f} s/round, "
                f"flower {statistics.fmean(pairs[-1]['flower']):.3f} s/round",
                flush=True,
            )
    report = ratio_report(pairs)
    command = "python -m benchmarks.overhead " + " ".join(sys.argv[1:] if argv is None else argv)
    (folder / "overhead.json").write_text(
        json.dumps({"command": command, "runs-flags": common, **report, "pairs": pairs}, indent=2) + "\n"
    )
    text = (
        f"Command: `{command}`\n\n| loop | mean round (s) |\n|---|---|\n"
        f"| umbel FedAvg | {report['umbel-mean-round-seconds']:.3f} |\n"
        f"| Flower FedAvg | {report['flower-mean-round-seconds']:.3f} |\n\n"
        f"Ratio umbel / Flower: **{report['ratio']:.3f}** (95% bootstrap interval over the rounds "
        f"{report['ratio-ci95'][0]:.3f}-{report['ratio-ci95'][1]:.3f}; "
        f"medians: {report['median-ratio']:.3f}; per pair: "
        + ", ".join(f"{r:.3f}" for r in report["pair-ratios"])
        + f"; {report['rounds-compared']} rounds each).\n\n"
        + (
            f"Pairs this spread needs for +-2% (95%): {report['pairs-for-2-percent']}.\n"
            if report["pairs-for-2-percent"] is not None
            else "One pair: run at least two to estimate how many resolve +-2%.\n"
        )
    )
    (folder / "overhead.md").write_text(text)
    print((folder / "overhead.md").read_text())
    if args.record:
        tables: list[Table] = tables_from_markdown("End to end: umbel's FedAvg against Flower's FedAvg", text)
        print(f"wrote {save_tables('overhead', OVERHEAD, tables, load_before)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
