"""End to end: FedClust through `python -m server.cli run` (Flower simulation), PACFL and FL+HC through
umbel's ServerApp and ClientApp in this process (real Flower messages, no Ray), on digits."""

import json
import subprocess
import sys

import pytest
from flwr.app import Context, RecordDict

from client.app import app as client_app
from server import cli
from strategies import schema as run_keys
from server.app import main as server_app_main
from server.inprocess import InProcessGrid
from tests.helpers import SMALL_FEDERATION, SMALL_FEDERATION_ARGS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "strategy, extra, simulated",
    [
        ("fedclust", ["--fedclust-lambda", "2.0", "--late-clients", "0.34", "--late-round", "2"], True),
        ("pacfl", ["--pacfl-measure", "mean", "--pacfl-threshold", "35"], False),
        ("flhc", ["--flhc-warmup-rounds", "1", "--num-clusters", "2"], False),
    ],
)
def test_one_shot_strategy_finds_the_groups_and_draws_the_distances(tmp_path, strategy, extra, simulated):
    run_name = f"it-{strategy}-{tmp_path.name}"
    settings = ["--seed", "1", "--rounds", "2", "--fraction", "0.5", "--eval-every", "1", "--lr", "0.05"]
    settings += ["--local-epochs", "2", "--results-dir", str(tmp_path / "results"), "--run-name", run_name, *extra]
    if simulated:
        cmd = [sys.executable, "-m", "server.cli", "run", "--strategy", strategy, *SMALL_FEDERATION_ARGS, *settings]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, cwd=cli.PROJECT_ROOT, check=False)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    else:
        rc = cli.load_defaults(cli.PROJECT_ROOT)
        flags = dict(zip(settings[::2], settings[1::2], strict=True))
        rc.update({"strategy": strategy, **SMALL_FEDERATION})
        rc.update({k[2:]: run_keys.SCHEMA[k[2:]].parse(v) for k, v in flags.items()})
        server_app_main(InProcessGrid(client_app, rc, rc["num-clients"]), Context(0, 0, {}, RecordDict(), rc))
    folder = tmp_path / "results" / run_name
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["ari"] == 1.0 and lines[-1]["num-clusters"] == 2 and len(lines) == 2
    assert sum(r["bytes-up-signal"] for r in lines) > 0
    assert (folder / "distances.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
