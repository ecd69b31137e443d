"""The default learning rate on a user's small own data and on a built-in scenario, side by side.

FLIC with every default but the learning rate (and the settings below) on two federations of 15
clients in 5 label groups: a tabular own-data ``npz`` (scikit-learn's bundled digits as 64
features, the ``dnn`` MLP; about 100 samples a client) and Fashion-MNIST (100 samples a client),
30 rounds of 1 local epoch with 20% of the clients a round (issue 29's case). Prints the final
mean local test accuracy, the first 5 rounds' mean training loss and whether the not-learning
warning fired. The runs go through the real ClientApp in this process (the tests' in-process
grid, ``server/inprocess.py``), not through a SuperLink.

Example::

    OMP_NUM_THREADS=1 python -m benchmarks.learning_rate --lrs 0.001,0.01,0.05
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.selection import tabular_npz
from server.cli import PROJECT_ROOT, load_defaults

SETTINGS = {"rounds": 30, "local-epochs": 1, "fraction": 0.2, "eval-every": 30, "num-clients": 15, "groups": 5}


def run(strategy: str, lr: float, federation: dict[str, Any], seed: int) -> dict[str, Any]:
    """One in-process run; its final accuracy, first losses and warning."""
    from client.app import app as client_app
    from server.experiment import Experiment
    from server.inprocess import InProcessGrid

    rc = load_defaults(PROJECT_ROOT)
    rc.update({"strategy": strategy, "seed": seed, "lr": lr, **SETTINGS, **federation})
    exp = Experiment.from_run_config(rc)
    s = exp.build_strategy()
    s.start(InProcessGrid(client_app, rc, rc["num-clients"]), exp.initial_model(), expected_clients=rc["num-clients"])
    evaluated = [r for r in s.history if r.accuracy is not None]
    check = s.learning
    return {
        "final-accuracy": round(evaluated[-1].accuracy or 0.0, 3),
        "first-losses": [round(loss, 2) for _, loss in check.losses] if check else [],
        "not-learning": check is not None and check.warning is not None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print one JSON line per federation and learning rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", default="0.001,0.01,0.05")
    parser.add_argument("--strategy", default="flic")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    federations = {
        "tabular": {"dataset": f"npz:{tabular_npz()}", "model": "dnn"},
        "fashion-mnist": {"dataset": "fashion-mnist"},
    }
    for name, federation in federations.items():
        for lr in (float(v) for v in args.lrs.split(",")):
            print(json.dumps({"data": name, "lr": lr, **run(args.strategy, lr, federation, args.seed)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
