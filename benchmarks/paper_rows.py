"""The papers' tables at the papers' settings: one record per paper from ``compare --preset paper`` runs.

Each paper's rows are cells of ``python -m benchmarks.compare --preset paper`` (the paper's scenario
and training settings; flags after ``--`` such as ``--dataset fashion-mnist`` or ``--rounds`` are
kept in the cell's ``cell.json`` and shown in the record's command). This module reads those run
folders and writes, per paper, umbel's final accuracy (the mean over the final stretch of rounds,
never the best round, with how many clients it covers), the final ARI and clusters, and the
paper's figure side by side. Where a run stopped short of the paper's rounds, the row says how
many ran and estimates the full run's time from the run's own mean round time. A cell still running
(or stopped with a checkpoint, which ``compare`` continues) is read from the rounds it has written so
far and says "in progress: N of M rounds".

Example::

    python -m benchmarks.paper_rows --paper flic --runs results/bench/paper/runs --load "9-16"
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.compare import CELL_FILE, PAPER, cell_status
from benchmarks.records import Record, Table, write_record
from benchmarks.runs import ROOT
from server.results import summarise
from strategies import CFLGP, FLAG, FLIC, FedClust
from strategies.record import RoundRecord


@dataclass(frozen=True)
class PaperRow:
    """One row of a paper's table: a cell of the paper preset and the paper's own figure.

    ``cluster_round`` (FLIC's T): also report the accuracy at that round (before clustering) and
    the mean over the evaluated rounds after it, as the paper's "before -> after" does.
    """

    scenario: str
    strategy: str
    paper: str
    cluster_round: int = 0


PAPERS: dict[str, tuple[str, tuple[PaperRow, ...]]] = {
    FedClust.name: (
        "FedClust at the paper's setting (Table 1, FMNIST, non-IID label skew 20%)",
        (PaperRow("label-skew-20", FedClust.name, "FedClust 97.92% (PACFL 97.46%, IFCA 96.83%, FedAvg 77.10%)"),),
    ),
    FLAG.name: (
        "FLAG at the paper's setting (Table 2, FMNIST, label skew 20% with Dirichlet quantity shift 1)",
        (
            PaperRow(
                "label-skew-dirichlet-20",
                FLAG.name,
                "FLAG 96.36% (PACFL 94.41%, IFCA 94.02%, CFL 86.97%, FedAvg 57.12%)",
            ),
        ),
    ),
    FLIC.name: (
        "FLIC at the paper's setting (Table I, MNIST; here Fashion-MNIST)",
        (
            PaperRow("label-swap-5", FLIC.name, "FedAvg 0.75 -> FLIC 0.99 (MNIST)", cluster_round=200),
            PaperRow("rotation-4", FLIC.name, "FedAvg 0.93 -> FLIC 0.98 (MNIST)", cluster_round=200),
        ),
    ),
    CFLGP.name: (
        "CFL-GP at the paper's setting (Table 3 and App. F.5, rotated MNIST, 8 angles; here Fashion-MNIST)",
        (
            PaperRow(
                "rotation-8",
                CFLGP.name,
                "ARI 1.0 from round 1.00 ± 0.00 (Table 3, C = 32, b = 64); accuracy only plotted (Fig. 2)",
            ),
        ),
    ),
}
"""Each paper's record title and rows; the figures are the papers' own (docs/strategies/*.md)."""

COLUMNS = ("scenario", "rounds run", "final accuracy", "final ARI, clusters", "paper", "wall time")


def _option(args: Sequence[str], flag: str) -> str | None:
    """The last value given to ``flag`` in ``args`` (later flags win, as in ``umbel run``)."""
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return values[-1] if values else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def row_figures(folder: Path, row: PaperRow) -> tuple[list[Any], str]:
    """One table row from a run folder, finished or not, and the run's ``umbel run`` command.

    A finished run is read from its ``summary.json``; an unfinished one that ``compare`` can
    continue (a checkpoint, the same flags) is "in progress" and read from its ``metrics.jsonl``;
    an interrupted one without a checkpoint from the summary ``umbel run`` wrote when stopped.

    Raises
    ------
    FileNotFoundError
        If the folder holds no ``cell.json`` or ``metrics.jsonl`` (the cell did not start a round).
    """
    cell = json.loads((folder / CELL_FILE).read_text())
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    args = [str(a) for a in cell["args"]]
    status, saved = cell_status(folder, args)
    summary_file = folder / "summary.json"
    in_progress = status == "resumable" or not summary_file.exists()
    if in_progress:
        summary = summarise([RoundRecord.from_dict(m) for m in metrics])
    else:
        summary = json.loads(summary_file.read_text())
    scenario = next(s for s in PAPER.scenarios if s.label == row.scenario)
    full = int(_option(PAPER.args(row.strategy, scenario, 0), "--rounds") or 0)
    ran = int(summary["rounds"])
    rounds = f"{ran} of {full}"
    clean = [m["round-seconds"] for m in metrics if m.get("round-seconds") and not m.get("failures")]
    if in_progress:
        rounds = f"in progress: {ran} of {full} rounds" + (
            "" if saved is None else f" (checkpoint after round {saved})"
        )
    elif summary.get("interrupted"):
        rounds += " (interrupted)"
    timed = cell.get("seconds") is not None and not in_progress
    # without the cell's own time (still running, or stopped before compare wrote it): its rounds' time
    seconds = float(cell["seconds"]) if timed else sum(m.get("round-seconds") or 0.0 for m in metrics)
    wall = f"{seconds / 60:.0f} min" + ("" if timed else " of rounds so far")
    if ran < full and clean:
        overhead = seconds - sum(clean) if timed else 0.0
        # round 1 (a clustering round: FLAG's sweep, FedClust's signal) is counted once, not as every round's time
        rest = clean[1:] or clean
        estimate = overhead + clean[0] + statistics.fmean(rest) * (full - 1)
        wall += f" (full run: about {estimate / 60:.0f} min)"
    evaluated = [m for m in metrics if m.get("accuracy") is not None]
    clients = summary.get("coverage", {}).get("final-accuracy", "")
    accuracy = (
        "not evaluated"
        if summary.get("final-accuracy") is None
        else f"{_pct(summary['final-accuracy'])} ({summary['final-evaluations']} rounds, {clients})"
    )
    if row.cluster_round:
        cut = int(_option(args, "--flic-cluster-round") or row.cluster_round)
        before = [m["accuracy"] for m in evaluated if m["round"] == cut]
        after = [m["accuracy"] for m in evaluated if m["round"] > cut]
        if ran <= cut and evaluated:
            accuracy = f"{_pct(evaluated[-1]['accuracy'])} at round {evaluated[-1]['round']} (FedAvg; {clients})"
            rounds += f", clusters at round {cut}"
        else:
            accuracy = (
                f"{_pct(before[0] if before else None)} at round {cut} (FedAvg) -> "
                f"{_pct(statistics.fmean(after) if after else None)} after clustering "
                f"(mean of rounds {cut + 1}-{ran}; {clients})"
            )
            rounds += f", clustered at round {cut}"
    ari = summary.get("final-ari")
    reached = summary.get("rounds-to-truth")
    figures = [
        row.scenario,
        rounds,
        accuracy,
        f"{'-' if ari is None else f'{ari:.3f}'}, {summary.get('final-num-clusters')} clusters; ARI 1.0 "
        + (f"from round {reached}" if reached is not None else "not yet" if in_progress else "never"),
        row.paper,
        wall,
    ]
    return figures, "umbel run " + shlex.join(args)


def paper_record(paper: str, runs: Path, seed: int, load: str, notes: str) -> Record:
    """The record ``paper-<paper>`` from the paper's cells in ``runs`` that ran a round (the others are left out)."""
    title, rows = PAPERS[paper]
    table_rows, commands = [], []
    for row in rows:
        folder = runs / f"{PAPER.name}-{row.scenario}-{row.strategy}-s{seed}"
        if not (folder / "metrics.jsonl").exists() or not (folder / CELL_FILE).exists():
            continue
        figures, command = row_figures(folder, row)
        table_rows.append(figures)
        commands.append(command)
    if not table_rows:
        raise FileNotFoundError(f"No cell of paper {paper!r} under {runs} for seed {seed}.")
    return Record(
        name=f"paper-{paper}",
        section="Accuracy and clustering",
        command="; ".join(commands),
        tables=[Table(title=f"{title}, seed {seed}", columns=list(COLUMNS), rows=table_rows, notes=notes)],
        load=load,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Write one paper's record from its finished runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paper", choices=sorted(PAPERS), required=True)
    parser.add_argument("--runs", default="results/bench/paper/runs", help="the paper preset's runs folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", required=True, help="the load average range while the runs ran")
    parser.add_argument("--notes", default="", help="what the reader needs to read the figures")
    args = parser.parse_args(argv)
    runs = Path(args.runs)
    record = paper_record(args.paper, runs if runs.is_absolute() else ROOT / runs, args.seed, args.load, args.notes)
    print(write_record(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
