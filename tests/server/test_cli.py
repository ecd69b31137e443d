"""`umbel run` fails before anything starts on bad input, and maps flags to run-config."""

import re
import tomllib

import pytest

from server import cli


def _run(argv, capsys):
    code = cli.main(["run", *argv])
    return code, capsys.readouterr()


def test_unknown_strategy_exits_before_training_and_lists_choices(capsys, tmp_path):
    code, out = _run(["--strategy", "nope", "--flwr-home", str(tmp_path)], capsys)
    assert code == 2
    assert re.search(r"The 'strategy' parameter of the run config must be one of \{'fedavg', .*'local'.*\}", out.err)
    assert "Got 'nope' instead" in out.err
    assert not (tmp_path / "config.toml").exists()


def test_eleven_labels_of_ten_exits_before_training(capsys, tmp_path):
    code, out = _run(["--labels-per-group", "11", "--flwr-home", str(tmp_path)], capsys)
    assert code == 2 and "'labels-per-group'" in out.err and "[1, 10]" in out.err and "Got 11" in out.err


def test_check_validates_data_without_running(capsys, tmp_path):
    code, out = _run(["--dataset", "digits", "--num-clients", "6", "--groups", "2", "--samples-per-label", "20",
                      "--results-dir", str(tmp_path), "--check"], capsys)
    assert code == 0 and "6 clients" in out.out
    code, out = _run(["--dataset", "digits", "--samples-per-label", "20", "--check"], capsys)
    assert code == 2 and "'samples-per-label'" in out.err


def test_a_device_this_machine_lacks_fails_before_starting(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    code, out = _run(["--dataset", "digits", "--num-clients", "6", "--groups", "2", "--samples-per-label", "20",
                      "--device", "cuda", "--check"], capsys)
    assert code == 2 and "'device'" in out.err


def test_every_run_config_key_has_a_flag():
    defaults = cli.load_defaults(cli.PROJECT_ROOT)
    assert {"strategy", "dataset", "scenario", "num-clients", "rounds", "fraction", "local-epochs", "batch-size",
            "lr", "momentum", "model", "seed", "eval-every", "results-dir", "data-dir", "round-timeout"} <= set(defaults)


def test_run_config_toml_round_trips():
    config = {"strategy": "fedavg", "lr": 0.001, "num-clients": 6, "angles": "0,90", "data-dir": 'a "b"\\c'}
    assert tomllib.loads(cli.to_toml(config)) == config


def test_flower_config_sizes_the_federation(tmp_path):
    cli.write_flower_config(tmp_path, 42, 1, 0.25)
    conf = tomllib.loads((tmp_path / "config.toml").read_text())
    local = conf["superlink"]["local"]
    assert conf["superlink"]["default"] == "local" and local["address"] == ":local:"
    assert local["options"]["num-supernodes"] == 42
    assert local["options"]["backend"]["client-resources"] == {"num-cpus": 1, "num-gpus": 0.25}


def test_environment_disables_runtime_installs_and_telemetry(tmp_path):
    env = cli.simulation_env(tmp_path, 12345)
    assert env["FLWR_HOME"] == str(tmp_path) and env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] == "12345"
    assert env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1" and env["FLWR_TELEMETRY_ENABLED"] == "0"


@pytest.mark.parametrize("bad", ["--rounds", "--fraction"])
def test_flag_types_come_from_the_defaults(bad, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", bad, "many"])
