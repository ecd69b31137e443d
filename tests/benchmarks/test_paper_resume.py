"""The paper preset's long runs resume: a killed cell continues from its checkpoint, the same command again.

The end-to-end case runs ``python -m benchmarks.compare --preset paper`` (real ``umbel run``s, Flower's
simulation) on digits for 3 rounds, stops it after round 2's checkpoint, runs the same command again and
compares every round's metrics with an uninterrupted run of the cell's flags (in this process: umbel's
ServerApp and ClientApp exchanging real Flower messages without Flower's simulation). The in-process
cases check that the checkpoint of FedClust and FLAG at the paper preset's flags holds every field a
resumed round reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch
from flwr.app import Array, ArrayRecord, Context, RecordDict

from benchmarks import compare
from benchmarks.runs import ROOT
from client.app import app as client_app
from common.modelstore import read_bundle
from server import cli
from strategies import schema as run_keys
from server.app import main as server_app_main
from server.experiment import Experiment
from server.inprocess import InProcessGrid
from strategies import FLAG, FedClust
from strategies.state import CHECKPOINT_FILE, capture, declared, load_checkpoint, restore
from tests.helpers import small_run_config

TIMING = ("round-seconds", "clustering-seconds")
# the paper preset's FedClust cell, shrunk: 6 digits clients, 3 rounds, every round evaluated
SMALL = ["--dataset", "digits", "--num-clients", "6", "--samples-per-label", "20", "--model", "dnn"]
SMALL += ["--rounds", "3", "--local-epochs", "3", "--batch-size", "16", "--fraction", "0.5", "--eval-every", "1"]
CELL = ["--preset", "paper", "--strategies", FedClust.name, "--scenarios", "label-skew-20", "--seeds", "0"]
NAME = f"{compare.PAPER.name}-label-skew-20-{FedClust.name}-s0"


def _command(results: Path) -> list[str]:
    return [sys.executable, "-m", "benchmarks.compare", *CELL, "--results-dir", str(results), "--", *SMALL]


def _metrics(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "metrics.jsonl").read_text()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in text.splitlines()]


def _straight_in_process(results: Path) -> Path:
    """The cell's run without a kill, in this process: the run config ``umbel run`` makes of the cell's
    flags, umbel's ServerApp and ClientApp exchanging real Flower messages without Flower's simulation
    (one torch thread, as the cell's ``OMP_NUM_THREADS=1`` Ray workers)."""
    scenario = next(s for s in compare.PAPER.scenarios if s.label == "label-skew-20")
    flags = [*compare.PAPER.args(FedClust.name, scenario, 0), *SMALL]
    flags += ["--checkpoint-every", str(compare.PAPER.checkpoint_every), "--run-name", NAME]
    parser = argparse.ArgumentParser()
    cli.add_run_config_arguments(parser)
    parsed = parser.parse_args([*flags, "--results-dir", str(results)])
    rc = {key: getattr(parsed, key.replace("-", "_")) for key in run_keys.SCHEMA}
    folder, num_clients = cli.prepare(rc)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        server_app_main(InProcessGrid(client_app, rc, num_clients), Context(0, 0, {}, RecordDict(), rc))
    finally:
        torch.set_num_threads(threads)
    return folder


def _kill_tree(pid: int) -> None:
    """Stop ``pid`` and every process under it, then SIGKILL them, as a power cut would (Flower's
    SuperLink and simulation run in sessions of their own: a signal to the process group misses them)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:  # it had already ended
        return
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.suspend()
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(tree, timeout=60)


def _checkpoint_round(path: Path) -> int | None:
    try:
        return int(read_bundle(path, "checkpoint")[1]["round"])
    except (OSError, ValueError):
        return None


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two Flower start-ups; minutes each on a loaded 2-core box
def test_a_paper_cell_stopped_after_round_2_resumes_with_the_same_command_and_ends_as_an_uninterrupted_run(
    tmp_path,
):
    stopped = tmp_path / "stopped"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    checkpoint = stopped / "paper" / "runs" / NAME / CHECKPOINT_FILE
    proc = subprocess.Popen(_command(stopped), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while _checkpoint_round(checkpoint) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        _kill_tree(proc.pid)
    log = checkpoint.parent.parent / f"{NAME}.log"
    assert _checkpoint_round(checkpoint) is not None, "no checkpoint; the run's log ends: " + (
        log.read_text()[-2000:] if log.is_file() else "(no log)"
    )
    # the preset checkpoints every 2 rounds: the state after round 2, round 3 not finished
    assert _checkpoint_round(checkpoint) == 2
    kept = [r.round_seconds for r in load_checkpoint(checkpoint, FedClust.name)["state"]["history"]]
    cell = json.loads((checkpoint.parent / "cell.json").read_text())
    assert cell["seconds"] is None and compare.cell_status(checkpoint.parent, cell["args"]) == ("resumable", 2)
    again = subprocess.run(_command(stopped), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{NAME}: resuming after round 2" in again.stdout
    # the second session trained round 3 only, from the checkpoint: no round <= 2 again (its log has
    # one progress line per round it ran), and rounds 1-2 are the first session's, timings and all
    session = (checkpoint.parent.parent / f"{NAME}.after-2.log").read_text()
    assert "(after round 2)" in session
    assert re.findall(r"\bround +(\d+)/3 \|", session) == ["3"], session[-3000:]
    timings = [json.loads(line) for line in (checkpoint.parent / "metrics.jsonl").read_text().splitlines()]
    assert [m["round"] for m in timings] == [1, 2, 3] and [m["round-seconds"] for m in timings[:2]] == kept
    resumed = _metrics(checkpoint.parent)
    straight = _metrics(_straight_in_process(tmp_path / "straight"))
    assert [m["round"] for m in straight] == [1, 2, 3]
    assert resumed == straight
    cell = json.loads((checkpoint.parent / "cell.json").read_text())
    assert cell["resumed-after"] == [2] and cell["seconds"] > 0
    assert compare.cell_status(checkpoint.parent, cell["args"]) == ("finished", None)
    assert not json.loads((checkpoint.parent / "summary.json").read_text()).get("interrupted")


def test_a_cell_started_with_other_flags_or_finished_is_not_resumed(tmp_path):
    folder = tmp_path / "cell"
    folder.mkdir()
    args = ["--strategy", FedClust.name, "--rounds", "200"]
    assert compare.cell_status(folder, args) == ("new", None)
    (folder / "cell.json").write_text(json.dumps({"args": args, "seconds": None}))
    assert compare.cell_status(folder, args) == ("new", None)  # no checkpoint yet
    strategy = _run(FedClust, 1, tmp_path)
    (tmp_path / CHECKPOINT_FILE).rename(folder / CHECKPOINT_FILE)
    assert compare.cell_status(folder, args) == ("resumable", 1)
    assert compare.cell_status(folder, [*args, "--rounds", "20"]) == ("new", None)
    (folder / "summary.json").write_text(json.dumps({"interrupted": True}))
    assert compare.cell_status(folder, args) == ("resumable", 1)
    (folder / "summary.json").write_text(json.dumps({"rounds": 200}))
    (folder / "cell.json").write_text(json.dumps({"args": args, "seconds": 5.0}))
    assert compare.cell_status(folder, args) == ("finished", None)
    assert strategy.clustered


def test_checkpoint_every_is_refused_below_zero_naming_the_parameter(capsys):
    with pytest.raises(SystemExit):
        compare.main(["--preset", "paper", "--checkpoint-every", "-1", "--dry-run"])
    assert "The 'checkpoint-every' parameter of compare must be an int in the range [0, inf). Got -1" in (
        capsys.readouterr().err
    )


# ----------------------------------------------------------------- what the checkpoint holds
def _paper_flags(strategy: type) -> dict[str, Any]:
    """The paper preset's flags of ``strategy`` as run-config overrides, shrunk to cluster in round 1."""
    flags = list(compare.PAPER.strategy_args.get(strategy.name, ()))
    out: dict[str, Any] = {flags[i][2:]: flags[i + 1] for i in range(0, len(flags), 2)}
    if strategy is FLAG:
        out.update({"flag-vectors": int(out["flag-vectors"]), "flag-gradient-epochs": 1, "flag-sweep-rounds": 1})
    return {"strategy": strategy.name, "local-epochs": 1, **out}


def _run(strategy_cls: type, rounds: int, tmp_path: Path | None = None, resume: Path | None = None) -> Any:
    rc = small_run_config(rounds=rounds, **_paper_flags(strategy_cls))
    exp = Experiment.from_run_config(rc)
    strategy = exp.build_strategy()  # as umbel run builds it (FLAG's sweep model included)
    if tmp_path is not None:
        strategy.checkpoint_to(tmp_path / CHECKPOINT_FILE, rounds)
    if resume is not None:
        strategy.resume(load_checkpoint(resume, strategy_cls.name))
    n = rc["num-clients"]
    strategy.start(InProcessGrid(client_app, rc, n), exp.initial_model(), expected_clients=n)
    return strategy


def _same(a: Any, b: Any, where: str) -> None:
    """Deep equality of two state values (arrays, Flower records, generators, containers, objects)."""
    if isinstance(a, ArrayRecord):
        assert isinstance(b, ArrayRecord) and list(a.keys()) == list(b.keys()), where
        for name in a.keys():
            np.testing.assert_array_equal(a[name].numpy(), b[name].numpy(), err_msg=where)
    elif isinstance(a, Array):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=where)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, np.random.Generator):
        assert a.bit_generator.state == b.bit_generator.state, where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert type(a) is type(b), where
        _same(vars(a), vars(b), where)
    else:
        assert a == b or (a != a and b != b), where  # NaN equals NaN here


@pytest.mark.slow
@pytest.mark.parametrize("strategy_cls", [FedClust, FLAG], ids=lambda c: c.name)
def test_the_checkpoint_holds_every_field_a_resumed_round_reads(strategy_cls, tmp_path):
    first = _run(strategy_cls, 2, tmp_path)
    assert first.clustered and len(first.models) >= 1 and first.assignment
    fresh = _run_config_strategy(strategy_cls)
    restore(fresh, load_checkpoint(tmp_path / CHECKPOINT_FILE, strategy_cls.name))
    kept, back = capture(first), capture(fresh)
    assert set(kept) == set(back) <= declared(strategy_cls)
    for name in sorted(kept):
        _same(kept[name], back[name], f"{strategy_cls.name}.{name}")
    if strategy_cls is FLAG:
        assert first.chosen_alpha is not None and first.sweep and first.distance_matrix is not None
    # and a round run from it is the round an uninterrupted run runs
    straight = _run(strategy_cls, 3)
    resumed = _run(strategy_cls, 3, resume=tmp_path / CHECKPOINT_FILE)
    assert resumed.assignment == straight.assignment
    for a, b in zip(resumed.models, straight.models, strict=True):
        for name in a.keys():
            np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-5, atol=1e-6)
    strip = [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in resumed.history]
    assert strip == [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in straight.history]


def _run_config_strategy(strategy_cls: type) -> Any:
    return Experiment.from_run_config(small_run_config(rounds=3, **_paper_flags(strategy_cls))).build_strategy()


def test_max_gb_is_refused_unless_positive_naming_the_parameter(capsys):
    with pytest.raises(SystemExit):
        compare.main(["--preset", "paper", "--max-gb", "0", "--dry-run"])
    assert "The 'max-gb' parameter of compare must be a float in the range (0, inf). Got 0.0 instead." in (
        capsys.readouterr().err
    )
