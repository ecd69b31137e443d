"""Every strategy on every scenario: a matrix of ordinary ``umbel run``s, summarised.

Each cell (strategy x scenario x seed) is one ``python -m server.cli run`` (the path a user
runs) with the preset's settings; the cells' ``summary.json``, ``metrics.jsonl`` and
``round-times.json`` are folded into ``compare.md`` (a Markdown table), ``compare.csv``,
``compare.json`` and one plot per scenario (mean local test accuracy and ARI by round), in
``<results-dir>/<preset>/``.

Presets
-------
quick
    The five seed algorithms, FedAvg, Local and IFCA on label-groups 1, label-skew 20%,
    rotation 4 and label-swap 5, with reduced rounds and epochs: under 90 minutes on a 2-core
    CPU machine.
paper
    Each paper's own scenario with that paper's training settings, every registered strategy:
    for a GPU machine (hours). Its cells save a checkpoint every ``checkpoint_every`` rounds, and
    the same command run again continues an unfinished cell from its last checkpoint.

Example::

    python -m benchmarks.compare --preset quick
    python -m benchmarks.compare --preset quick --strategies flic,fedavg --scenarios label-swap-5 --seeds 0
"""

from __future__ import annotations

import argparse
import csv
import json
import hashlib
import math
import shutil
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmarks.federation_scale import PeakMemory
from benchmarks.records import load_average
from benchmarks.report import ACCURACY, add_record_flag, save_tables, tables_from_markdown
from benchmarks.runs import ROOT, read_run, run_cli, training_round_seconds
from common.modelstore import read_bundle
from strategies import (
    CFLGP,
    CFLGT,
    CFLSattler,
    FLAG,
    FLHC,
    FLIC,
    FedAvg,
    FedClust,
    FedMedian,
    FedProx,
    IFCA,
    Local,
    PACFL,
)
from common.clustering.trajectories import MEDIAN, RAW
from strategies.cfl_sattler import CFLSattlerParams
from strategies.flic import LAST
from strategies.state import CHECKPOINT_FILE


def last_value(args: Sequence[str], flag: str) -> str:
    """The value ``args`` give ``flag``: its last one, as ``umbel run``'s parser takes it."""
    return args[len(args) - 1 - list(args)[::-1].index(flag) + 1]


@dataclass(frozen=True)
class Scenario:
    """A scenario of a preset: its run-config flags and the K told to strategies that need one.

    ``k`` is the true number of groups; on label-skew, where every label set is its own group
    (up to 45 of them), it is the small K the papers give their K-model baselines.
    ``strategy_args`` are a strategy's flags in this scenario only (after the preset's).
    """

    label: str
    args: tuple[str, ...]
    k: int
    strategy_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Preset:
    """The settings of a comparison: which cells, and the flags each cell gets.

    ``common`` goes to every run, then the scenario's flags, then ``strategy_args[strategy]``;
    ``given_k`` lists the strategies that are told the scenario's true number of groups
    through the flag named there (IFCA's K, FL+HC's number of clusters): the scenario's ``k``.
    ``checkpoint_every``: each cell saves its state every that many rounds (0: never), so that an
    unfinished cell continues from its last checkpoint (:func:`run_cell`). ``papers_own``: strategies
    whose flags here select their paper's rule, so their tables do not label them "(modified)".
    ``before_end``: a strategy's round flag set to the cell's ``--rounds`` minus the number given
    (FLIC clusters by hand 5 rounds before the end, as its paper's T = 200 of 205).
    """

    name: str
    strategies: tuple[str, ...]
    scenarios: tuple[Scenario, ...]
    seeds: tuple[int, ...]
    common: tuple[str, ...]
    strategy_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    given_k: dict[str, str] = field(default_factory=dict)
    checkpoint_every: int = 0
    papers_own: tuple[str, ...] = ()
    before_end: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def args(self, strategy: str, scenario: Scenario, seed: int) -> list[str]:
        """The ``umbel run`` flags of one cell (a ``VARIANTS`` name runs its strategy with its flags)."""
        base, variant = VARIANTS.get(strategy, (strategy, ()))
        out = [
            "--strategy",
            base,
            "--seed",
            str(seed),
            *self.common,
            *scenario.args,
            *self.strategy_args.get(base, ()),
            *scenario.strategy_args.get(base, ()),
            *variant,
        ]
        if base in self.given_k:
            out += [self.given_k[base], str(scenario.k)]
        if base in self.before_end:
            flag, rounds_left = self.before_end[base]
            out += [flag, str(int(last_value(out, "--rounds")) - rounds_left)]
        return out


VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fedclust-paper": (FedClust.name, ("--fedclust-lambda", "1.0")),
    "pacfl-eq3": (PACFL.name, ("--pacfl-measure", "smallest", "--pacfl-threshold", "30", "--pacfl-vectors", "3")),
    "pacfl-reference": (
        PACFL.name,
        (
            "--pacfl-measure",
            "reference-signed",
            "--linkage",
            "weighted",
            "--pacfl-threshold",
            "30",
            "--pacfl-vectors",
            "3",
        ),
    ),
    "cfl-sattler-paper": (
        CFLSattler.name,
        ("--cfl-sattler-eps-absolute", "true", "--cfl-sattler-eps1", "0.4", "--cfl-sattler-eps2", "1.6"),
    ),
}
"""The papers' settings of strategies whose defaults umbel modified: name -> (strategy, flags). The papers
cut at a fixed threshold but publish no value for these data: 1.0 and 30 degrees are umbel's former defaults."""

MODIFIED: dict[str, str] = {
    FedClust.name: "automatic cut by silhouette (paper: a fixed lambda; see fedclust-paper)",
    PACFL.name: "principal angles class by class (90 for a class one client lacks), automatic cut (paper Eq. 3: "
    "the smallest angle of the stacked bases at a fixed threshold; see pacfl-eq3, pacfl-reference)",
    FLHC.name: "cosine of the updates in round 1, automatic cut (paper: Euclidean after a FedAvg warm-up, "
    "K given; see the paper preset)",
    CFLSattler.name: "eps1 relative to the RMS update norm, eps2 relative to the first round's "
    f"({CFLSattlerParams().eps2_relative:g}) (paper: both absolute; see cfl-sattler-paper)",
    FLIC.name: "automatic clustering round at a training-loss plateau after 5 updates a client, on each "
    "client's summed updates (paper: a round given by hand, the latest update)",
    FLAG.name: "elbow at the fewest clusters within 1 point of the best sweep accuracy; the run's own model "
    "in the sweep (paper: a lightweight one)",
    CFLGP.name: "with K not given, k up to half the clients scored on as many leading directions of the profile "
    "(paper App. G: those before the largest gap, no range given)",
    CFLGT.name: "affinity propagation on the square roots of each client's force shares over the classes, "
    "the preference of best silhouette (paper: the forces as sent, no preference named; see the paper preset)",
}
"""Defaults that are not the paper's, labelled "(modified)" in the tables."""


SEED_ALGORITHMS = (CFLGT.name, FedClust.name, FLAG.name, FLIC.name, CFLGP.name)

QUICK = Preset(
    name="quick",
    strategies=(FedAvg.name, Local.name, IFCA.name, *SEED_ALGORITHMS),
    scenarios=(
        Scenario("label-groups-1", ("--scenario", "label-groups", "--groups", "5", "--labels-per-group", "2"), 5),
        Scenario("label-skew-20", ("--scenario", "label-skew", "--label-fraction", "0.2"), 5),
        Scenario("rotation-4", ("--scenario", "rotation", "--angles", "0,90,180,270"), 4),
        Scenario("label-swap-5", ("--scenario", "label-swap", "--groups", "5"), 5),
    ),
    seeds=(0, 1),
    common=("--num-clients", "100", "--fraction", "0.2", "--rounds", "30", "--local-epochs", "1", "--eval-every", "5"),
    strategy_args={
        CFLGT.name: ("--cflgt-pretrain-rounds", "8"),
        FLAG.name: ("--flag-gradient-epochs", "5", "--flag-sweep-rounds", "3"),
        FedClust.name: ("--cluster-steps", "30", "--fedclust-lambda", "0.36"),
    },
    given_k={IFCA.name: "--max-clusters"},
)


def _training(
    fraction: float,
    rounds: int,
    epochs: int,
    batch: int,
    lr: float,
    momentum: float,
    model: str,
    clients: int = 100,
) -> tuple[str, ...]:
    """A paper's training settings as ``umbel run`` flags."""
    return (
        *("--num-clients", str(clients), "--fraction", str(fraction), "--rounds", str(rounds)),
        *("--local-epochs", str(epochs), "--batch-size", str(batch), "--lr", str(lr), "--momentum", str(momentum)),
        *("--model", model),
    )


_PAPER_CFLGT = _training(0.2, 100, 5, 32, 0.001, 0.9, "dnn")
_PAPER_FEDCLUST = _training(0.1, 200, 10, 10, 0.01, 0.5, "lenet5")
_PAPER_FLAG = _training(0.2, 200, 10, 10, 0.01, 0.5, "lenet5")
# FLIC (Sec. IV): MNIST, 600 train and 100 test samples a client, T = 200 then 5 rounds per cluster;
# its CNN of two convolutional layers (McMahan et al.) is LeNet-5 here, umbel's two-convolution model
_PAPER_FLIC = (
    *("--dataset", "mnist", "--samples-per-client", "600", "--test-fraction", "0.1667"),
    *_training(0.1, 205, 5, 10, 0.01, 0.0, "lenet5"),
)
# CFL-GP (App. F.5): C = 32 clients, b = 64, lr 0.1, T = 200, P = 2, the 784-200-10 dense model, MNIST
# split 70/30 into 8 disjoint parts of 60,000 / 32 = 1,875 samples; its one gradient step a round is
# one local epoch here (Alg. 4's model gap), and the 30% test is capped at 10,000 / 32 = 312 a client
_PAPER_CFLGP = (
    *("--samples-per-client", "1312", "--test-fraction", "0.43"),
    *_training(1.0, 200, 1, 64, 0.1, 0.0, "dnn", clients=32),
)
# CFLGT's own paper trains 100 rounds after its 25 FedAvg pre-training rounds (Sec. V-A) in its
# scenarios; elsewhere it runs the scenario's rounds with the automatic pre-training
_CFLGT_SCHEDULE = {CFLGT.name: ("--rounds", "125", "--cflgt-pretrain-rounds", "25")}

PAPER = Preset(
    name="paper",
    strategies=(
        FedAvg.name,
        Local.name,
        FedProx.name,
        IFCA.name,
        CFLSattler.name,
        "cfl-sattler-paper",
        PACFL.name,
        "pacfl-eq3",
        "pacfl-reference",
        "fedclust-paper",
        FLHC.name,
        FedMedian.name,
        *SEED_ALGORITHMS,
    ),
    scenarios=(
        Scenario(
            "label-groups-1",
            ("--scenario", "label-groups", "--groups", "5", "--labels-per-group", "2", *_PAPER_CFLGT),
            5,
            _CFLGT_SCHEDULE,
        ),
        Scenario(
            "label-groups-2",
            ("--scenario", "label-groups", "--groups", "5", "--labels-per-group", "5", *_PAPER_CFLGT),
            5,
            _CFLGT_SCHEDULE,
        ),
        Scenario(
            "label-groups-3",
            ("--scenario", "label-groups", "--groups", "20", "--labels-per-group", "3", *_PAPER_CFLGT),
            20,
            _CFLGT_SCHEDULE,
        ),
        Scenario("label-skew-20", ("--scenario", "label-skew", "--label-fraction", "0.2", *_PAPER_FEDCLUST), 5),
        Scenario(
            "label-skew-dirichlet-20",
            ("--scenario", "label-skew-dirichlet", "--label-fraction", "0.2", "--quantity-alpha", "1.0", *_PAPER_FLAG),
            5,
        ),
        Scenario("label-swap-5", ("--scenario", "label-swap", "--groups", "5", *_PAPER_FLIC), 5),
        Scenario("rotation-4", ("--scenario", "rotation", "--angles", "0,90,180,270", *_PAPER_FLIC), 4),
        Scenario("attack-40", ("--scenario", "attack", "--attackers", "40", *_PAPER_FLIC), 2),
        Scenario("rotation-8", ("--scenario", "rotation", "--angles", "0,15,90,105,180,195,270,275", *_PAPER_CFLGP), 8),
    ),
    seeds=(0, 1, 2),
    # no paper sets a timeout; at these settings a round on a loaded 2-core box can pass the default 600 s,
    # and a reply that misses it is skipped (FLAG's first round lost 31 of its 100 gradient signals so)
    common=("--eval-every", "5", "--round-timeout", "7200"),
    # FL+HC warms up 10 rounds (the former default, whatever the scenario's rounds)
    # CFLGT's AP compares the forces as the clients send them, at scikit-learn's median preference
    # FLAG sends about 1% of each class's samples as principal vectors and scores its alpha sweep
    # with a lightweight model (Sec. 4-5): `linear`, docs/strategies/flag.md's stand-in
    strategy_args={
        FLIC.name: ("--flic-graph", LAST),
        FLHC.name: ("--flhc-warmup-rounds", "10", "--flhc-metric", "euclidean"),
        FLAG.name: ("--flag-vectors", "0", "--flag-sweep-model", "linear"),
        CFLGT.name: ("--cflgt-points", RAW, "--cflgt-preference", MEDIAN),
    },
    # CFL-GP's paper is told K (its App. G estimate is umbel's default)
    given_k={IFCA.name: "--max-clusters", FLHC.name: "--num-clusters", CFLGP.name: "--num-clusters"},
    # a round of the papers' settings takes minutes here: lose at most two on a kill
    checkpoint_every=2,
    papers_own=(FLIC.name, FLHC.name, CFLGT.name, CFLGP.name),
    before_end={FLIC.name: ("--flic-cluster-round", 5)},
)

PRESETS = {p.name: p for p in (QUICK, PAPER)}

COLUMNS = (
    "strategy",
    "scenario",
    "seeds",
    "final-accuracy-mean",
    "final-accuracy-std",
    "final-ari",
    "ari-1.0-round",
    "final-clusters",
    "signal-bytes-up-per-client",
    "model-mb",
    "round-time-vs-fedavg",
    "wall-seconds",
)


@dataclass
class CellResult:
    """One finished run, reduced to what the table needs."""

    strategy: str
    scenario: str
    seed: int
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    train_round_seconds: list[float]
    seconds: float


CELL_FILE = "cell.json"


def cell_status(folder: Path, args: Sequence[str]) -> tuple[str, int | None]:
    """Where the cell in ``folder`` stands: ``("finished", None)``, ``("resumable", round)`` or ``("new", None)``.

    A cell is finished when its run wrote a summary that is not an interrupted one and
    ``cell.json`` holds its time; it is resumable when it is not finished, holds a
    ``checkpoint.npz`` (the state after ``round``) and was started with the same ``args``.
    """
    cell_file, summary_file = folder / CELL_FILE, folder / "summary.json"
    cell = json.loads(cell_file.read_text()) if cell_file.is_file() else {}
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    if summary is not None and not summary.get("interrupted") and cell.get("seconds") is not None:
        return "finished", None
    if (folder / CHECKPOINT_FILE).is_file() and cell.get("args") == list(args):
        _, meta = read_bundle(folder / CHECKPOINT_FILE, "checkpoint")
        return "resumable", int(meta["round"])
    return "new", None


def run_cell(
    folder: Path, args: Sequence[str], checkpoint_every: int, after: int | None, max_gb: float | None = None
) -> dict[str, Any]:
    """Run one cell as ``umbel run`` into ``folder``; with ``after``, continue from its checkpoint.

    ``cell.json`` is written before the run (its ``args``, ``seconds`` None) and after it: the
    seconds of this session plus, for a resumed cell, the rounds' own seconds up to round
    ``after`` (what the earlier sessions kept); ``resumed-after`` lists the rounds it resumed after.
    A new cell first drops an earlier run's checkpoint and summary. With ``max_gb``, the memory
    guard: the run's processes are killed once their resident memory together passes it (the
    cell stays resumable from its last checkpoint). Returns the ``cell.json`` written.

    Raises
    ------
    RuntimeError
        If the run fails or the memory guard stopped it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    cell_file = folder / CELL_FILE
    earlier = json.loads(cell_file.read_text()).get("resumed-after", []) if after is not None else []
    if after is None:
        for stale in (CHECKPOINT_FILE, "summary.json"):
            (folder / stale).unlink(missing_ok=True)
    cell: dict[str, Any] = {"args": list(args), "seconds": None, "resumed-after": earlier}
    cell_file.write_text(json.dumps(cell))
    flags = list(args)
    if checkpoint_every:
        flags += ["--checkpoint-every", str(checkpoint_every)]
    # Flower's home is per results folder: a cell of the same name elsewhere (a test, another
    # results dir) would otherwise share it, and each run stops the SuperLinks living there
    home = ROOT / ".flwr" / f"{folder.name}-{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:10]}"
    flags += ["--flwr-home", str(home)]
    log = folder.parent / f"{folder.name}.log"
    if after is not None:
        flags += ["--resume-from", str(folder / CHECKPOINT_FILE)]
        log = folder.parent / f"{folder.name}.after-{after}.log"
        cell["resumed-after"] = [*earlier, after]
    started = time.perf_counter()
    # the marker is the run's name and folder as run_cli writes them: a cell of the same name elsewhere is not this one
    marker = f"{folder.name} --results-dir {folder.parent.resolve()}"
    guard = PeakMemory(marker, max_mb=None if max_gb is None else max_gb * 1024)
    try:
        with guard:
            run_cli(flags, folder.name, folder.parent, log=log)
    except RuntimeError as err:
        if guard.stopped_at_mb is None:
            raise
        raise RuntimeError(
            f"{folder.name}: stopped by the memory guard ({guard.stopped_at_mb / 1024:.1f} GB > --max-gb {max_gb}); "
            "the same command continues it from its last checkpoint."
        ) from err
    shutil.rmtree(home, ignore_errors=True)  # as umbel run does with its own default home
    (folder / "process-memory.json").write_text(json.dumps(guard.summary(), indent=2) + "\n")
    seconds = time.perf_counter() - started
    if after is not None:
        kept = read_run(folder)["metrics"]
        seconds += sum(m.get("round-seconds") or 0.0 for m in kept if m["round"] <= after)
    cell["seconds"] = round(seconds, 3)
    cell_file.write_text(json.dumps(cell))
    return cell


def run_cells(
    preset: Preset,
    strategies: Sequence[str],
    scenarios: Sequence[Scenario],
    seeds: Sequence[int],
    folder: Path,
    extra: Sequence[str],
    resume: bool,
    checkpoint_every: int | None = None,
    max_gb: float | None = None,
) -> list[CellResult]:
    """Run (or, with ``resume``, re-read) every cell, printing one line per cell.

    An unfinished cell with a checkpoint continues from it, with or without ``resume``.
    ``checkpoint_every`` (default: the preset's) is passed to every run; ``max_gb``: the memory
    guard of each (:func:`run_cell`).
    """
    every = preset.checkpoint_every if checkpoint_every is None else checkpoint_every
    results = []
    total = len(strategies) * len(scenarios) * len(seeds)
    runs = folder / "runs"
    for scenario in scenarios:
        for seed in seeds:
            for strategy in strategies:
                name = f"{preset.name}-{scenario.label}-{strategy}-s{seed}"
                args = preset.args(strategy, scenario, seed) + list(extra)
                status, after = cell_status(runs / name, args)
                if status == "resumable":
                    print(f"{name}: resuming after round {after}", flush=True)
                if not (resume and status == "finished"):
                    run_cell(runs / name, args, every, after, max_gb)
                run = read_run(runs / name)
                cell = json.loads((runs / name / CELL_FILE).read_text())
                results.append(
                    CellResult(
                        strategy,
                        scenario.label,
                        seed,
                        run["summary"],
                        run["metrics"],
                        training_round_seconds(run),
                        cell["seconds"],
                    )
                )
                s = run["summary"]
                print(
                    f"[{len(results)}/{total}] {name}: accuracy {_fmt(s.get('final-accuracy'), 4)} "
                    f"ARI {_fmt(s.get('final-ari'), 3)} ({cell['seconds']:.0f} s)",
                    flush=True,
                )
    return results


def summarise(results: Sequence[CellResult]) -> list[dict[str, Any]]:
    """One row per (strategy, scenario): means over seeds; round-time ratio against FedAvg."""
    by_cell: dict[tuple[str, str], list[CellResult]] = {}
    for r in results:
        by_cell.setdefault((r.strategy, r.scenario), []).append(r)
    fedavg_round = {}
    for (strategy, scenario), cell in by_cell.items():
        if strategy == FedAvg.name:
            fedavg_round[scenario] = _mean([s for r in cell for s in r.train_round_seconds])
    rows = []
    for (strategy, scenario), cell in by_cell.items():
        accuracy = [r.summary["final-accuracy"] for r in cell if r.summary.get("final-accuracy") is not None]
        ari = [r.summary["final-ari"] for r in cell if r.summary.get("final-ari") is not None]
        reached = [r.summary.get("rounds-to-truth") for r in cell]
        clients = [r.summary.get("num-clients") or 1 for r in cell]
        round_s = _mean([s for r in cell for s in r.train_round_seconds])
        base = fedavg_round.get(scenario)
        rows.append(
            {
                "strategy": strategy,
                "scenario": scenario,
                "seeds": len(cell),
                "final-accuracy-mean": _mean(accuracy),
                "final-accuracy-std": statistics.stdev(accuracy) if len(accuracy) > 1 else None,
                "final-ari": _mean(ari),
                "ari-1.0-round": "/".join("-" if x is None else str(x) for x in reached),
                "final-clusters": "/".join(str(r.summary.get("final-num-clusters")) for r in cell),
                "signal-bytes-up-per-client": _mean(
                    [r.summary["bytes-up-signal"] / n for r, n in zip(cell, clients, strict=True)]
                ),
                "model-mb": _mean([(r.summary["bytes-up-model"] + r.summary["bytes-down-model"]) / 1e6 for r in cell]),
                "round-time-vs-fedavg": round_s / base if round_s is not None and base else None,
                "wall-seconds": _mean([r.seconds for r in cell]),
            }
        )
    return rows


def markdown(rows: Sequence[dict[str, Any]], preset: Preset) -> str:
    """The table, one block per scenario, strategies in the preset's order."""
    order = {s: i for i, s in enumerate(preset.strategies)}
    modified = {s: why for s, why in MODIFIED.items() if s not in preset.papers_own}
    lines = []
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        lines += [
            f"#### {scenario}",
            "",
            (
                "| strategy | final accuracy (%) | final ARI | ARI 1.0 at round | clusters | "
                "signal up / client (B) | model traffic (MB) | round time / FedAvg | wall (s) |"
            ),
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted((r for r in rows if r["scenario"] == scenario), key=lambda r: order.get(r["strategy"], 99)):
            acc = _fmt(None if r["final-accuracy-mean"] is None else 100 * r["final-accuracy-mean"], 2)
            if r["final-accuracy-std"] is not None:
                acc += f" ± {100 * r['final-accuracy-std']:.2f}"
            name = f"{r['strategy']} (modified)" if r["strategy"] in modified else r["strategy"]
            lines.append(
                f"| {name} | {acc} | {_fmt(r['final-ari'], 3)} | {r['ari-1.0-round']} | "
                f"{r['final-clusters']} | {_fmt(r['signal-bytes-up-per-client'], 0)} | "
                f"{_fmt(r['model-mb'], 0)} | {_fmt(r['round-time-vs-fedavg'], 2)} | "
                f"{_fmt(r['wall-seconds'], 0)} |"
            )
        lines.append("")
    shown = [s for s in dict.fromkeys(r["strategy"] for r in rows) if s in modified]
    lines += [f"(modified) {s}: {modified[s]}." for s in shown] + ([""] if shown else [])
    return "\n".join(lines)


def plot_scenario(results: Sequence[CellResult], scenario: str, path: Path, order: Sequence[str]) -> Path:
    """Mean local test accuracy (left) and ARI (right) by round, one line per strategy (mean over seeds)."""
    fig = Figure(figsize=(11, 4))
    acc_ax, ari_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for strategy in order:
        runs = [r for r in results if r.scenario == scenario and r.strategy == strategy]
        if not runs:
            continue
        for ax, key in ((acc_ax, "accuracy"), (ari_ax, "ari")):
            series: dict[int, list[float]] = {}
            for r in runs:
                for m in r.metrics:
                    if m.get(key) is not None:
                        series.setdefault(m["round"], []).append(m[key])
            xs = sorted(series)
            ax.plot(
                xs,
                [statistics.fmean(series[x]) for x in xs],
                marker="o" if key == "accuracy" else None,
                markersize=3,
                label=strategy,
            )
    acc_ax.set(xlabel="round", ylabel="mean local test accuracy", title=f"{scenario}: accuracy")
    ari_ax.set(xlabel="round", ylabel="ARI", title=f"{scenario}: clustering", ylim=(-0.05, 1.05))
    for ax in (acc_ax, ari_ax):
        ax.grid(alpha=0.3)
    ari_ax.legend(fontsize=8, loc="lower right")
    FigureCanvasAgg(fig)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path


def write_outputs(results: Sequence[CellResult], preset: Preset, folder: Path, command: str) -> list[Path]:
    """``compare.md``, ``compare.csv``, ``compare.json`` and ``<scenario>.png`` in ``folder``."""
    rows = summarise(results)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "compare.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (folder / "compare.json").write_text(
        json.dumps({"preset": preset.name, "command": command, "rows": rows}, indent=2) + "\n"
    )
    header = f"Command: `{command}`\n\n"
    (folder / "compare.md").write_text(header + markdown(rows, preset))
    paths = [folder / "compare.md", folder / "compare.csv", folder / "compare.json"]
    for scenario in dict.fromkeys(r.scenario for r in results):
        paths.append(plot_scenario(results, scenario, folder / f"{scenario}.png", preset.strategies))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Run the preset's cells (or print their commands) and write the tables; the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to every run unchanged."
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--strategies", default="", help="comma-separated subset of the preset's strategies")
    parser.add_argument("--scenarios", default="", help="comma-separated subset of the preset's scenario labels")
    parser.add_argument("--seeds", default="", help="comma-separated seeds (default: the preset's)")
    parser.add_argument("--results-dir", default="results/bench")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="re-read cells that already finished (an unfinished cell with a checkpoint always continues from it)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="each run saves its state every N rounds (0: never; default: the preset's, "
        + ", ".join(f"{p.name} {p.checkpoint_every}" for p in PRESETS.values())
        + ")",
    )
    parser.add_argument(
        "--max-gb",
        type=float,
        default=None,
        help="memory guard: stop a run whose processes hold more than this resident memory together (GB)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print each cell's flags and stop")
    add_record_flag(parser)
    args, extra = parser.parse_known_args(argv)
    load_before = load_average()
    extra = [a for a in extra if a != "--"]
    preset = PRESETS[args.preset]
    strategies = _subset(parser, "strategies", args.strategies, preset.strategies)
    labels = _subset(parser, "scenarios", args.scenarios, [s.label for s in preset.scenarios])
    scenarios = [s for s in preset.scenarios if s.label in labels]
    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(preset.seeds)
    except ValueError:
        parser.error(f"The 'seeds' parameter of compare must be comma-separated integers. Got {args.seeds!r} instead.")
    if args.checkpoint_every is not None and args.checkpoint_every < 0:
        parser.error(
            "The 'checkpoint-every' parameter of compare must be an int in the range [0, inf). "
            f"Got {args.checkpoint_every} instead."
        )
    if args.max_gb is not None and not args.max_gb > 0:
        parser.error(
            f"The 'max-gb' parameter of compare must be a float in the range (0, inf). Got {args.max_gb} instead."
        )
    if args.dry_run:
        for scenario in scenarios:
            for seed in seeds:
                for strategy in strategies:
                    print("umbel run " + " ".join(preset.args(strategy, scenario, seed) + extra))
        return 0
    results_dir = Path(args.results_dir)
    folder = (results_dir if results_dir.is_absolute() else ROOT / results_dir) / preset.name
    command = "python -m benchmarks.compare " + " ".join(sys.argv[1:] if argv is None else argv)
    results = run_cells(
        preset, strategies, scenarios, seeds, folder, extra, args.resume, args.checkpoint_every, args.max_gb
    )
    for path in write_outputs(results, preset, folder, command):
        print(f"wrote {path}")
    if args.record:
        tables = tables_from_markdown(f"{preset.name} preset", markdown(summarise(results), preset))
        print(f"wrote {save_tables(f'compare-{preset.name}', ACCURACY, tables, load_before)}")
    return 0


def _subset(parser: argparse.ArgumentParser, name: str, text: str, allowed: Sequence[str]) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()] or list(allowed)
    unknown = [s for s in chosen if s not in allowed]
    if unknown:
        parser.error(f"The '{name}' parameter of compare must be a subset of {list(allowed)}. Got {unknown} instead.")
    return chosen


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


if __name__ == "__main__":
    raise SystemExit(main())
