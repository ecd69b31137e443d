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


def test_merge_keeps_the_records_other_runs_and_replaces_the_one_probed_again(tmp_path, monkeypatch):
    from benchmarks import records

    monkeypatch.setattr(records, "RECORDS_DIR", tmp_path / "data")
    monkeypatch.setattr(federation_probe, "RECORDS_DIR", tmp_path / "data")
    run = tmp_path / "cflgt-100"
    (tmp_path / "cflgt-100.samples.jsonl").write_text(json.dumps({"s": 5, "total-mb": 700}) + "\n")
    (tmp_path / "cflgt-100.log").write_text("INFO : 100 of 100 clients identified (4 s)\n")

    def probe_record(merge: bool, notes: str) -> records.Record:
        argv = ["--clients", "100", "--record", "probe-x", "--from-runs", f"CFLGT={run}", "--notes", notes]
        assert federation_probe.main(argv + ["--load", notes] + (["--merge"] if merge else [])) == 0
        return records.read_record(tmp_path / "data" / "probe-x.json")

    first = probe_record(False, "first")
    first.tables[0].rows = [["FedAvg", *first.tables[0].rows[0][1:]], ["CFLGT", *[None] * 14]]
    records.write_record(first, tmp_path / "data")
    merged = probe_record(True, "second")
    rows = merged.tables[0].rows
    assert [r[0] for r in rows] == ["FedAvg", "CFLGT"]
    assert rows[1][6] == 700 and rows[0][6] == 700
    assert merged.tables[0].notes == "first\n\nsecond" and merged.load == "first; second"
    alone = probe_record(False, "third")
    assert [r[0] for r in alone.tables[0].rows] == ["CFLGT"]
