"""benchmarks/server_overhead.py: server CPU per round over a grid that answers at once."""

import pytest

from benchmarks import server_overhead

from common.config import TrainingParams


@pytest.mark.parametrize("loop", server_overhead.LOOPS)
def test_every_loop_runs_its_training_rounds_on_the_replay_grid(loop, tmp_path):
    training = TrainingParams(rounds=6, fraction=0.5, local_epochs=1, eval_every=6)
    seconds = server_overhead.run_loop(loop, 10, training, tmp_path)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)  # rounds 3 to 5; 6 evaluates in umbel's loop


def test_clustered_cflgt_trains_five_cluster_models(tmp_path):
    training = TrainingParams(rounds=5, fraction=0.5, local_epochs=1, eval_every=5)
    strategy = server_overhead.get_strategy("cflgt")(training, server_overhead.get_strategy("cflgt").params_type(0))
    initial = server_overhead.ArrayRecord(server_overhead.build_model("dnn", (1, 28, 28), 10, 0).state_dict())
    server_overhead.clustered(strategy).start(server_overhead.ReplayGrid(10, initial), initial, expected_clients=10)
    assert strategy.num_clusters == 5 and {r.phase for r in strategy.history[1:]} == {"train"}
    assert strategy.history[-1].ari == pytest.approx(1.0)


def test_bad_loop_is_named(capsys):
    with pytest.raises(SystemExit):
        server_overhead.main(["--loops", "umbel,nope"])
    assert "The 'loops' parameter of server_overhead must name" in capsys.readouterr().err
