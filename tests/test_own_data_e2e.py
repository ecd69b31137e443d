"""End to end: a federation of clients that each read only their own folder, with a user's model.

``umbel export`` writes a 3-group digits federation. A SuperLink (TLS, SuperNode
authentication) and one SuperNode per partition run on 127.0.0.1, each node given only its
own folder through its node config ``data-path``; a sixth node's folder is empty and must fail
alone. FedClust and CFLGT train ``user_models:small_cnn`` (a CNN defined outside umbel) and
are scored against the exported truth file. Then ``umbel run --data-path`` rehearses the same
federation in simulation and must find the same clusters. Every process started here is
stopped by PID with its children.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_deployment import _kill_trees, _wait_for_port

from server import deploy
from server.cli import PROJECT_ROOT, free_port, to_toml

TESTS = Path(__file__).resolve().parent
NUM_CLIENTS = 5  # good partitions; partition NUM_CLIENTS is the node with an empty folder
SEED = 3  # 5 digits clients in 3 true groups (2, 2, 1)
RUN_TIMEOUT = 900
COMMON = {"model": "user_models:small_cnn", "dataset": "digits", "seed": SEED, "fraction": 1.0,
          "lr": 0.05, "local-epochs": 2, "cluster-steps": 10, "eval-every": 100}
RUNS = {
    "fedclust": {"strategy": "fedclust", "num-clusters": 3, "rounds": 1},
    "cflgt": {"strategy": "cflgt", "pretrain-rounds": 2, "rounds": 3},
}


def _env(home: Path) -> dict[str, str]:
    """Flower's quiet environment, a Flower home, and the user's model importable."""
    env = deploy.deploy_env(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH", "")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture(scope="module")
def federation(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("own-data") / "federation"
    out = subprocess.run([sys.executable, "-m", "server.cli", "export", "--out", str(root), "--dataset", "digits",
                          "--num-clients", str(NUM_CLIENTS), "--groups", "3", "--samples-per-label", "20",
                          "--seed", str(SEED)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(set(json.loads((root / "federation.json").read_text())["true-groups"])) == 3
    return root


@pytest.fixture(scope="module")
def deployed(federation, tmp_path_factory) -> dict[str, dict]:
    """Run each strategy of ``RUNS`` on the deployment; return its metrics, assignment and log."""
    work = tmp_path_factory.mktemp("deployment")
    certs, keys = work / "certs", work / "keys"
    deploy.make_certificates(certs)
    names = [f"supernode-{i}" for i in range(NUM_CLIENTS + 1)]
    deploy.make_keys(keys, names)
    empty = work / "empty-folder"
    empty.mkdir()
    port = free_port()
    procs: list[subprocess.Popen] = []

    def spawn(name: str, cmd: list[str], home: Path | None = None) -> subprocess.Popen:
        home = home or work / f"{name}-home"
        home.mkdir(exist_ok=True)
        with (work / f"{name}.log").open("w") as log:
            procs.append(subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=_env(home), stdout=log, stderr=subprocess.STDOUT))
        return procs[-1]

    try:
        link = spawn("superlink", deploy.superlink_command(host="127.0.0.1", port=port, database=work / "state.db",
                                                            certs=certs, auth=True))
        _wait_for_port(port, link, work / "superlink.log")
        cli_home = work / "cli-home"
        deploy.write_connection(cli_home, "dep", f"127.0.0.1:{port}", root_certificates=certs / "ca.crt")
        for cmd in deploy.register_commands(keys, "dep"):
            out = subprocess.run(cmd, env=_env(cli_home), capture_output=True, text=True, timeout=120, check=False)
            assert out.returncode == 0, out.stdout + out.stderr
        for pid, name in enumerate(names):
            folder = federation / f"partition_{pid}" if pid < NUM_CLIENTS else empty
            cmd = deploy.supernode_command(superlink=f"127.0.0.1:{port}", partition_id=pid,
                                           num_partitions=NUM_CLIENTS + 1, port=free_port(),
                                           root_certificates=certs / "ca.crt", key=keys / name)
            at = cmd.index("--node-config") + 1
            cmd[at] += f' data-path="{folder}"'  # this node's own data, nothing else
            spawn(f"node{pid}", cmd)
        results = {}
        for name, overrides in RUNS.items():
            config = {**COMMON, **overrides, "num-clients": NUM_CLIENTS + 1, "num-classes": 10,
                      "input-shape": "1,8,8", "truth-path": str(federation / "federation.json"),
                      "node-wait-timeout": 180.0, "round-timeout": 300.0,
                      "results-dir": str(work / "results"), "run-name": name}
            (work / f"{name}.toml").write_text(to_toml(config))
            run = spawn(f"run-{name}", [deploy._executable("flwr"), "run", str(PROJECT_ROOT), "dep", "--stream",
                                        "--run-config", str(work / f"{name}.toml")], home=cli_home)
            log = work / f"run-{name}.log"
            try:
                run.wait(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"flwr run of {name} did not finish in {RUN_TIMEOUT} s:\n{log.read_text()[-4000:]}")
            results[name] = _results(work / "results" / name, log)
        yield results
    finally:
        _kill_trees([p.pid for p in procs])


def _results(folder: Path, log: Path) -> dict:
    assert (folder / "summary.json").exists(), log.read_text()[-6000:]
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assignments = json.loads((folder / "assignments.json").read_text())
    return {"metrics": metrics, "assignment": assignments["history"][-1]["assignment"],
            "truth": assignments["true-groups"], "log": log.read_text()}


def _same_partition(a: dict[str, int], b: dict[str, int]) -> bool:
    """Whether two assignments group the same clients together (cluster numbers aside)."""
    return a.keys() == b.keys() and all((a[p] == a[q]) == (b[p] == b[q]) for p in a for q in a)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(RUNS))
def test_supernodes_reading_only_their_own_folders_recover_the_true_groups(deployed, strategy):
    result = deployed[strategy]
    assert result["metrics"][-1]["ari"] == 1.0, result["metrics"]
    assert sorted(result["assignment"]) == [str(p) for p in range(NUM_CLIENTS)]
    assert f"{NUM_CLIENTS} clients identified (of {NUM_CLIENTS + 1} nodes)" in result["log"]
    # the node with an empty folder failed alone, with the reason, and the run went on
    assert f"partition-id={NUM_CLIENTS}" in result["log"] and "an empty folder" in result["log"]


@pytest.mark.slow
def test_simulation_with_data_path_finds_the_same_clusters(deployed, federation, tmp_path):
    for name, overrides in RUNS.items():
        flags = [f"--{k}={v}" for k, v in {**COMMON, **overrides}.items()]
        out = subprocess.run([sys.executable, "-m", "server.cli", "run", "--data-path", str(federation),
                              "--truth-path", str(federation / "federation.json"), "--results-dir", str(tmp_path),
                              "--run-name", name, *flags], cwd=PROJECT_ROOT, env=_env(tmp_path / "home"),
                             capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
        assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
        simulated = json.loads((tmp_path / name / "assignments.json").read_text())["history"][-1]["assignment"]
        assert _same_partition(simulated, deployed[name]["assignment"]), (simulated, deployed[name]["assignment"])
