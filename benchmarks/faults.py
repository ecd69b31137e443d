"""Load and faults at 1,000 simulated clients: failing, late and malformed replies all at once.

Runs one clustering strategy (FedClust) with its own defaults but ``cluster-steps`` on
Fashion-MNIST label groups twice, at once, each in its own process, with the same seed: once
with no faults, once with every kind of fault together, each drawn anew for every client in
every round from the run's seed:

- ``--fail``: the run-config key ``fail-fraction`` (umbel's fault mod raises in the ClientApp;
  Flower returns an error reply);
- ``--late``: the reply is computed and then never comes back before the deadline, which is what
  the server sees of a client slower than ``round-timeout`` (its reply is missing);
- ``--malformed``: the reply comes back broken (garbage array bytes in a model or a clustering
  signal, an accuracy of 7 in an evaluation), as ``tests/helpers/hostile.py`` breaks them.

The ClientApp is umbel's own, run in this process (``server.inprocess.InProcessGrid``:
real Flower messages, no Ray, no network), so a late reply costs no waiting here: the figures
are what the faults do to the rounds, the clustering and the model, not to wall time. Each run
is its own process, so ``peak RSS`` is that run's server with its in-process clients. Writes
``docs/results/data/faults.json``::

    nice -n 10 python -m benchmarks.faults --clients 1000 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np
from flwr.app import Message

from benchmarks.delivery import IN_PROCESS_SETTINGS, IN_PROCESS_TIMEOUT, in_process_config
from benchmarks.records import Record, Table, current_command, load_average, write_record
from benchmarks.report import LARGE
from client.app import app as client_app
from client.faults import fault_draws
from common import keys
from server.experiment import Experiment
from client.faults import corrupt_record
from server.inprocess import InProcessGrid
from strategies import FedClust

DATASET = "fashion-mnist"
# FedClust's signal: 10 local steps, not its default 100, so that 1,000 clients x 2 runs finish
# on a shared 2-core machine (the same in both runs; --cluster-steps 100 is the default's run)
CLUSTER_STEPS = 10
BROKEN_ACCURACY = 7.0  # outside [0, 1]: an evaluation reply's malformed metric


def malformed_draw(seed: int, server_round: int, partition_id: int) -> float:
    """A uniform in [0, 1) for one client in one round, apart from ``fault_draws``' two."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, server_round, partition_id, 0xBAD]))
    return float(rng.random())


def fault(seed: int, pid: int, late: float, malformed: float):
    """Partition ``pid``'s reply fault: drop it (late) or break it (malformed), as its draws say."""

    def apply(reply: Message, server_round: int) -> Message | None:
        if reply.has_error() or reply.metadata.message_type == keys.MSG_IDENTITY:
            return reply
        if fault_draws(seed, server_round, pid)[1] < late:
            return None
        if malformed_draw(seed, server_round, pid) < malformed:
            arrays, metrics = reply.content.array_records, reply.content.metric_records
            if keys.ARRAYS in arrays:
                corrupt_record(arrays[keys.ARRAYS], "garbage")
            elif keys.SIGNAL in arrays:
                corrupt_record(arrays[keys.SIGNAL], "garbage")
            elif keys.METRICS in metrics:
                metrics[keys.METRICS][keys.ACCURACY] = BROKEN_ACCURACY
        return reply

    return apply


def run_once(args: argparse.Namespace, faulty: bool) -> dict[str, Any]:
    """One run in this process: its rounds, replies used per round, final accuracy and ARI, peak RSS."""
    rc = in_process_config(
        strategy=args.strategy,
        dataset=DATASET,
        rounds=args.rounds,
        fraction=args.fraction,
        seed=args.seed,
        **{
            "num-clients": args.clients,
            "groups": args.groups,
            "samples-per-label": args.samples_per_label,
            "local-epochs": 1,
            "eval-every": args.rounds,
            "cluster-steps": args.cluster_steps,
            "fail-fraction": args.fail if faulty else 0.0,
            "round-timeout": IN_PROCESS_TIMEOUT,
            "save-models": False,  # the final-model round is delivery.py's subject, not this one's
        },
    )
    faults = {pid: fault(args.seed, pid, args.late, args.malformed) for pid in range(args.clients)} if faulty else {}
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()
    started = time.perf_counter()
    grid = InProcessGrid(client_app, rc, args.clients, faults=faults)
    strategy.start(grid, exp.initial_model(), expected_clients=args.clients)
    last = strategy.history[-1]
    return {
        "rounds": len(strategy.history),
        "replies": [r.train_replies for r in strategy.history],
        "failed": [r.failures for r in strategy.history],
        "rejected": [r.rejected for r in strategy.history],
        "accuracy": last.accuracy,
        "ari": last.ari,
        "clusters": last.num_clusters,
        "peak-rss-mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": time.perf_counter() - started,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> None:
    """Run the clean and the faulty run, each in its own process, and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", default=FedClust.name)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=0.02)
    parser.add_argument("--cluster-steps", type=int, default=CLUSTER_STEPS)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--samples-per-label", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fail", type=float, default=0.2)
    parser.add_argument("--late", type=float, default=0.1)
    parser.add_argument("--malformed", type=float, default=0.05)
    parser.add_argument("--one", choices=["clean", "faulty"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_once(args, args.one == "faulty")))
        return
    load = load_average()
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "benchmarks.faults", *sys.argv[1:], "--one", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for name in ("clean", "faulty")
    }
    runs = {}
    for name, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"the {name} run failed with exit code {proc.returncode}")
        runs[name] = json.loads(out.strip().splitlines()[-1])
        print(name, runs[name])
    rows = [
        [
            name,
            f"{r['rounds']} of {args.rounds}",
            " ".join(map(str, r["replies"])),
            sum(r["failed"]),
            sum(r["rejected"]),
            _fmt(r["accuracy"], ".3f"),
            _fmt(r["ari"], ".3f"),
            r["clusters"],
            round(r["peak-rss-mb"]),
            round(r["seconds"]),
        ]
        for name, r in runs.items()
    ]
    table = Table(
        title=(
            f"Load and faults: {args.strategy} (its defaults but cluster-steps {args.cluster_steps}, "
            f"lr {IN_PROCESS_SETTINGS['lr']:g}), "
            f"{args.clients:,} clients, {DATASET} label groups "
            f"({args.groups} groups, {args.samples_per_label} samples a label), {args.fraction:g} of them a round, "
            f"{args.rounds} rounds; faulty: {args.fail:.0%} failing, {args.late:.0%} late, "
            f"{args.malformed:.0%} malformed in every round"
        ),
        columns=[
            "run",
            "rounds completed",
            "train replies used per round",
            "failed messages",
            "rejected replies",
            "final accuracy",
            "final ARI",
            "clusters",
            "peak RSS MB",
            "s",
        ],
        rows=rows,
        notes=(
            "In-process ClientApp (no Ray): a late reply is dropped as a timed-out one is, without the wait. "
            "Failed and rejected count every message of the run (signals and evaluations too). Final accuracy "
            "and ARI over all clients after the last round; peak RSS is the run's process (server and clients)."
        ),
    )
    record = Record(name="faults", section=LARGE, command=current_command(), tables=[table], load=load)
    print(write_record(record))


if __name__ == "__main__":
    main()
