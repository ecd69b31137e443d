"""Training defaults on a user's small own data and on built-in scenarios, side by side.

FLIC with every default but the training settings measured (learning rate, batch size, local
epochs) on three federations of 15 clients in 5 groups, none tuned for: a tabular own-data
``npz`` in label groups (scikit-learn's bundled digits as 64 features, the ``dnn`` MLP; about 100
samples a client), Fashion-MNIST in label groups and digits (8 x 8 images) in rotation groups
(100 and 90 samples a client), 30 rounds with 20% of the clients a round (issue 29's case). Each
line gives the final mean local test accuracy, the first judged rounds' mean training loss and
whether the not-learning warning fired. The runs go through the real ClientApp in this process
(the in-process grid, ``server/inprocess.py``), not through a SuperLink.

Choose on development seeds, report on others (``--seeds``). With ``--record`` the summary
(mean over seeds per setting and federation, and the worst federation's) is written as the
``training-defaults`` record of docs/RESULTS.md.

Example::

    OMP_NUM_THREADS=1 python -m benchmarks.learning_rate --lrs 0.001,0.01,0.05 --seeds 10,11
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.records import Table, load_average
from benchmarks.report import add_record_flag, save_tables
from benchmarks.selection import tabular_npz
from server.cli import PROJECT_ROOT, load_defaults
from strategies import FLIC

SETTINGS = {"rounds": 30, "fraction": 0.2, "eval-every": 30, "num-clients": 15, "groups": 5}
FEDERATIONS = ("tabular", "fashion-mnist", "digits-rotation")


def federation(name: str) -> dict[str, Any]:
    """The run-config keys of one of :data:`FEDERATIONS`."""
    if name == "tabular":
        return {"dataset": f"npz:{tabular_npz()}", "model": "dnn", "scenario": "label-groups"}
    if name == "fashion-mnist":
        return {"dataset": "fashion-mnist", "scenario": "label-groups"}
    if name == "digits-rotation":
        return {"dataset": "digits", "scenario": "rotation", "angles": "0,72,144,216,288", "samples-per-client": 90}
    raise ValueError(f"The 'federation' parameter of learning_rate must be one of {FEDERATIONS}. Got {name!r} instead.")


def run(strategy: str, settings: dict[str, Any], fed: dict[str, Any], seed: int) -> dict[str, Any]:
    """One in-process run; its final accuracy, judged losses and warning."""
    from server.inprocess import run_in_process

    rc = load_defaults(PROJECT_ROOT)
    rc.update({"strategy": strategy, "seed": seed, **SETTINGS, **settings, **fed})
    s = run_in_process(rc)
    evaluated = [r for r in s.history if r.accuracy is not None]
    check = s.learning
    return {
        "final-accuracy": round(evaluated[-1].accuracy or 0.0, 3),
        "judged-losses": [round(loss, 2) for _, loss in check.losses] if check else [],
        "not-learning": check is not None and check.warning is not None,
    }


def summary_table(lines: Sequence[dict[str, Any]], feds: Sequence[str], seeds: Sequence[int], note: str = "") -> Table:
    """Mean final accuracy over seeds per setting and federation, the worst federation's, and the warnings."""
    by_setting: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for line in lines:
        key = (line["lr"], line["batch-size"], line["local-epochs"])
        by_setting.setdefault(key, {}).setdefault(line["data"], []).append(line)
    rows = []
    for (lr, batch, epochs), per_fed in sorted(by_setting.items(), key=lambda item: item[0][::-1]):
        means = [statistics.fmean(r["final-accuracy"] for r in per_fed[f]) for f in feds]
        warned = sum(r["not-learning"] for f in feds for r in per_fed[f])
        runs = len(seeds) * len(feds)
        rows.append([lr, batch, epochs, *(f"{m:.3f}" for m in means), f"{min(means):.3f}", f"{warned}/{runs}"])
    return Table(
        title=f"Training settings: final accuracy, mean of seeds {', '.join(map(str, seeds))}",
        columns=["lr", "batch-size", "local-epochs", *feds, "worst", "not-learning warnings"],
        rows=rows,
        notes=f"FLIC, 15 clients in 5 groups, 30 rounds, 20% of the clients a round, momentum 0.9; "
        f"seeds {', '.join(map(str, seeds))}. {note}".strip(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print one JSON line per federation, setting and seed, then the summary table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", default="0.001,0.01,0.05")
    parser.add_argument("--batch-sizes", default="32")
    parser.add_argument("--local-epochs", default="1")
    parser.add_argument("--federations", default=",".join(FEDERATIONS))
    parser.add_argument("--strategy", default=FLIC.name)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--lines", type=Path, default=None, help="summarise these printed lines instead of running")
    parser.add_argument("--dev-seeds", default="", help="with --lines: a second table, of these (development) seeds")
    parser.add_argument("--note", default="", help="with --lines: how the lines were measured (the tables' notes)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    load_before = load_average()
    feds = args.federations.split(",")
    seeds = [int(v) for v in args.seeds.split(",")]
    if args.lines is not None:
        read = [json.loads(line) for line in args.lines.read_text().splitlines() if line.startswith('{"data"')]
        tables = []
        for group in (seeds, [int(v) for v in args.dev_seeds.split(",") if v]):
            if group:
                kept = [r for r in read if r["seed"] in group and r["data"] in feds]
                tables.append(summary_table(kept, feds, group, args.note))
        return _summarise(tables, args.record, load_before)
    grid = itertools.product(
        [float(v) for v in args.lrs.split(",")],
        [int(v) for v in args.batch_sizes.split(",")],
        [int(v) for v in args.local_epochs.split(",")],
    )
    lines = []
    for lr, batch, epochs in grid:
        settings = {"lr": lr, "batch-size": batch, "local-epochs": epochs}
        for name, seed in itertools.product(feds, seeds):
            line = {"data": name, "seed": seed, **settings, **run(args.strategy, settings, federation(name), seed)}
            lines.append(line)
            print(json.dumps(line), flush=True)
    return _summarise([summary_table(lines, feds, seeds)], args.record, load_before)


def _summarise(tables: list[Table], record: bool, load: str) -> int:
    for table in tables:
        print(json.dumps({"title": table.title, "columns": list(table.columns), "rows": table.rows}), flush=True)
    if record:
        save_tables("training-defaults", "Training defaults", tables, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
