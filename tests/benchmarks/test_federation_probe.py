"""benchmarks/federation_probe.py: when each part started, the identity rate and the peak memory."""

import json

from benchmarks import federation_probe


def test_summary_reads_starts_rate_and_peak_from_the_samples_and_the_log(tmp_path):
    sim, ray = federation_probe.SIMULATION, federation_probe.RAY
    samples = [
        {"s": 5, "total-mb": 900, "umbel run": 900},
        {"s": 10, "total-mb": 2000, "umbel run": 900, sim: 1100},
        {"s": 15, "total-mb": 5000, "umbel run": 900, sim: 2500, ray: 100, "Ray actor (ClientApp)": 750},
        {"s": 20, "total-mb": 950, "umbel run": 950},
    ]
    (tmp_path / "p.samples.jsonl").write_text("\n".join(json.dumps(s) for s in samples) + "\n")
    log = [f"INFO : {n} of 1000 clients identified ({t} s)" for n, t in ((0, 10), (100, 20), (400, 30))]
    (tmp_path / "p.log").write_text("\n".join(log) + "\n")
    got = federation_probe.summary(tmp_path / "p.samples.jsonl", tmp_path / "p.log")
    assert (got["sim"], got["ray"], got["seconds"]) == (10, 15, 20)
    assert got["rate"] == 30 and got["identified"] == "400 of 1,000 after 30 s"
    assert (got["total-mb"], got["sim-mb"], got["actor-mb"]) == (5000, 2500, 750)


def test_a_finished_run_adds_its_times_cpu_and_ari_and_an_unfinished_one_nothing(tmp_path):
    run = tmp_path / "p"
    run.mkdir()
    (tmp_path / "p.samples.jsonl").write_text(json.dumps({"s": 5, "total-mb": 10}) + "\n")
    (tmp_path / "p.log").write_text("")
    assert "wall" not in federation_probe.summary(tmp_path / "p.samples.jsonl", tmp_path / "p.log")
    (run / "summary.json").write_text(json.dumps({"wall-seconds": 300.5, "final-ari": 0.75}))
    (run / "resources.json").write_text(json.dumps({"identity-seconds": 40.0, "cpu-seconds": 120.0}))
    rounds = [
        {"round": 1, "round-seconds": 12.5},
        {"round": 2, "round-seconds": 80.0},
        {"round": 3, "round-seconds": 9},
    ]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rounds) + "\n")
    got = federation_probe.summary(tmp_path / "p.samples.jsonl", tmp_path / "p.log")
    assert (got["identity"], got["slowest-round"], got["wall"], got["cpu"], got["ari"]) == (
        40.0,
        80.0,
        300.5,
        120.0,
        0.75,
    )
