"""benchmarks/overhead.py: umbel's FedAvg loop and Flower's own FedAvg, each a real `umbel run`."""

import json
import math
import tomllib

import pytest
from flwr.app import Context, RecordDict

from benchmarks import flower_fedavg_app, overhead
from benchmarks.flower_fedavg_app import COMPONENT, flower_fedavg_tree
from benchmarks.runs import ROOT
from server.cli import load_defaults
from tests.helpers import SMALL_FEDERATION_ARGS, small_run_config


def test_ratio_is_of_the_mean_round_times_over_all_pairs():
    report = overhead.ratio_report(
        [{"umbel": [1.0, 3.0], "flower": [1.0, 1.0]}, {"umbel": [2.0, 2.0], "flower": [2.0, 2.0]}]
    )
    assert report["ratio"] == pytest.approx(2.0 / 1.5)
    assert report["pair-ratios"] == pytest.approx([2.0, 1.0]) and report["rounds-compared"] == 4


def test_no_rounds_to_compare_is_an_error():
    with pytest.raises(ValueError, match="No training rounds"):
        overhead.ratio_report([{"umbel": [], "flower": [1.0]}])


@pytest.mark.parametrize("argv, name", [(["--pairs", "0"], "pairs"), (["--rounds", "3"], "rounds")])
def test_bad_arguments_name_the_parameter(argv, name, capsys):
    with pytest.raises(SystemExit):
        overhead.main(argv)
    assert f"The '{name}' parameter of overhead must be" in capsys.readouterr().err


def test_the_flower_tree_differs_from_umbel_only_in_its_serverapp(tmp_path):
    tree = flower_fedavg_tree(ROOT, tmp_path / "app")
    with (ROOT / "pyproject.toml").open("rb") as fh:
        ours = tomllib.load(fh)
    with (tree / "pyproject.toml").open("rb") as fh:
        theirs = tomllib.load(fh)
    assert theirs["tool"]["flwr"]["app"]["components"] == {"serverapp": COMPONENT, "clientapp": "client.app:app"}
    theirs["tool"]["flwr"]["app"]["components"]["serverapp"] = "server.app:app"
    assert theirs == ours
    for module in ("benchmarks/flower_fedavg_app.py", "server/cli.py", "client/app.py", "strategies/fedavg.py"):
        assert (tree / module).read_bytes() == (ROOT / module).read_bytes()
    assert not list(tree.rglob("__pycache__"))


def test_umbel_has_no_server_loop_switch():
    assert "server-loop" not in load_defaults(ROOT)


def test_the_reference_app_runs_fedavg_only(tmp_path):
    context = Context(0, 0, {}, RecordDict(), small_run_config(strategy="flic", **{"results-dir": str(tmp_path)}))
    with pytest.raises(
        ValueError, match="The 'strategy' parameter of the Flower FedAvg reference app must be 'fedavg'"
    ):
        flower_fedavg_app.main(None, context)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_one_pair_on_digits_times_both_loops_the_same_way(tmp_path):
    assert (
        overhead.main(
            [
                "--pairs",
                "1",
                "--rounds",
                "4",  # overhead's least: round 1 (start-up) and 4 (last, evaluated) are left out
                "--results-dir",
                str(tmp_path),
                "--",
                *SMALL_FEDERATION_ARGS,
                "--fraction",
                "0.5",
                "--lr",
                "0.05",
            ]
        )
        == 0
    )
    folder = tmp_path / "overhead"
    report = json.loads((folder / "overhead.json").read_text())
    for loop in ("umbel", "flower"):
        times = json.loads((folder / f"{loop}-0" / "round-times.json").read_text())
        assert times["server-loop"] == loop and sorted(times["round-seconds"]) == ["2", "3", "4"]
        assert math.isfinite(report["pairs"][0][f"{loop}-train-loss"])
        assert len(report["pairs"][0][loop]) == 2  # rounds 2-3: the first and the last are left out
    # Flower's loop (its own ServerApp) writes its summary, round times and each round's train replies
    # (what umbel run's outcome check reads); umbel's loop its full results
    assert json.loads((folder / "flower-0" / "summary.json").read_text())["server-loop"] == "flower"
    flower_rounds = [json.loads(x) for x in (folder / "flower-0" / "metrics.jsonl").read_text().splitlines()]
    assert flower_rounds == [{"round": r, "train-replies": 3} for r in range(1, 5)]
    assert "accuracy" in (folder / "umbel-0" / "metrics.jsonl").read_text()
    assert report["ratio"] > 0 and "Ratio umbel / Flower" in (folder / "overhead.md").read_text()


def test_report_gives_a_bootstrap_interval_around_the_ratio_and_pairs_for_two_percent():
    pairs = [
        {"umbel": [1.1, 1.2, 1.0], "flower": [1.0, 1.0, 1.1]},
        {"umbel": [1.0, 1.1, 1.0], "flower": [0.8, 0.8, 0.8]},
    ]
    report = overhead.ratio_report(pairs)
    low, high = report["ratio-ci95"]
    assert low < report["ratio"] < high
    spread = math.sqrt(sum((r - sum(report["pair-ratios"]) / 2) ** 2 for r in report["pair-ratios"]))
    assert report["pairs-for-2-percent"] == math.ceil((1.96 * spread / 0.02) ** 2)


def test_one_pair_cannot_say_how_many_pairs_resolve_two_percent():
    assert overhead.pairs_for_resolution([1.05]) is None
    assert overhead.pairs_for_resolution([1.0, 1.0, 1.0]) == 3  # no spread: the pairs run are enough


def test_bootstrap_interval_narrows_with_more_rounds_and_needs_both_sides():
    _, low, high = overhead.bootstrap_ratio([2.0, 2.2, 1.8] * 3, [1.0, 1.1, 0.9] * 3)
    _, low_many, high_many = overhead.bootstrap_ratio([2.0, 2.2, 1.8] * 30, [1.0, 1.1, 0.9] * 30)
    assert low < 2.0 < high and high_many - low_many < (high - low) / 2
    with pytest.raises(ValueError, match="'numerator' and 'denominator' parameters of bootstrap_ratio"):
        overhead.bootstrap_ratio([], [1.0])
