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
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.flower_fedavg_app import flower_fedavg_tree
from benchmarks.runs import ROOT, read_run, run_cli, training_round_seconds

LOOPS = ("umbel", "flower")


def run_pair(index: int, common: Sequence[str], folder: Path, flower_root: Path) -> dict[str, Any]:
    """One umbel run and one Flower run (order alternating with ``index``): each loop's training-round
    seconds under its name, and its last train loss under ``<loop>-train-loss``. The Flower run
    starts in ``flower_root`` (a ``flower_fedavg_tree``).
    """
    order = LOOPS if index % 2 == 0 else LOOPS[::-1]
    roots = {"umbel": ROOT, "flower": flower_root}
    times: dict[str, Any] = {}
    for loop in order:
        run = read_run(run_cli(["--strategy", "fedavg", *common], f"{loop}-{index}", folder, app_root=roots[loop]))
        times[loop] = training_round_seconds(run)
        times[f"{loop}-train-loss"] = run["round-times"]["final-train-loss"]
    return times


def ratio_report(pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean round time of each loop over all pairs, their ratio, and the per-pair ratios."""
    umbel = [s for p in pairs for s in p["umbel"]]
    flower = [s for p in pairs for s in p["flower"]]
    if not umbel or not flower:
        raise ValueError("No training rounds to compare: use at least 4 rounds.")
    return {
        "umbel-mean-round-seconds": statistics.fmean(umbel),
        "flower-mean-round-seconds": statistics.fmean(flower),
        "ratio": statistics.fmean(umbel) / statistics.fmean(flower),
        "median-ratio": statistics.median(umbel) / statistics.median(flower),
        "pair-ratios": [statistics.fmean(p["umbel"]) / statistics.fmean(p["flower"]) for p in pairs],
        "rounds-compared": len(umbel),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to every run unchanged."
    )
    parser.add_argument("--pairs", type=int, default=3, help="umbel/Flower run pairs")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--results-dir", default="results/bench")
    args, extra = parser.parse_known_args(argv)
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
    (folder / "overhead.md").write_text(
        f"Command: `{command}`\n\n| loop | mean round (s) |\n|---|---|\n"
        f"| umbel FedAvg | {report['umbel-mean-round-seconds']:.3f} |\n"
        f"| Flower FedAvg | {report['flower-mean-round-seconds']:.3f} |\n\n"
        f"Ratio umbel / Flower: **{report['ratio']:.3f}** (medians: {report['median-ratio']:.3f}; per pair: "
        + ", ".join(f"{r:.3f}" for r in report["pair-ratios"])
        + f"; {report['rounds-compared']} rounds each).\n"
    )
    print((folder / "overhead.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
