import json

import pytest

from server.results import progress_line, summarise
from strategies.record import RoundRecord


def _record(rnd, acc=None, ari=None, clusters=1):
    return RoundRecord.from_dict(
        {
            "round": rnd,
            "phase": "train",
            "accuracy": acc,
            "accuracy-std": None if acc is None else 0.1,
            "loss": None,
            "ari": ari,
            "ami": ari,
            "num-clusters": clusters,
            "cluster-sizes": [4],
            "train-replies": 2,
            "failures": 1,
            "rejected": 0,
            "bytes-down-model": 100,
            "bytes-up-model": 50,
            "bytes-down-signal": 8,
            "bytes-up-signal": 16,
            "clustering-seconds": 0.5,
            "round-seconds": 2.0,
        }
    )


def test_summary_averages_the_final_stretch_not_the_best_round():
    history = [
        _record(r, acc=(0.9 if r == 10 else 0.5 + r / 100) if r % 2 == 0 else None, ari=1.0 if r >= 6 else 0.3)
        for r in range(1, 21)
    ]
    summary = summarise(history)
    # the final stretch of 20 rounds is rounds 17-20; 18 and 20 were evaluated
    assert summary["final-accuracy"] == pytest.approx(0.69) and summary["final-evaluations"] == 2
    assert summary["final-accuracy-spread"] == pytest.approx(0.01)
    assert summary["final-accuracy-range"] == pytest.approx([0.68, 0.70])
    every = summarise([_record(r, acc=0.5 + r / 100) for r in range(1, 31)])
    assert every["final-evaluations"] == 6 and every["final-accuracy"] == pytest.approx(0.5 + 27.5 / 100)
    assert summary["rounds-to-truth"] == 6 and summary["final-ari"] == 1.0
    assert summary["bytes-up-signal"] == 320 and summary["failures"] == 20
    assert summary["clustering-seconds"] == pytest.approx(10.0)
    json.dumps(summary)


def test_summary_without_truth_or_evaluation():
    summary = summarise([_record(1)])
    assert summary["final-accuracy"] is None and summary["rounds-to-truth"] is None


def test_progress_line():
    line = progress_line(_record(12, acc=0.78125, ari=1.0, clusters=5), 100)
    assert line.startswith("round   12/100 | train") and "acc 0.7812" in line and "ARI 1.000" in line
    assert "clusters   5" in line
    assert "acc    -" in progress_line(_record(3), 100)


def test_clustering_rounds_mark_every_change_of_the_cluster_count():
    from server.results import clustering_rounds

    counts = [1, 1, 5, 5, 6, 6]
    history = [RoundRecord(round=r, phase="train", num_clusters=k) for r, k in enumerate(counts, start=1)]
    assert clustering_rounds(history) == [3, 5]
    four = [RoundRecord(round=r, phase="train", num_clusters=4) for r in (1, 2)]
    assert clustering_rounds(four) == [1]


def test_write_partial_summarises_only_the_rounds_that_ran(tmp_path):
    import json

    from server.results import write_partial

    assert write_partial(tmp_path, {"strategy": "fedavg"}) == 0 and not (tmp_path / "summary.json").exists()
    rows = []
    for r, acc in ((1, None), (2, 0.5), (3, None), (4, 0.7)):
        rows.append(
            {
                "round": r,
                "phase": "train",
                "accuracy": acc,
                "accuracy-std": None if acc is None else 0.1,
                "ari": 0.0,
                "ami": 0.0,
                "num-clusters": 1 if r < 3 else 2,
                "bytes-down-model": 10,
                "bytes-up-model": 10,
                "bytes-down-signal": 0,
                "bytes-up-signal": r,
                "failures": 0,
                "rejected": 0,
                "clustering-seconds": 0.0,
                "round-seconds": 1.0,
            }
        )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert write_partial(tmp_path, {"strategy": "fedavg", "rounds": 100}) == 4
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["rounds"] == 4 and summary["config"]["rounds"] == 100
    assert summary["final-accuracy"] == 0.7 and summary["bytes-up-signal"] == 10 and summary["final-num-clusters"] == 2
    assert (tmp_path / "accuracy.png").exists() and (tmp_path / "clustering.png").exists()


def test_a_metrics_line_without_the_newer_counts_reads_with_their_defaults_and_unknown_keys_are_ignored():
    record = RoundRecord.from_dict({"round": 2, "phase": "train", "num-clusters": 3, "future-key": 1})
    assert record.capped == 0 and record.num_clients is None and record.clients_lost == []
    assert "future-key" not in record.to_dict() and record.num_clusters == 3
    with pytest.raises(ValueError, match="num-clusters"):
        RoundRecord.from_dict({"round": 2, "phase": "train"})


def test_distances_png_shows_a_seeded_sample_of_a_large_federation_with_its_rows_and_clusters(
    monkeypatch, tmp_path, caplog
):
    from types import SimpleNamespace

    import numpy as np

    from server import plots, results

    class Strategy:
        name = "x"
        distance_matrix = 100.0 * np.arange(10)[:, None] + np.arange(10)[None, :]  # cell (i, j) names i and j
        distance_pids = list(range(100, 110))
        assignment = {p: p % 3 for p in range(100, 110)}
        history: list = []
        training = SimpleNamespace(seed=5)

        def describe_distances(self):
            return "d"

    monkeypatch.setattr(results, "PLOTTED_CLIENTS", 4)
    drawn = []
    monkeypatch.setattr(plots, "plot_distance_matrix", lambda m, labels, path, title: drawn.append((m, labels, title)))
    for _ in range(2):
        results.RunRecorder._plot_distances(SimpleNamespace(folder=tmp_path), Strategy())
    (shown, labels, title), (again, _, _) = drawn
    keep = np.diag(shown) / 101
    assert shown.shape == (4, 4) and np.array_equal(again, shown) and "a seeded sample of 4 of 10 clients" in title
    assert list(keep) == sorted(set(keep)) and np.array_equal(shown, 100 * keep[:, None] + keep[None, :])
    assert list(labels) == [(100 + int(k)) % 3 for k in keep]

    class Mismatched(Strategy):
        distance_matrix = np.zeros((3, 3))  # 3 rows for 10 clients: left unplotted, not sliced as if theirs

    drawn.clear()
    with caplog.at_level("WARNING"):
        results.RunRecorder._plot_distances(SimpleNamespace(folder=tmp_path), Mismatched())
    assert drawn == [] and "distance matrix of shape (3, 3) does not match its 4 clients" in caplog.text


def test_distances_png_of_stored_updates_computes_the_distances_of_its_sample_only(monkeypatch, tmp_path):
    from types import SimpleNamespace

    import numpy as np

    from common.clustering.similarity import UpdateSimilarity
    from common.config import TrainingParams
    from server import plots, results
    from strategies.flic import FLIC

    strategy = FLIC(TrainingParams(seed=5))
    x = np.random.default_rng(0).standard_normal((12, 8))
    strategy.similarity = UpdateSimilarity(dense=False)
    strategy.similarity.update(range(12), x)
    strategy.assignment = {p: p % 2 for p in range(12)}
    asked: list[list[int]] = []
    real = UpdateSimilarity.matrix
    monkeypatch.setattr(
        UpdateSimilarity, "matrix", lambda self, pids=None: asked.append(list(pids)) or real(self, pids)
    )
    monkeypatch.setattr(results, "PLOTTED_CLIENTS", 5)
    drawn = []
    monkeypatch.setattr(plots, "plot_distance_matrix", lambda m, labels, path, title: drawn.append((m, labels, title)))
    results.RunRecorder._plot_distances(SimpleNamespace(folder=tmp_path), strategy)
    ((shown, labels, title),) = drawn
    (sample,) = asked  # one matrix, of the 5 sampled clients: never the 12 x 12
    keep = np.sort(np.random.default_rng(5).choice(12, 5, replace=False))
    assert sample == keep.tolist() and "a seeded sample of 5 of 12 clients" in title
    unit = x[keep] / np.linalg.norm(x[keep], axis=1, keepdims=True)
    np.testing.assert_allclose(shown, 1.0 - unit @ unit.T, atol=1e-6)
    assert list(labels) == [int(p) % 2 for p in keep]
