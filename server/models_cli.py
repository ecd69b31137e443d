"""``umbel models show RESULTS`` and ``umbel assign RESULTS --data-path DIR [--out FILE]`` (``server.models``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

COMMANDS = ("models", "assign")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Register ``models show`` and ``assign`` on the ``umbel`` command's subparsers."""
    models = commands.add_parser("models", help="the cluster models a run wrote (docs/models.md)")
    actions = models.add_subparsers(dest="models_command", required=True)
    show = actions.add_parser("show", help="print the clusters, their sizes, members and accuracies")
    show.add_argument("results", type=Path, help="the run's results folder (or its models/ folder)")
    place = commands.add_parser(
        "assign",
        help="place a client that never took part in a cluster, by the strategy's own rule (docs/models.md)",
    )
    place.add_argument("results", type=Path, help="the run's results folder (or its models/ folder)")
    place.add_argument("--data-path", type=Path, required=True, help="the newcomer's data folder (the run's format)")
    place.add_argument("--out", type=Path, default=None, help="write the chosen cluster's model to this .npz file")


def run(args: argparse.Namespace) -> int:
    """Run ``models show`` or ``assign``; 2 with a message on bad input."""
    from common.modelstore import StoreError

    from .models import assign, read_manifest

    try:
        if args.command == "models":
            folder, manifest = read_manifest(args.results)
            print(show_text(folder, manifest))
            return 0
        placed = assign(args.results, args.data_path, args.out)
    except (StoreError, ValueError, FileNotFoundError) as err:
        print(f"umbel {args.command}: error: {err}", file=sys.stderr)
        return 2
    how = "the strategy's own rule" if placed.own_rule else "no rule of the strategy's own: lowest loss"
    print(f"cluster {placed.cluster} ({how}: {placed.rule})")
    n = placed.num_test
    print(f"accuracy of cluster {placed.cluster}'s model on the client's {n} test samples: {placed.accuracy:.4f}")
    if args.out is not None:
        print(f"model written to {args.out}")
    return 0


def show_text(folder: Path, manifest: dict) -> str:
    """The manifest as a table: one line per cluster."""
    spec, strategy = manifest["model"], manifest["strategy"]
    lines = [
        (
            f"{folder}: {strategy['name']} after round {manifest['round']}; model {spec['name']} "
            f"(input {tuple(spec['input-shape'])}, {spec['num-classes']} classes)"
        ),
        f"placement of a newcomer: {strategy['placement-rule']}",
        f"{'cluster':>7} {'size':>5} {'trained':>7} {'accuracy':>8}  members",
    ]
    for c in manifest["clusters"]:
        acc = "-" if c["mean-accuracy"] is None else f"{c['mean-accuracy']:.4f}"
        trained = "-" if c["last-round-trained"] is None else str(c["last-round-trained"])
        members = ", ".join(map(str, c["members"][:20])) + (" ..." if len(c["members"]) > 20 else "")
        lines.append(f"{c['id']:>7} {c['size']:>5} {trained:>7} {acc:>8}  {members}")
    delivery = manifest.get("delivery")
    if delivery:
        lines.append(
            f"final models: {len(delivery['written'])} clients wrote theirs, {len(delivery['not-written'])} have no "
            f"model-out, offline: {delivery['offline'] or 'none'}"
        )
    return "\n".join(lines)
