"""``umbel run --client-actors``: how many Ray actors run the simulated clients."""

import pytest
from flwr.common.config import parse_config_args

from server import cli
from tests.server.test_cli import _fake_flower


def _federation_config(monkeypatch, tmp_path, config, cpus, actors) -> dict:
    seen: list[list[str]] = []
    monkeypatch.setattr(cli.subprocess, "Popen", _fake_flower([(0, "run finished\n")], seen))
    monkeypatch.setattr(cli, "stop_superlinks", lambda home: [])
    assert cli.simulate(config, 40, tmp_path / "home", cpus, 0.0, actors) == 0
    return parse_config_args([seen[0][seen[0].index("--federation-config") + 1]])


def test_ray_is_told_the_cpus_of_the_actors_asked_for(monkeypatch, tmp_path):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    plain = {"slow-fraction": 0.0}
    assert "init-args-num-cpus" not in _federation_config(monkeypatch, tmp_path, plain, 1, 0)
    fields = _federation_config(monkeypatch, tmp_path, plain, 2, 3)
    assert fields["init-args-num-cpus"] == 6 and fields["client-resources-num-cpus"] == 2
    # injected sleepers need more actors than asked for: they get them
    slow = {"slow-fraction": 0.2, "slow-delay": 60.0}
    assert _federation_config(monkeypatch, tmp_path, slow, 1, 3)["init-args-num-cpus"] == 2 + 8
    assert _federation_config(monkeypatch, tmp_path, slow, 1, 20)["init-args-num-cpus"] == 20


@pytest.mark.parametrize("bad", ["-1", "two"])
def test_a_negative_or_non_integer_actor_count_is_refused_naming_the_flag(bad, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--client-actors", bad, "--check"])
    err = capsys.readouterr().err
    assert f"The '--client-actors' parameter must be an int >= 0. Got '{bad}' instead." in err


def test_ray_sends_a_model_carrying_message_with_its_call_unless_told_otherwise(monkeypatch, tmp_path):
    monkeypatch.delenv(cli.RAY_INLINE_ENV, raising=False)
    env = cli.simulation_env(tmp_path / "home", 1234)
    assert int(env[cli.RAY_INLINE_ENV]) == cli.RAY_INLINE_BYTES >= 636_040  # fashion-mnist's dnn, in bytes
    monkeypatch.setenv(cli.RAY_INLINE_ENV, "1000")
    assert cli.simulation_env(tmp_path / "home", 1234)[cli.RAY_INLINE_ENV] == "1000"
