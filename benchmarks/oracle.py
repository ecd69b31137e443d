"""The clustering's ceiling: one model per true group, trained on the group's pooled data.

A clustered run can at best train, for each true group, the model that group's pooled train
data gives. This benchmark builds the scenario exactly as ``umbel run`` does (same partition for
the same seed), pools the train splits of each true group's clients, trains one model per group
with the given training settings, and scores every client's own test split with its group's
model. The mean over clients is the figure a perfect clustering approaches (``umbel run``'s
accuracy is the same unweighted mean over clients); the per-group rows show which label
combinations the seed drew and how hard each is. Test splits are used only for the score.

Example::

    python -m benchmarks.oracle --scenario label-groups --groups 5 --labels-per-group 2 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.records import Record, Table, current_command, load_average, write_record
from common.models import build_model
from common.scenarios import ScenarioConfig, build_partition, client_data
from common.training import evaluate, train

FASHION_MNIST_NAMES = (
    "T-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "boot",
)


@dataclass(frozen=True)
class GroupCeiling:
    """One true group's pooled model.

    Attributes
    ----------
    group : int
    labels : tuple of int
        The labels present in the group's pooled train data.
    clients : int
    train_samples : int
    train_accuracy : float
        The pooled model's accuracy on the pooled train data (has it fitted?).
    client_accuracies : ndarray of shape (clients,)
        Each member's test accuracy under the group's model.
    """

    group: int
    labels: tuple[int, ...]
    clients: int
    train_samples: int
    train_accuracy: float
    client_accuracies: np.ndarray


def group_ceilings(
    config: ScenarioConfig,
    *,
    model: str,
    epochs: int,
    lr: float,
    momentum: float,
    batch_size: int,
    data_dir: str = "",
) -> list[GroupCeiling]:
    """Train one model per true group of ``config``'s partition on the group's pooled train data.

    Every random choice (the partition, each model's initial weights and batch order) comes from
    ``config.seed``.

    Raises
    ------
    ValueError
        If the scenario has no true groups.
    """
    partition = build_partition(config, data_dir)
    truth = partition.true_groups()
    if (truth < 0).all():
        raise ValueError(
            f"The 'scenario' parameter of group_ceilings must have true groups. Got {config.scenario!r} instead."
        )
    info = partition.dataset.info
    out = []
    for g in np.unique(truth[truth >= 0]):
        members = [client_data(partition, int(pid)) for pid in np.flatnonzero(truth == g)]
        x = np.concatenate([c.x_train for c in members])
        y = np.concatenate([c.y_train for c in members])
        net = build_model(model, info.input_shape, info.num_classes, seed=config.seed + int(g))
        train(net, x, y, epochs=epochs, batch_size=batch_size, lr=lr, momentum=momentum, seed=config.seed + int(g))
        _, train_acc = evaluate(net, x, y)
        accs = np.array([evaluate(net, c.x_test, c.y_test)[1] for c in members])
        out.append(GroupCeiling(int(g), tuple(int(v) for v in np.unique(y)), len(members), len(y), train_acc, accs))
    return out


def mean_over_clients(ceilings: Sequence[GroupCeiling]) -> float:
    """The unweighted mean of every client's accuracy, as ``umbel run`` reports a round."""
    return float(np.concatenate([c.client_accuracies for c in ceilings]).mean())


def _label_names(dataset: str, labels: Sequence[int]) -> str:
    if dataset == "fashion-mnist":
        return "/".join(FASHION_MNIST_NAMES[v] for v in labels)
    return "/".join(str(v) for v in labels)


def main(argv: Sequence[str] | None = None) -> int:
    """Print each seed's ceiling; with ``--record``, write the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="label-groups")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--num-clients", type=int, default=100)
    parser.add_argument("--groups", type=int, default=5)
    parser.add_argument("--labels-per-group", type=int, default=2)
    parser.add_argument("--samples-per-label", type=int, default=0)
    parser.add_argument("--samples-per-client", type=int, default=600, help="rotation, label-swap")
    parser.add_argument("--label-fraction", type=float, default=0.2, help="label-skew, label-skew-dirichlet")
    parser.add_argument("--quantity-alpha", type=float, default=1.0, help="label-skew-dirichlet")
    parser.add_argument("--angles", default="0,90,180,270", help="rotation: comma-separated degrees")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated")
    parser.add_argument("--model", default="dnn")
    parser.add_argument("--epochs", type=int, default=50, help="passes over each group's pooled train data")
    parser.add_argument("--lr", type=float, default=0.001, help="CFLGT's (the paper's) value")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--record", default="", help="write the tables as this record (docs/results/data)")
    parser.add_argument("--notes", default="", help="added to the record's notes")
    parser.add_argument("--load", default="", help="the load to record (default: the load average at the end)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]

    detail, summary = [], []
    start = time.perf_counter()
    for seed in seeds:
        config = ScenarioConfig(
            scenario=args.scenario,
            dataset=args.dataset,
            num_clients=args.num_clients,
            seed=seed,
            groups=args.groups,
            labels_per_group=args.labels_per_group,
            samples_per_label=args.samples_per_label,
            samples_per_client=args.samples_per_client,
            label_fraction=args.label_fraction,
            quantity_alpha=args.quantity_alpha,
            angles=tuple(float(a) for a in args.angles.split(",")),
            test_fraction=args.test_fraction,
        )
        ceilings = group_ceilings(
            config,
            model=args.model,
            epochs=args.epochs,
            lr=args.lr,
            momentum=args.momentum,
            batch_size=args.batch_size,
        )
        for c in ceilings:
            detail.append(
                [
                    seed,
                    c.group,
                    _label_names(args.dataset, c.labels),
                    c.clients,
                    c.train_samples,
                    round(c.train_accuracy, 4),
                    round(float(c.client_accuracies.mean()), 4),
                ]
            )
        ceiling = mean_over_clients(ceilings)
        hardest = min(ceilings, key=lambda c: float(c.client_accuracies.mean()))
        summary.append([seed, round(ceiling, 4), _label_names(args.dataset, hardest.labels)])
        print(f"seed {seed}: ceiling {ceiling:.4f} (hardest group {hardest.labels})", flush=True)
    values = np.array([row[1] for row in summary])
    print(f"mean over {len(seeds)} seeds: {values.mean():.4f} (min {values.min():.4f}, max {values.max():.4f})")
    print(f"{time.perf_counter() - start:.0f} s")

    if args.record:
        shape = {
            "label-groups": f"{args.groups} groups x {args.labels_per_group} labels",
            "label-skew": f"label fraction {args.label_fraction}",
            "label-skew-dirichlet": f"label fraction {args.label_fraction}, quantity alpha {args.quantity_alpha}",
            "label-swap": f"{args.groups} groups, {args.samples_per_client} samples a client",
            "rotation": f"angles {args.angles}, {args.samples_per_client} samples a client",
        }.get(args.scenario, args.scenario)
        setting = f"{args.dataset} {args.scenario}, {shape}, {args.num_clients} clients"
        train_note = (
            f"One {args.model} per true group, trained {args.epochs} epochs on the group's pooled train data "
            f"(SGD lr {args.lr}, momentum {args.momentum}, batch {args.batch_size}); each of the "
            f"{args.num_clients} clients scored on its own test split with its group's model; the mean is over "
            "all clients, unweighted, as umbel run reports a round."
        )
        tables = [
            Table(
                title=f"Ceiling of a perfect clustering: {setting}",
                columns=["seed", "ceiling (mean over clients)", "hardest group's labels"],
                rows=[*summary, ["mean", round(float(values.mean()), 4), ""]],
                notes=" ".join(filter(None, [train_note, args.notes])),
            ),
            Table(
                title=f"Ceiling of a perfect clustering, per group: {setting}",
                columns=["seed", "group", "labels", "clients", "train samples", "train accuracy", "test accuracy"],
                rows=detail,
                notes="Test accuracy: the mean over the group's clients of each one's own test split.",
            ),
        ]
        record = Record(
            name=args.record,
            section="Accuracy and clustering",
            command=current_command(),
            tables=tables,
            load=args.load or load_average(),
        )
        print(write_record(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
