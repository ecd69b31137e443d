"""What umbel's server adds per round, in CPU seconds, with the clients' work taken out.

The ServerApp's round loops (umbel's FedAvg, CFLGT's and IFCA's training-only rounds, and
Flower's own ``flwr.serverapp.strategy.FedAvg``) run in this process against a ``ReplayGrid``
that answers every message at once with a prepared reply of the real shape (the model sent
plus a fixed per-client perturbation, the real metric keys), passing every message and reply
through Flower's protobuf serialisation as the real grid does. What is left is the server's
own work per round, measured as process CPU time, so the machine's load matters little.
umbel's loop records every round as ``umbel run`` does (``metrics.jsonl``, the progress line).

Example::

    python -m benchmarks.server_overhead --clients 100 --rounds 20 --repeats 5
    python -m benchmarks.server_overhead --profile umbel     # cProfile of umbel's FedAvg rounds
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import pstats
import statistics
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity

from benchmarks.overhead import bootstrap_ratio
from benchmarks.records import load_average
from benchmarks.report import OVERHEAD, add_record_flag, save_tables, tables_from_markdown
from common import keys
from common.config import TrainingParams
from common.models import build_model
from server.results import RunRecorder
from strategies import CFLGT, ClusteredStrategy, FedAvg as UmbelFedAvg, IFCA, get_strategy

LOOPS = ("flower", "umbel", CFLGT.name, IFCA.name)
GROUPS = 5


class ReplayGrid:
    """Nodes ``1000 + i`` hold client ``i`` (group ``i % 5``); every message gets its reply at once.

    Parameters
    ----------
    num_clients : int
        Nodes in the federation.
    model : ArrayRecord
        The model whose shapes the train replies take.
    serialize : bool
        Pass every message and reply through Flower's protobuf form, as the real grid does.
    """

    def __init__(self, num_clients: int, model: ArrayRecord, serialize: bool = True) -> None:
        self.nodes = [1000 + i for i in range(num_clients)]
        self.serialize = serialize
        rng = np.random.default_rng(0)
        self.noise = {
            name: rng.normal(0.0, 1e-3, size=(GROUPS, *arr.shape)).astype(arr.numpy().dtype)
            for name, arr in model.items()
        }
        self._ids = itertools.count(1)
        self.client_seconds = 0.0  # CPU spent making and serialising the replies: the clients' share
        TaskIdentity.task_id = 1
        TaskIdentity.run_id = 1
        TaskIdentity.node_id = 1

    def get_node_ids(self) -> list[int]:
        """Every node, always online."""
        return list(self.nodes)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        """Each message's reply, made (and serialised) at once."""
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"
            if self.serialize:
                msg = message_from_proto(message_to_proto(msg))
            started = time.process_time()
            reply = self._reply(msg)
            proto = message_to_proto(reply) if self.serialize else None
            self.client_seconds += time.process_time() - started
            replies.append(reply if proto is None else message_from_proto(proto))
        return replies

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Flower's two-step form: the replies wait for ``pull_messages``."""
        messages = list(messages)
        self._waiting = self.send_and_receive(messages)
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """Every reply still waiting."""
        waiting, self._waiting = self._waiting, []
        return waiting

    def _reply(self, msg: Message) -> Message:
        pid = msg.metadata.dst_node_id - 1000
        kind = msg.metadata.message_type
        if kind == keys.MSG_IDENTITY:
            identity = ConfigRecord(
                {
                    keys.PARTITION_ID: pid,
                    keys.NUM_TRAIN: 20,
                    keys.NUM_TEST: 4,
                    keys.TRUE_GROUP: pid % GROUPS,
                    keys.CLASS_COUNTS: [2] * 10,
                }
            )
            return Message(RecordDict({keys.IDENTITY: identity}), reply_to=msg)
        if kind == "evaluate":
            metrics = MetricRecord({keys.NUM_EXAMPLES: 4, keys.LOSS: 0.5, keys.ACCURACY: 0.75})
            return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)
        config = msg.content.config_records[keys.CONFIG]
        sent = msg.content.array_records.get(keys.ARRAYS) or msg.content.array_records[keys.model_record(0)]
        arrays = ArrayRecord({n: Array(a.numpy() + self.noise[n][pid % GROUPS]) for n, a in sent.items()})
        metrics = MetricRecord({keys.NUM_EXAMPLES: 20, keys.TRAIN_LOSS: 0.5})
        if keys.NUM_MODELS in config:
            metrics[keys.CLUSTER_ID] = pid % int(config[keys.NUM_MODELS])
        return Message(RecordDict({keys.ARRAYS: arrays, keys.METRICS: metrics}), reply_to=msg)


class RoundCPU:
    """``evaluate_fn`` that notes the server's CPU time (the process's, less the replies') at each round's end."""

    def __init__(self, grid: ReplayGrid) -> None:
        self.grid = grid
        self.ends: dict[int, float] = {}

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Note the end of ``server_round``."""
        self.ends[server_round] = time.process_time() - self.grid.client_seconds
        return None

    def rounds(self, training: TrainingParams) -> list[float]:
        """CPU seconds of the training-only rounds from round 3 (round 1 warms up; umbel's loop
        evaluates every client in the final stretch, Flower's here never).
        """
        return [
            self.ends[r] - self.ends[r - 1]
            for r in sorted(self.ends)
            if r >= 3 and r - 1 in self.ends and not training.is_eval_round(r)
        ]


def clustered(strategy: ClusteredStrategy) -> ClusteredStrategy:
    """``strategy`` (CFLGT) already clustered into the 5 groups at start: every round only trains."""
    # pretrain-rounds 0 means automatic at construction; no pre-training is what is measured here
    strategy.params = replace(strategy.params, pretrain_rounds=0)
    init = strategy.init_clusters

    def init_clusters(initial: ArrayRecord) -> None:
        init(initial)
        models = [initial.copy() for _ in range(GROUPS)]
        strategy.set_clusters(models, {pid: pid % GROUPS for pid in strategy.clients})
        strategy.distance_matrix = np.zeros((1, 1))  # type: ignore[attr-defined]

    strategy.init_clusters = init_clusters  # type: ignore[method-assign]
    return strategy


def run_loop(loop: str, num_clients: int, training: TrainingParams, folder: Path) -> list[float]:
    """CPU seconds of each compared round of one loop over a fresh ``ReplayGrid``."""
    initial = ArrayRecord(build_model("dnn", (1, 28, 28), 10, 0).state_dict())
    grid = ReplayGrid(num_clients, initial)
    clock = RoundCPU(grid)
    if loop == "flower":
        FedAvg(
            fraction_train=training.fraction,
            fraction_evaluate=0.0,
            min_train_nodes=training.num_sampled(num_clients),
            min_available_nodes=num_clients,
        ).start(
            grid,  # type: ignore[arg-type]
            initial,
            num_rounds=training.rounds,
            train_config=ConfigRecord(training.local_config()),
            evaluate_fn=clock,
        )
        return clock.rounds(training)
    name = UmbelFedAvg.name if loop == "umbel" else loop
    params: dict[str, Any] = {IFCA.name: {"num_clusters": GROUPS}, CFLGT.name: {"pretrain_rounds": 0}}.get(loop, {})
    strategy_cls = get_strategy(name)
    strategy = strategy_cls(training, strategy_cls.params_type(**params))
    if loop == CFLGT.name:
        strategy = clustered(strategy)
    recorder = RunRecorder(folder / loop, {})
    strategy.on_round = recorder.on_round
    strategy.start(grid, initial, evaluate_fn=clock, expected_clients=num_clients)  # type: ignore[arg-type]
    return clock.rounds(training)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the loops interleaved (or profile one); print the table of CPU per round and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each loop, interleaved")
    parser.add_argument("--loops", default=",".join(LOOPS), help=f"comma-separated, of {', '.join(LOOPS)}")
    parser.add_argument("--profile", choices=LOOPS, help="print the cProfile of this loop's run and stop")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error(
            "The 'rounds' parameter of server_overhead must be an int in the range [5, inf). "
            f"Got {args.rounds} instead."
        )
    loops = [loop for loop in args.loops.split(",") if loop]
    unknown = sorted(set(loops) - set(LOOPS))
    if unknown:
        parser.error(f"The 'loops' parameter of server_overhead must name loops of {LOOPS}. Got {unknown} instead.")
    load_before = load_average()
    training = TrainingParams(rounds=args.rounds, fraction=args.fraction, local_epochs=1, eval_every=args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            profiler = cProfile.Profile(time.process_time)
            profiler.runcall(run_loop, args.profile, args.clients, training, Path(tmp))
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
            print(out.getvalue())
            return 0
        seconds: dict[str, list[float]] = {loop: [] for loop in loops}
        for _ in range(args.repeats):
            for loop in loops:
                seconds[loop].extend(run_loop(loop, args.clients, training, Path(tmp)))
    base = "flower" if "flower" in seconds else loops[0]
    lines = [
        f"| loop | CPU ms / round (median) | / {base} (95% CI) | / umbel FedAvg (95% CI) |",
        "|---|---:|---:|---:|",
    ]
    for loop, values in seconds.items():
        cells = []
        for ref in (base, "umbel"):
            if ref in seconds and ref != loop:
                ratio, low, high = bootstrap_ratio(values, seconds[ref])
                cells.append(f"{ratio:.3f} ({low:.3f}-{high:.3f})")
            else:
                cells.append("")
        lines.append(f"| {loop} | {1000 * statistics.median(values):.2f} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        (
            f"Server CPU per round, {args.clients} clients, fraction {args.fraction}, "
            f"{len(seconds[base])} rounds per loop ({args.repeats} runs of {args.rounds} rounds)."
        ),
    ]
    print("\n".join(lines))
    if args.record:
        tables = tables_from_markdown("The server's own CPU time per round", "\n".join(lines))
        print(f"wrote {save_tables('server-overhead', OVERHEAD, tables, load_before)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
