"""End to end through `python -m server.cli run` (Flower simulation): FedClust, PACFL, FL+HC on digits."""

import json
import subprocess
import sys

import pytest

from server import cli
from tests.helpers import SMALL_FEDERATION_ARGS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "strategy, extra",
    [
        ("fedclust", ["--fedclust-lambda", "2.0", "--late-clients", "0.34", "--late-round", "2"]),
        ("pacfl", ["--pacfl-measure", "mean", "--pacfl-threshold", "35"]),
        ("flhc", ["--flhc-warmup-rounds", "1", "--num-clusters", "2"]),
    ],
)
def test_one_shot_strategy_finds_the_groups_and_draws_the_distances(tmp_path, strategy, extra):
    run_name = f"it-{strategy}-{tmp_path.name}"
    cmd = [
        sys.executable,
        "-m",
        "server.cli",
        "run",
        "--strategy",
        strategy,
        *SMALL_FEDERATION_ARGS,
        "--seed",
        "1",
        "--rounds",
        "2",
        "--fraction",
        "0.5",
        "--eval-every",
        "1",
        "--lr",
        "0.05",
        "--local-epochs",
        "2",
        "--results-dir",
        str(tmp_path / "results"),
        "--run-name",
        run_name,
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, cwd=cli.PROJECT_ROOT, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    folder = tmp_path / "results" / run_name
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["ari"] == 1.0 and lines[-1]["num-clusters"] == 2 and len(lines) == 2
    assert sum(r["bytes-up-signal"] for r in lines) > 0
    assert (folder / "distances.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
