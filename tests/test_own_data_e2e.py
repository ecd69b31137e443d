"""End to end: a federation of clients that each read only their own folder, with a user's model.

``umbel export`` writes a 3-group digits federation. A SuperLink (TLS, SuperNode
authentication) and one SuperNode per partition (``umbel deploy supernode``) run on 127.0.0.1,
each node given only its own folder through its node config ``data-path``; a fifth node's folder
is empty and must fail alone. FedClust trains ``tests.helpers.user_models:small_cnn`` (a CNN defined outside umbel) and
is scored against the exported truth file. Then ``umbel run --data-path`` rehearses the same
federation in simulation and must find the same clusters. One strategy shows that each node reads
its own folder and that the simulation reads the same folders the same way; every strategy's
signals on clients' own folders are covered in process, through the real ClientApp, by
tests/test_strategy_contract.py. Every process started here is stopped by PID with its children.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from server import deploy
from server.cli import PROJECT_ROOT, free_port, to_toml
from tests.helpers.processes import kill_trees, umbel_in_process, wait_for_port

NUM_CLIENTS = 4  # good partitions; partition NUM_CLIENTS is the node with an empty folder
SEED = 3  # 4 digits clients in 3 true groups (2, 1, 1)
RUN_TIMEOUT = 900
COMMON = {
    "model": "tests.helpers.user_models:small_cnn",
    "dataset": "digits",
    "seed": SEED,
    "fraction": 1.0,
    "lr": 0.05,
    "local-epochs": 2,
    "cluster-steps": 10,
    "eval-every": 100,
}
RUNS = {"fedclust": {"strategy": "fedclust", "num-clusters": 3, "rounds": 1}}
SIMULATED = "fedclust"


def _env(home: Path) -> dict[str, str]:
    """Flower's quiet environment, a Flower home, and the user's model importable."""
    env = deploy.deploy_env(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH", "")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture(scope="module")
def work(request) -> Path:
    """A folder of this module's own (pytest's rotation of tmp folders cannot remove it); kept, with
    every process's log, when a test failed or ``UMBEL_KEEP_TEST_WORK`` is set."""
    folder = Path(tempfile.mkdtemp(prefix="umbel-own-data-e2e-"))
    yield folder
    if request.session.testsfailed == 0 and not os.environ.get("UMBEL_KEEP_TEST_WORK"):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def federation(work) -> Path:
    root = work / "federation"
    out = umbel_in_process(
        "export",
        "--out",
        root,
        "--dataset",
        "digits",
        "--num-clients",
        NUM_CLIENTS,
        "--groups",
        3,
        "--samples-per-label",
        20,
        "--seed",
        SEED,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(set(json.loads((root / "federation.json").read_text())["true-groups"])) == 3
    return root


class Deployment:
    """A SuperLink (TLS, node authentication) and one SuperNode per folder on 127.0.0.1."""

    def __init__(self, work: Path, federation: Path) -> None:
        self.work, self.federation = work, federation
        self.procs: list[subprocess.Popen] = []
        self.results: dict[str, dict] = {}
        self.cli_home = work / "cli-home"

    def spawn(self, name: str, cmd: list[str], home: Path | None = None) -> subprocess.Popen:
        home = home or self.work / f"{name}-home"
        home.mkdir(exist_ok=True)
        with (self.work / f"{name}.log").open("w") as log:
            self.procs.append(
                subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=_env(home), stdout=log, stderr=subprocess.STDOUT)
            )
        return self.procs[-1]

    def start(self) -> None:
        certs, keys = self.work / "certs", self.work / "keys"
        deploy.make_certificates(certs)
        names = [f"supernode-{i}" for i in range(NUM_CLIENTS + 1)]
        deploy.make_keys(keys, names)
        empty = self.work / "empty-folder"
        empty.mkdir()
        port, control = free_port(), free_port()
        link = self.spawn(
            "superlink",
            deploy.superlink_command(
                host="127.0.0.1", port=port, certs=certs, control_port=control, database=self.work / "state.db"
            ),
        )
        wait_for_port(port, link, self.work / "superlink.log")
        wait_for_port(control, link, self.work / "superlink.log")
        deploy.write_connection(self.cli_home, "dep", f"127.0.0.1:{control}", root_certificates=certs / "ca.crt")
        for cmd in deploy.register_commands(keys, "dep"):
            out = subprocess.run(cmd, env=_env(self.cli_home), capture_output=True, text=True, timeout=120, check=False)
            assert out.returncode == 0, out.stdout + out.stderr
        for pid, name in enumerate(names):
            folder = self.federation / f"partition_{pid}" if pid < NUM_CLIENTS else empty
            cmd = [
                *(sys.executable, "-m", "server.cli", "deploy", "supernode"),
                *("--superlink", f"127.0.0.1:{port}", "--partition-id", str(pid)),
                *("--num-partitions", str(NUM_CLIENTS + 1), "--port", str(free_port())),
                *("--root-certificates", str(certs / "ca.crt"), "--key", str(keys / name)),
                *("--data-path", str(folder)),  # this node's own data, nothing else
            ]
            self.spawn(f"node{pid}", cmd)

    def run(self, name: str) -> dict:
        """``flwr run`` of ``RUNS[name]`` (once); its metrics, final assignment and log."""
        if name not in self.results:
            config = {
                **COMMON,
                **RUNS[name],
                "num-clients": NUM_CLIENTS + 1,
                "num-classes": 10,
                "input-shape": "1,8,8",
                "truth-path": str(self.federation / "federation.json"),
                "node-wait-timeout": 180.0,
                "round-timeout": 300.0,
                "results-dir": str(self.work / "results"),
                "run-name": name,
                # no delivery round (one more ClientApp process per node, and nothing here reads its files):
                # test_deployment checks delivery; the simulation below writes this user model's files
                "save-models": False,
            }
            (self.work / f"{name}.toml").write_text(to_toml(config))
            proc = self.spawn(
                f"run-{name}",
                [
                    deploy.executable("flwr"),
                    "run",
                    str(PROJECT_ROOT),
                    "dep",
                    "--stream",
                    "--run-config",
                    str(self.work / f"{name}.toml"),
                ],
                home=self.cli_home,
            )
            log = self.work / f"run-{name}.log"
            try:
                proc.wait(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"flwr run of {name} did not finish in {RUN_TIMEOUT} s:\n{log.read_text()[-4000:]}")
            self.results[name] = _results(self.work / "results" / name, log)
        return self.results[name]


@pytest.fixture(scope="module")
def deployment(work, federation):
    dep = Deployment(work, federation)
    try:
        dep.start()
        yield dep
    finally:
        kill_trees([p.pid for p in dep.procs])


def _results(folder: Path, log: Path) -> dict:
    assert (folder / "summary.json").exists(), log.read_text()[-6000:]
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assignments = json.loads((folder / "assignments.json").read_text())
    return {
        "metrics": metrics,
        "assignment": assignments["history"][-1]["assignment"],
        "truth": assignments["true-groups"],
        "log": log.read_text(),
    }


def _same_partition(a: dict[str, int], b: dict[str, int]) -> bool:
    """Whether two assignments group the same clients together (cluster numbers aside)."""
    return a.keys() == b.keys() and all((a[p] == a[q]) == (b[p] == b[q]) for p in a for q in a)


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 300)
@pytest.mark.parametrize("strategy", list(RUNS))
def test_supernodes_reading_only_their_own_folders_recover_the_true_groups(deployment, strategy):
    result = deployment.run(strategy)
    assert result["metrics"][-1]["ari"] == 1.0, result["metrics"]
    assert sorted(result["assignment"]) == [str(p) for p in range(NUM_CLIENTS)]
    assert f"{NUM_CLIENTS} clients identified (of {NUM_CLIENTS + 1} nodes)" in result["log"]
    # the node with an empty folder failed alone, with the reason, and the run went on
    assert f"partition-id={NUM_CLIENTS}" in result["log"] and "an empty folder" in result["log"]


@pytest.mark.slow
@pytest.mark.timeout(2 * RUN_TIMEOUT)
def test_simulation_with_data_path_finds_the_same_clusters(deployment, federation, work):
    out_dir = work / "simulation"
    name = SIMULATED
    deployed = deployment.run(name)["assignment"]
    flags = [f"--{k}={v}" for k, v in {**COMMON, **RUNS[name]}.items()]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "run",
            "--data-path",
            str(federation),
            "--truth-path",
            str(federation / "federation.json"),
            "--results-dir",
            str(out_dir),
            "--run-name",
            name,
            *flags,
        ],
        cwd=PROJECT_ROOT,
        env=_env(out_dir / "home"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    simulated = json.loads((out_dir / name / "assignments.json").read_text())["history"][-1]["assignment"]
    assert _same_partition(simulated, deployed), (simulated, deployed)
