"""Real deployment on 127.0.0.1: a SuperLink and 4 SuperNodes as processes, ``flwr run`` of umbel.

Two module-scoped deployments (insecure; TLS + SuperNode authentication) are started through
``umbel deploy`` and shared by the tests; every process they start is stopped by PID, with its
children, in the fixture teardown, whatever the outcome. Deployment costs 6-10 s per message
round trip (FLOWER.md 7.1), so the runs are short: digits, 4 clients, 2 rounds.
The fast tests at the end check the command builders, the key and certificate material, and
the per-node overrides of the ClientApp without starting anything.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest
from conftest import small_run_config
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    load_ssh_private_key,
    load_ssh_public_key,
)

from client.task import task_from_context
from server import deploy
from server.cli import PROJECT_ROOT, free_port, to_toml

# FedClust: the clustering round (query.head) is one more real round trip before training.
STRATEGY = {"strategy": "fedclust", "num-clusters": 2}
EXPECTED_CLUSTERS = 2
NUM_NODES = 4
ROUNDS = 2
RUN_TIMEOUT = 900  # seconds for one `flwr run`: ~1.5 min on an idle 2-core box, ~6 min on a loaded one
DEAD_NODE = 3


class Deployment:
    """A SuperLink and SuperNodes on loopback, each a process whose PID is kept."""

    def __init__(self, root: Path, secure: bool) -> None:
        self.root, self.secure = root, secure
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self.cli_home = root / "cli-home"
        self.certs = root / "certs"
        self.keys = root / "keys"

    # ------------------------------------------------------------------ processes
    def start(self) -> None:
        sec = ["--insecure"]
        if self.secure:
            _umbel("certs", "--out", self.certs)
            _umbel("keys", "--out", self.keys, "--count", NUM_NODES)
            sec = ["--certs", self.certs, "--auth"]
        self.spawn("superlink", "superlink", "--host", "127.0.0.1", "--port", self.port,
                   "--database", self.root / "state.db", *sec)
        _wait_for_port(self.port, self.procs["superlink"], self.log("superlink"))
        conn = ["--root-certificates", self.certs / "ca.crt"] if self.secure else ["--insecure"]
        _umbel("connection", "dep", "--address", f"127.0.0.1:{self.port}", "--flwr-home", self.cli_home, *conn)
        if self.secure:
            _umbel("register", "dep", "--keys", self.keys, "--flwr-home", self.cli_home)
        for pid in range(NUM_NODES):
            self.start_node(pid, f"node{pid}", self.keys / f"supernode-{pid}" if self.secure else None)

    def start_node(self, pid: int, name: str, key: Path | None) -> subprocess.Popen:
        sec = ["--insecure"]
        if self.secure:
            sec = ["--root-certificates", self.certs / "ca.crt", "--key", key]
        return self.spawn(name, "supernode", "--superlink", f"127.0.0.1:{self.port}", "--partition-id", pid,
                          "--num-partitions", NUM_NODES, "--port", free_port(), *sec)

    def spawn(self, name: str, *args) -> subprocess.Popen:
        home = self.root / f"{name}-home"
        home.mkdir(parents=True, exist_ok=True)
        env = deploy.deploy_env(home)
        with self.log(name).open("w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "server.cli", "deploy", *map(str, args)],
                                    cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def stop(self, name: str | None = None) -> None:
        """Stop one process (or all) and every child it started, by PID."""
        _kill_trees([self.procs.pop(key).pid for key in ([name] if name else list(self.procs))])

    # ------------------------------------------------------------------ runs
    def submit(self, run_name: str, **overrides) -> subprocess.Popen:
        """Start ``flwr run`` of umbel against this deployment (output in ``<run_name>.log``)."""
        config = {**STRATEGY, "dataset": "digits", "num-clients": NUM_NODES, "groups": 2,
                  "samples-per-label": 20, "seed": 1, "rounds": ROUNDS, "fraction": 1.0, "eval-every": ROUNDS,
                  "lr": 0.05, "local-epochs": 1, "node-wait-timeout": 180.0, "round-timeout": 300.0,
                  "results-dir": str(self.root / "results"), "run-name": run_name, **overrides}
        config_file = self.root / f"{run_name}.toml"
        config_file.write_text(to_toml(config))
        flwr = deploy._executable("flwr")
        with self.log(run_name).open("w") as log:
            proc = subprocess.Popen([flwr, "run", str(PROJECT_ROOT), "dep", "--stream", "--run-config",
                                     str(config_file)], cwd=PROJECT_ROOT, env=deploy.deploy_env(self.cli_home),
                                    stdout=log, stderr=subprocess.STDOUT)
        self.procs[run_name] = proc
        return proc

    def finish(self, run_name: str, proc: subprocess.Popen) -> Path:
        """Wait for the run; return its results folder (the logs are in the failure message)."""
        try:
            proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"flwr run did not finish in {RUN_TIMEOUT} s\n{self.tails(run_name)}")
        self.stop(run_name)
        folder = self.root / "results" / run_name
        assert proc.returncode == 0 and (folder / "summary.json").exists(), self.tails(run_name)
        return folder

    def tails(self, *names: str) -> str:
        # Flower gives a ClientApp 30 s to start, else starts another copy: on an overloaded box
        # these pile up (FLOWER.md 7.1; README "Run on real machines"), so say how many there are.
        apps = 0
        for key, proc in self.procs.items():
            try:
                if key.startswith("node"):
                    apps += sum("flwr-clientapp" in " ".join(c.cmdline()[:2])
                                for c in psutil.Process(proc.pid).children(recursive=True))
            except psutil.Error:
                continue
        parts = [f"load average {os.getloadavg()}, {apps} ClientApp processes running"]
        for name in (*names, "superlink", *(f"node{i}" for i in range(NUM_NODES))):
            text = self.log(name).read_text(errors="replace") if self.log(name).exists() else ""
            parts.append(f"----- {name}.log\n{text[-3000:]}")
        return "\n".join(parts)


def _umbel(*args) -> None:
    proc = subprocess.run([sys.executable, "-m", "server.cli", "deploy", *map(str, args)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the SuperLink exited:\n{log.read_text()[-3000:]}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"the SuperLink did not listen on {port} within {timeout:g} s:\n{log.read_text()[-3000:]}")


def _kill_trees(pids: list[int]) -> None:
    """SIGTERM each process and its descendants, then SIGKILL what is left after 10 s."""
    tree = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree += [*root.children(recursive=True), root]
        except psutil.NoSuchProcess:
            continue
    for proc in tree:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=10)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def _deployment(tmp_path_factory, secure: bool):
    dep = Deployment(tmp_path_factory.mktemp("tls" if secure else "insecure"), secure)
    try:
        dep.start()
        yield dep
    finally:
        dep.stop()


@pytest.fixture(scope="module")
def insecure(tmp_path_factory):
    yield from _deployment(tmp_path_factory, secure=False)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    yield from _deployment(tmp_path_factory, secure=True)


def _metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def _check_results(folder: Path, rounds: int) -> list[dict]:
    lines = _metrics(folder)
    assert [r["round"] for r in lines] == list(range(1, rounds + 1))
    assert all(r["num-clusters"] == EXPECTED_CLUSTERS for r in lines), [r["num-clusters"] for r in lines]
    assert all(sum(r["cluster-sizes"]) == NUM_NODES for r in lines)
    assert all(r["ari"] is not None for r in lines) and lines[-1]["accuracy"] is not None
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["num-clients"] == NUM_NODES and 0.0 <= summary["final-accuracy"] <= 1.0
    return lines


# ---------------------------------------------------------------------- deployment tests
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["insecure", "secure"])
def test_umbel_runs_on_a_real_deployment(mode, request):
    dep: Deployment = request.getfixturevalue(mode)
    run_name = f"dep-{mode}"
    folder = dep.finish(run_name, dep.submit(run_name))
    lines = _check_results(folder, ROUNDS)
    assert all(r["failures"] == 0 and r["train-replies"] == NUM_NODES for r in lines), lines
    out = dep.log(run_name).read_text()
    assert f"{NUM_NODES} clients identified (of {NUM_NODES} nodes)" in out
    link = dep.log("superlink").read_text()
    assert ("https://" if dep.secure else "http://") + f"127.0.0.1:{dep.port}" in link
    if dep.secure:
        assert "SuperNode authentication is disabled" not in link


def _node_status(dep: Deployment) -> dict[str, int]:
    out = subprocess.run([deploy._executable("flwr"), "supernode", "list", "dep", "--format", "json"],
                         env=deploy.deploy_env(dep.cli_home), capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    statuses: dict[str, int] = {}
    for node in json.loads(out.stdout)["nodes"]:
        statuses[node["status"]] = statuses.get(node["status"], 0) + 1
    return statuses


@pytest.mark.slow
def test_an_unregistered_supernode_key_is_refused(secure, tmp_path):
    deadline = time.monotonic() + 180
    while _node_status(secure).get("online", 0) < NUM_NODES:  # the registered keys get in
        assert time.monotonic() < deadline, (_node_status(secure), secure.tails())
        time.sleep(2.0)
    (key,) = deploy.make_keys(tmp_path, ["intruder"])
    node = secure.start_node(0, "intruder", key)
    try:
        code = node.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the unregistered SuperNode kept running:\n{secure.log('intruder').read_text()[-3000:]}")
    log = secure.log("intruder").read_text()
    assert code != 0 and "Failed to activate SuperNode" in log, log[-3000:]
    assert _node_status(secure).get("online", 0) == NUM_NODES


@pytest.mark.slow
def test_a_supernode_killed_mid_run_does_not_stop_the_run(insecure):
    run_name = "dep-kill"
    proc = insecure.submit(run_name)
    metrics = insecure.root / "results" / run_name / "metrics.jsonl"
    deadline = time.monotonic() + RUN_TIMEOUT
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, insecure.tails(run_name)
        time.sleep(1.0)
    insecure.stop(f"node{DEAD_NODE}")  # after round 1: rounds 2.. go to a dead node
    folder = insecure.finish(run_name, proc)
    lines = _check_results(folder, ROUNDS)
    assert lines[0]["failures"] == 0 and lines[0]["train-replies"] == NUM_NODES
    assert all(r["failures"] >= 1 and r["train-replies"] == NUM_NODES - 1 for r in lines[1:]), lines
    out = insecure.log(run_name).read_text()
    assert f"round 2 train: client {DEAD_NODE} failed" in out, out[-4000:]


# ---------------------------------------------------------------------- fast checks
def test_certificates_name_the_hosts_and_chain_to_the_ca(tmp_path):
    paths = deploy.make_certificates(tmp_path, ["link.example.org", "10.0.0.5"])
    ca = x509.load_pem_x509_certificate(paths["ca"].read_bytes())
    cert = x509.load_pem_x509_certificate(paths["cert"].read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", "link.example.org"}
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1", "10.0.0.5"}
    assert paths["key"].stat().st_mode & 0o077 == 0 and paths["ca-key"].stat().st_mode & 0o077 == 0
    with pytest.raises(FileExistsError):
        deploy.make_certificates(tmp_path)
    local = x509.load_pem_x509_certificate(deploy.make_certificates(tmp_path / "l", ["localhost"])["cert"].read_bytes())
    assert local.subject.rfc4514_string() == "CN=localhost"
    with pytest.raises(ValueError, match="'days'"):
        deploy.make_certificates(tmp_path / "x", days=0)


def test_supernode_keys_are_p384_openssh_pairs(tmp_path):
    paths = deploy.make_keys(tmp_path, ["a", "b"])
    for path in paths:
        private = load_ssh_private_key(path.read_bytes(), password=None)
        public = load_ssh_public_key(path.with_name(path.name + ".pub").read_bytes())
        assert private.curve.name == "secp384r1" and private.public_key().public_numbers() == public.public_numbers()
    with pytest.raises(ValueError, match="'names'"):
        deploy.make_keys(tmp_path, ["a", "a"])


def test_commands_carry_security_and_node_config(tmp_path):
    cmd = deploy.superlink_command(host="0.0.0.0", port=9100, database=tmp_path / "s.db", certs=tmp_path, auth=True)
    assert cmd[cmd.index("--ssl-certfile") + 1] == str(tmp_path / "server.pem") and "--enable-supernode-auth" in cmd
    assert "--insecure" in deploy.superlink_command()
    with pytest.raises(ValueError, match="'auth'"):
        deploy.superlink_command(auth=True)
    cmd = deploy.supernode_command(superlink="h:1", partition_id=2, num_partitions=4, data_dir=str(tmp_path),
                                   device="cuda:1", root_certificates=tmp_path / "ca.crt", key=tmp_path / "k")
    assert cmd[cmd.index("--node-config") + 1] == (
        f'partition-id=2 num-partitions=4 data-dir="{tmp_path}" device="cuda:1"')
    assert cmd[cmd.index("--auth-supernode-private-key") + 1] == str(tmp_path / "k")
    with pytest.raises(ValueError, match="'partition-id'"):
        deploy.supernode_command(superlink="h:1", partition_id=4, num_partitions=4)
    with pytest.raises(ValueError, match="'device'"):
        deploy.supernode_command(superlink="h:1", partition_id=0, num_partitions=4, device="gpu")


def test_connection_entries_are_added_without_losing_others(tmp_path):
    deploy.write_connection(tmp_path, "a", "h:1", insecure=True)
    path = deploy.write_connection(tmp_path, "b", "h:2", root_certificates=tmp_path / "ca.crt", default=False)
    config = tomllib.loads(path.read_text())["superlink"]
    assert config["default"] == "a" and config["a"] == {"address": "h:1", "insecure": True}
    assert config["b"]["root-certificates"] == str(tmp_path / "ca.crt")
    with pytest.raises(ValueError, match="exactly one"):
        deploy.write_connection(tmp_path, "c", "h:3")


def test_node_config_overrides_device_and_data_dir(monkeypatch):
    rc = small_run_config(device="cpu")
    assert task_from_context(rc, {"partition-id": 1}).device.type == "cpu"
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ValueError, match="'device'"):
        task_from_context(rc, {"partition-id": 1, "device": "cuda:1"})
    with pytest.raises(ValueError, match="'device'"):
        task_from_context(rc, {"partition-id": 1, "device": "tpu"})
    with pytest.raises(ValueError, match="'data-dir'"):
        task_from_context(rc, {"partition-id": 1, "data-dir": 3})


def test_compose_files_give_each_supernode_its_partition_key_and_gpu():
    yaml = pytest.importorskip("yaml")
    base = yaml.safe_load((PROJECT_ROOT / "deploy" / "compose.yaml").read_text())
    gpu = yaml.safe_load((PROJECT_ROOT / "deploy" / "compose.gpu.yaml").read_text())
    nodes = sorted(name for name in base["services"] if name.startswith("supernode-"))
    assert len(nodes) == NUM_NODES and set(gpu["services"]) == {"superlink", *nodes}
    link = base["services"]["superlink"]
    assert "--enable-supernode-auth" in link["command"] and "--ssl-certfile" in link["command"]
    assert not any("ca.key" in v or v.startswith("./secrets/keys") for v in link["volumes"])
    for i, name in enumerate(nodes):
        service = base["services"][name]
        assert f"partition-id={i} " in service["command"] and "superlink:8000" in service["command"]
        assert f"./secrets/keys/supernode-{i}:/secrets/key:ro" in service["volumes"]
        (device,) = gpu["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["device_ids"] == [str(i)] and device["capabilities"] == ["gpu"]
