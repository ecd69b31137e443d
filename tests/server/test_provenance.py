import json

import pytest

from client.app import app as client_app
from server import cli
from server.experiment import Experiment
from server.provenance import data_text, dataset_label, describe_data
from server.results import RunRecorder
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    out = tmp_path_factory.mktemp("own") / "myfed"
    argv = ["export", "--out", str(out), "--dataset", "digits", "--num-clients", "4", "--groups", "2"]
    assert cli.main([*argv, "--samples-per-label", "5", "--seed", "1", "--format", "npz"]) == 0
    return out


def test_a_scenario_run_is_named_by_its_scenario_and_data_set():
    rc = small_run_config()
    exp = Experiment.from_run_config(rc)
    assert exp.default_run_name().startswith(f"fedavg-{rc['scenario']}-{rc['dataset']}-s1-")
    data = describe_data(exp)
    assert data == {"source": "scenario", "scenario": rc["scenario"], "dataset": rc["dataset"], "truth-path": None}
    assert data_text(data) == f"{rc['dataset']} ({rc['scenario']})"


def test_a_data_set_file_is_named_by_its_file_not_its_path():
    assert dataset_label("npz:/data/all.npz") == "npz-all" and dataset_label("fashion-mnist") == "fashion-mnist"


def test_an_own_data_run_names_its_folder_format_and_truth_file_not_a_scenario(fed, tmp_path):
    config = small_run_config(rounds=1, **{"data-path": str(fed), "truth-path": str(fed / "federation.json")})
    config["results-dir"] = str(tmp_path)
    cli.use_data_path(config)
    exp = Experiment.from_run_config(config)
    name = exp.default_run_name()
    assert name.startswith("fedavg-myfed-npz-s1-") and config["scenario"] not in name
    data = describe_data(exp)
    assert data == {
        "source": "data-path",
        "path": str(fed),
        "format": "npz",
        "truth-path": str(fed / "federation.json"),
    }
    assert data_text(data) == f"own data: {fed} (npz)"
    # summary.json says the same, with how many clients took part of how many were expected
    strategy = exp.build_strategy()
    recorder = RunRecorder(tmp_path / "run", config, expected_clients=4, data=data)
    strategy.on_round = recorder.on_round
    strategy.start(InProcessGrid(client_app, config, 4), exp.initial_model(), expected_clients=4)
    recorder.finish(strategy)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["data"] == data and summary["num-clients"] == summary["expected-clients"] == 4


def test_resources_json_names_the_states_pieces_without_private_attribute_names(tmp_path):
    from server.app import write_resources

    strategy = Experiment.from_run_config(small_run_config(strategy="cflgt")).build_strategy()
    assert any(name.startswith("_") for name in vars(strategy))
    write_resources(tmp_path / "resources.json", strategy)
    resources = json.loads((tmp_path / "resources.json").read_text())
    state = resources["state-bytes"]
    assert state and not [k for k in state if k.startswith("_") or "_" in k]
    assert {"peak-rss-mb", "cpu-seconds", "identity-seconds", "num-clients"} <= set(resources)


def test_the_final_log_line_shows_rounded_figures_and_n_a_not_none():
    from server.results import _shown

    assert _shown(0.8753968253968254, 4) == "0.8754" and _shown(1.0, 3) == "1.000"
    assert _shown(None, 3) == "n/a"
