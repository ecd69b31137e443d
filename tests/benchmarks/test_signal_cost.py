"""benchmarks/signal_cost.py runs every client signal on a tiny federation and sizes it right."""

import json
import math

from benchmarks import signal_cost


def test_signal_cost_table_on_a_tiny_digits_federation(tmp_path):
    from common.models import build_model

    argv = [
        "--dataset",
        "digits",
        "--num-clients",
        "4",
        "--repeats",
        "1",
        "--set",
        "samples-per-label=10",
        "--set",
        "groups=2",
        "--out",
        str(tmp_path),
    ]
    assert signal_cost.main(argv) == 0
    result = json.loads((tmp_path / "signal_cost.json").read_text())
    net = build_model("dnn", (1, 8, 8), 10)
    params = sum(p.numel() for p in net.state_dict().values() if p.is_floating_point())
    head = net.head.weight.numel() + net.head.bias.numel()
    got = {r["signal"]: r for r in result["rows"]}
    assert result["params"] == params
    assert got["one local epoch (train_local)"]["bytes"] == 4 * params
    assert got["update"]["bytes"] == 4 * params
    assert got["forces"]["bytes"] == 2 * 10 * 4  # pull and push per class, float32
    assert got["final-layer"]["bytes"] == 4 * head
    for ratio in (1, 100, 1000):
        assert got[f"profile (model gap), compression {ratio}"]["bytes"] == 4 * math.ceil(params / ratio)
    assert all(r["cpu_s"] >= 0 and r["wall_s"] > 0 for r in result["rows"])
    assert "| cflgt | forces |" in (tmp_path / "signal_cost.md").read_text()
