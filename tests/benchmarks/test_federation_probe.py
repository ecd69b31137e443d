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
