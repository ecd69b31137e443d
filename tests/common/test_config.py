import pytest

from common.config import OutputParams, TrainingParams
from common.metrics import final_stretch


def test_defaults_match_the_papers_setting_but_the_learning_rate():
    """lr is modified (issue 29: 0.001 leaves small own-data clients at chance level); CFLGT's paper
    rate stays one preset away."""
    from benchmarks.compare import _PAPER_CFLGT

    t = TrainingParams.from_run_config({})
    assert (t.rounds, t.fraction, t.local_epochs, t.batch_size, t.momentum) == (100, 0.2, 5, 32, 0.9)
    assert t.lr == 0.01
    assert _PAPER_CFLGT[_PAPER_CFLGT.index("--lr") + 1] == "0.001"


def test_run_config_keys_are_kebab_case():
    t = TrainingParams.from_run_config({"local-epochs": 2, "eval-every": 3, "round-timeout": 5.0})
    assert (t.local_epochs, t.eval_every, t.round_timeout) == (2, 3, 5.0)


@pytest.mark.parametrize(
    "key, value, pattern",
    [
        ("fraction", 0.0, r"'fraction' parameter of the run config must be a float in the range \(0.0, 1.0\]"),
        ("fraction", 1.5, r"'fraction' .* Got 1.5 instead"),
        ("rounds", 0, r"'rounds' parameter .* must be an int >= 1"),
        ("momentum", 1.0, r"'momentum' .* \[0.0, 1.0\)"),
        ("lr", -0.1, r"'lr' .* > 0.0"),
        ("local-epochs", 0, r"'local-epochs'"),
        ("batch-size", 0, r"'batch-size'"),
    ],
)
def test_bad_values_name_the_key(key, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        TrainingParams.from_run_config({key: value})


def test_sampling_size_and_eval_rounds():
    t = TrainingParams(rounds=10, fraction=0.2, eval_every=4)
    assert t.num_sampled(100) == 20 and t.num_sampled(3) == 1 and t.num_sampled(1) == 1
    assert [r for r in range(1, 11) if t.is_eval_round(r)] == [4, 8, 9, 10]  # and the final stretch of 2
    t = TrainingParams(rounds=30, eval_every=5)
    assert [r for r in range(1, 31) if t.is_eval_round(r)] == [5, 10, 15, 20, 25, 26, 27, 28, 29, 30]
    assert [final_stretch(r) for r in (1, 10, 30, 100, 200, 1000)] == [1, 2, 6, 20, 20, 100]


def test_output_params_reject_paths_as_run_names():
    with pytest.raises(ValueError, match="'run-name' parameter of the run config must be a plain folder name"):
        OutputParams(run_name="a/b")
    with pytest.raises(ValueError, match="'results-dir'"):
        OutputParams(results_dir=" ")


def test_params_from_run_config_maps_kebab_keys_and_keeps_defaults():
    from common.config import params_from_run_config

    t = params_from_run_config(TrainingParams, {"local-epochs": 3, "strategy": "ignored"})
    assert t.local_epochs == 3 and t.rounds == TrainingParams.rounds
    with pytest.raises(ValueError, match="'local-epochs'"):
        params_from_run_config(TrainingParams, {"local-epochs": 0})


def test_late_round_must_lie_within_the_run():
    with pytest.raises(
        ValueError, match=r"The 'late-round' parameter of the run config must be an int in the range \[0, 3\]. Got 4"
    ):
        TrainingParams(rounds=3, late_round=4)
    assert TrainingParams(rounds=10).admission_round == 6
    with pytest.raises(ValueError, match="'late-clients'"):
        TrainingParams(late_clients=1.0)
