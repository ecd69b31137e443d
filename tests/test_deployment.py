"""Real deployment on 127.0.0.1: a SuperLink and 3 SuperNodes as processes, ``flwr run`` of umbel.

Two module-scoped deployments (insecure; TLS + SuperNode authentication) are started through
``umbel deploy`` and shared by the tests; every process they start is stopped by PID, with its
children, in the fixture teardown, whatever the outcome. Every message a SuperNode receives starts
a ClientApp process (a fork of the node's warm process, client.warm; about 9 CPU seconds cold), so
the runs are few and short (digits, 3 clients, 2-5 rounds):
- the insecure deployment's one run, in which a SuperNode restarts and a second node claims a held
  client id, and which ``umbel deploy wait`` then follows to its exit code (beside a run that fails
  at start-up, submitted with ``umbel deploy run``);
- the secure deployment's kill -9 and resume drill, whose runs also carry the roster drill (a
  registered impostor) and the model delivery, and whose straight reference runs in process.
The other deployment tests only connect (seconds each).
The fast tests at the end check the command builders, the probe and its diagnoses, the
Fleet-only filter, the key and certificate material and the compose files without starting
Flower.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import psutil
import pytest
from flwr.app import Context, RecordDict
from packaging.specifiers import SpecifierSet
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    load_ssh_private_key,
    load_ssh_public_key,
)

from client.app import app as client_app
from client.task import task_from_context
from common.modelstore import read_bundle
from server import deploy
from server.cli import PROJECT_ROOT, free_port, to_toml
from server.deploy.follow import EXIT_COMPLETED, EXIT_FAILED
from server.app import main as server_app_main
from server.models import load_models
from server.superlink import FleetOnly, fleet_paths
from tests.helpers import small_run_config
from server.inprocess import InProcessGrid
from tests.helpers.processes import kill_trees, umbel_in_process, wait_for_port

# FedClust: the clustering round (query.head) is one more real round trip before training.
STRATEGY = {"strategy": "fedclust", "num-clusters": 2}
EXPECTED_CLUSTERS = 2
NUM_NODES = 3
ROUNDS = 5  # node RESTARTED restarts after round 1 and is back by round 4 (~15 s a round; a restart ~30 s)
RUN_TIMEOUT = 900  # seconds for one `flwr run`: ~2 min on an idle 2-core box, ~6 min on a loaded one
RESTARTED = 2
DUPLICATE = "dup"  # a node claiming client 0, which node0 holds (in secure mode: a registered key)
NODE_RETRIES = ["--max-retries", "3", "--max-wait-time", "60"]


class Deployment:
    """A SuperLink and SuperNodes on loopback, each a process whose PID is kept."""

    def __init__(self, root: Path, secure: bool) -> None:
        self.root, self.secure = root, secure
        self.port = free_port()  # the Fleet API: what SuperNodes dial
        self.control_port = free_port()  # the Control and ServerAppIo APIs: the flwr CLI only
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
            _umbel("keys", "--out", self.keys, "--name", DUPLICATE)
            sec = ["--certs", self.certs]
        self.spawn(
            "superlink",
            "superlink",
            "--host",
            "127.0.0.1",
            "--port",
            self.port,
            "--control-port",
            self.control_port,
            "--database",
            self.root / "state.db",
            *sec,
        )
        for port in (self.port, self.control_port):
            wait_for_port(port, self.procs["superlink"], self.log("superlink"))
        conn = ["--root-certificates", self.certs / "ca.crt"] if self.secure else ["--insecure"]
        _umbel("connection", "dep", "--address", f"127.0.0.1:{self.control_port}", "--flwr-home", self.cli_home, *conn)
        if self.secure:
            _umbel("register", "dep", "--keys", self.keys, "--flwr-home", self.cli_home)
        for pid in range(NUM_NODES):
            self.start_node(pid, f"node{pid}", self.keys / f"supernode-{pid}" if self.secure else None)

    def start_node(self, pid: int, name: str, key: Path | None, *, secure: bool | None = None) -> subprocess.Popen:
        """``umbel deploy supernode`` for partition ``pid``; ``secure`` defaults to the SuperLink's mode."""
        sec = ["--insecure"]
        if self.secure if secure is None else secure:
            sec = ["--root-certificates", self.certs / "ca.crt"] + (["--key", key] if key is not None else [])
        return self.spawn(
            name,
            "supernode",
            "--superlink",
            f"127.0.0.1:{self.port}",
            "--partition-id",
            pid,
            "--num-partitions",
            NUM_NODES,
            "--port",
            free_port(),
            "--model-out",
            self.root / f"{name}-model.npz",
            *NODE_RETRIES,
            *sec,
        )

    def spawn(self, name: str, *args) -> subprocess.Popen:
        home = self.root / f"{name}-home"
        home.mkdir(parents=True, exist_ok=True)
        # one OpenMP thread a process, as each simulated client has (test_own_data_e2e's nodes too): 3 nodes'
        # ClientApps and the ServerApp on 2 cores, each with a thread a core, wait on each other's threads
        env = {**deploy.deploy_env(home), "OMP_NUM_THREADS": "1"}
        with self.log(name).open("a") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "server.cli", "deploy", *map(str, args)],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def stop_gracefully(self, name: str) -> None:
        """SIGTERM to the ``umbel deploy`` process alone (as ``docker stop`` or Ctrl-C does), then wait."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            self.stop(name)

    def stop(self, name: str | None = None) -> None:
        """Stop one process (or all) and every child it started, by PID."""
        kill_trees([self.procs.pop(key).pid for key in ([name] if name else list(self.procs))])

    def wait_online(self, name: str) -> None:
        """Return once SuperNode ``name`` has been activated by the SuperLink (its log names its node id)."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while "SuperNode ID:" not in self.log(name).read_text(errors="replace"):
            assert self.procs[name].poll() is None and time.monotonic() < deadline, self.tails(name)
            time.sleep(0.2)

    # ------------------------------------------------------------------ runs
    def submit(self, run_name: str, **overrides) -> subprocess.Popen:
        """Start ``flwr run`` of umbel against this deployment (output in ``<run_name>.log``)."""
        config = self.config(run_name, **overrides)
        config_file = self.root / f"{run_name}.toml"
        config_file.write_text(to_toml(config))
        flwr = deploy.executable("flwr")
        with self.log(run_name).open("w") as log:
            proc = subprocess.Popen(
                [flwr, "run", str(PROJECT_ROOT), "dep", "--stream", "--run-config", str(config_file)],
                cwd=PROJECT_ROOT,
                env=deploy.deploy_env(self.cli_home),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs[run_name] = proc
        return proc

    def config(self, run_name: str, **overrides) -> dict:
        """The run-config of ``submit(run_name, **overrides)``."""
        return {
            **STRATEGY,
            "dataset": "digits",
            "num-clients": NUM_NODES,
            "groups": 2,
            "samples-per-label": 20,
            "seed": 1,
            "rounds": ROUNDS,
            "fraction": 1.0,
            "eval-every": ROUNDS,
            "lr": 0.05,
            "local-epochs": 1,
            "node-wait-timeout": 180.0,
            "round-timeout": 300.0,
            "results-dir": str(self.root / "results"),
            "run-name": run_name,
            **overrides,
        }

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
        # these pile up (README "Run on real machines"), so say how many there are.
        apps = 0
        for key, proc in self.procs.items():
            try:
                if key.startswith("node"):
                    apps += sum(
                        "flwr-clientapp" in " ".join(c.cmdline()[:2])
                        for c in psutil.Process(proc.pid).children(recursive=True)
                    )
            except psutil.Error:
                continue
        parts = [f"load average {os.getloadavg()}, {apps} ClientApp processes running"]
        for name in (*names, "superlink", *(f"node{i}" for i in range(NUM_NODES))):
            text = self.log(name).read_text(errors="replace") if self.log(name).exists() else ""
            parts.append(f"----- {name}.log\n{text[-3000:]}")
        return "\n".join(parts)


def _umbel(*args) -> None:
    proc = umbel_in_process("deploy", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


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


def _check_results(folder: Path, rounds: int) -> tuple[list[dict], dict]:
    lines = _metrics(folder)
    assert [r["round"] for r in lines] == list(range(1, rounds + 1))
    assert all(r["num-clusters"] == EXPECTED_CLUSTERS for r in lines), [r["num-clusters"] for r in lines]
    assert all(sum(r["cluster-sizes"]) == NUM_NODES for r in lines)
    assert all(r["ari"] is not None for r in lines) and lines[-1]["accuracy"] is not None
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["num-clients"] == NUM_NODES and 0.0 <= summary["final-accuracy"] <= 1.0
    return lines, summary


def _wait_for_round(dep: Deployment, run_name: str, proc: subprocess.Popen) -> None:
    """Return once the run has recorded a round (its first line of metrics.jsonl)."""
    metrics = dep.root / "results" / run_name / "metrics.jsonl"
    deadline = time.monotonic() + RUN_TIMEOUT
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, dep.tails(run_name)
        time.sleep(0.2)


def _umbel_node(dep: Deployment, name: str, *args) -> tuple[int, str]:
    """Run ``umbel deploy supernode`` (in this process; Flower's SuperNode is its child) to its end;
    its exit code and output."""
    home = dep.root / f"{name}-home"
    home.mkdir(parents=True, exist_ok=True)
    out = umbel_in_process(
        "deploy",
        "supernode",
        "--superlink",
        f"127.0.0.1:{dep.port}",
        "--num-partitions",
        NUM_NODES,
        "--port",
        free_port(),
        *NODE_RETRIES,
        *args,
        env=deploy.deploy_env(home),
    )
    return out.returncode, out.stdout + out.stderr


# ---------------------------------------------------------------------- deployment tests
def _check_delivery(dep: Deployment, folder: Path) -> None:
    """Each SuperNode's ``model-out`` holds exactly the server's model of its cluster; the impostor's none."""
    trained = load_models(folder)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["delivery"]["written"] == list(range(NUM_NODES)), summary["delivery"]
    for pid in range(NUM_NODES):
        arrays, meta = read_bundle(dep.root / f"node{pid}-model.npz")
        k = trained.assignment[pid]
        assert meta["cluster-id"] == k
        for name, tensor in trained.models[k].state_dict().items():
            np.testing.assert_array_equal(arrays[name], tensor.numpy())
    assert not (dep.root / f"{DUPLICATE}-model.npz").exists()


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 300)  # the run (RUN_TIMEOUT at most), then the follow checks' short runs
def test_a_run_takes_back_a_restarted_node_and_refuses_a_duplicate_client_id(insecure):
    """The insecure deployment's full run: node RESTARTED restarts after round 1 (with a new node id, as
    nothing ties it to its former one) and a second node claims client 0, which node0 holds."""
    dep: Deployment = insecure
    run_name = "dep-insecure"
    proc = dep.submit(run_name)
    _wait_for_round(dep, run_name, proc)
    dep.stop_gracefully(f"node{RESTARTED}")
    dep.start_node(RESTARTED, f"node{RESTARTED}", None)
    dep.start_node(0, DUPLICATE, None)
    try:
        folder = dep.finish(run_name, proc)
    finally:
        dep.stop_gracefully(DUPLICATE)
    lines, summary = _check_results(folder, ROUNDS)
    out = dep.log(run_name).read_text()
    assert f"{NUM_NODES} clients identified (of {NUM_NODES} nodes)" in out
    assert f"clients rejoined, with their cluster state: [{RESTARTED}]" in out, out[-4000:]
    assert "refused: it claims client 0, but client 0 is held by node" in out, out[-4000:]
    assert lines[-1]["train-replies"] == NUM_NODES and lines[-1]["eval-clients"] == NUM_NODES, lines
    assert any(r["clients-rejoined"] == [RESTARTED] for r in lines), lines
    assert summary["coverage"]["final-accuracy"] == f"over {NUM_NODES} of {NUM_NODES} clients"
    _check_delivery(dep, folder)
    assert f"http://127.0.0.1:{dep.port}" in dep.log("superlink").read_text()
    for node in ("node0", "node1"):  # not restarted: client.warm's server listened, then forked this node's ClientApps
        assert "umbel: warm ClientApp processes (" in dep.log(node).read_text()
        assert dep.log(node).read_text().count("umbel: ClientApp forked warm (pid ") >= ROUNDS, dep.tails(run_name)
    _check_follow(dep, int(out.split("Successfully started run ")[1].split()[0]))


def _check_follow(dep: Deployment, finished: int) -> None:
    """``umbel deploy wait`` on the finished run exits 0; ``umbel deploy run`` of a run that fails at
    start-up (a missing ``resume-from`` file) exits 1 with the run's own log saying why; an unknown run 2."""

    def umbel_deploy(*args) -> subprocess.CompletedProcess:
        return umbel_in_process("deploy", *args, "--flwr-home", dep.cli_home)

    done = umbel_deploy("wait", finished, "dep")
    assert done.returncode == EXIT_COMPLETED, done.stdout + done.stderr
    assert "finished:completed" in done.stdout and "finished and trained" in done.stdout
    missing = umbel_deploy("wait", finished + 12345, "dep")
    assert missing.returncode == 2 and "error" in missing.stderr, missing.stdout + missing.stderr
    bad = dep.root / "bad.toml"
    bad.write_text(to_toml(dep.config("bad", **{"resume-from": "/nope.npz"})))
    failed = umbel_deploy("run", "dep", "--app", PROJECT_ROOT, "--poll", 2, "--timeout", 600, "--run-config", bad)
    assert failed.returncode == EXIT_FAILED, failed.stdout + failed.stderr
    assert "ended finished:failed; its last" in failed.stderr and "/nope.npz" in failed.stderr, failed.stderr


def _flwr(dep: Deployment, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [deploy.executable("flwr"), *map(str, args)],
        env=deploy.deploy_env(dep.cli_home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _node_status(dep: Deployment) -> dict[str, int]:
    out = _flwr(dep, "supernode", "list", "dep", "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    statuses: dict[str, int] = {}
    for node in json.loads(out.stdout)["nodes"]:
        statuses[node["status"]] = statuses.get(node["status"], 0) + 1
    return statuses


@pytest.mark.slow
def test_a_client_host_with_only_ca_crt_cannot_register_or_control_through_the_exposed_port(secure, tmp_path):
    registered = sum(_node_status(secure).values())
    _umbel(
        "connection",
        "exposed",
        "--address",
        f"127.0.0.1:{secure.port}",
        "--flwr-home",
        secure.cli_home,
        "--root-certificates",
        secure.certs / "ca.crt",
        "--no-default",
    )
    (key,) = deploy.make_keys(tmp_path, ["intruder"])
    for args in (
        ["supernode", "register", f"{key}.pub", "exposed"],
        ["ls", "exposed"],
        ["supernode", "list", "exposed"],
    ):
        out = _flwr(secure, *args)
        assert out.returncode != 0 and "only the Fleet API" in out.stdout + out.stderr, (args, out.stdout, out.stderr)
    assert sum(_node_status(secure).values()) == registered  # nothing was registered
    code, log = _umbel_node(secure, "keyless", "--partition-id", 1, "--root-certificates", secure.certs / "ca.crt")
    assert code == deploy.EXIT_REFUSED and "admits only registered SuperNode keys" in log, log[-3000:]


@pytest.mark.slow
def test_an_unregistered_supernode_key_is_refused(secure, tmp_path):
    deadline = time.monotonic() + 180
    while _node_status(secure).get("online", 0) < NUM_NODES:  # the registered keys get in
        assert time.monotonic() < deadline, (_node_status(secure), secure.tails())
        time.sleep(2.0)
    before = _node_status(secure)
    (key,) = deploy.make_keys(tmp_path, ["intruder"])
    code, log = _umbel_node(
        secure,
        "intruder",
        "--partition-id",
        0,
        "--root-certificates",
        secure.certs / "ca.crt",
        "--key",
        key,
        "--max-retries",
        1,
    )
    assert code == deploy.EXIT_REFUSED and "Failed to activate SuperNode" in log, log[-3000:]
    assert "did not activate this node's key" in log and "Refused 2 times" in log
    after = _node_status(secure)
    assert sum(after.values()) == sum(before.values()) and after.get("online", 0) <= before["online"]


@pytest.mark.slow
def test_a_node_with_the_wrong_transport_is_told_why(insecure, secure):
    code, log = _umbel_node(secure, "plain-to-tls", "--partition-id", 1, "--insecure")
    assert code == deploy.EXIT_TLS and "it speaks TLS" in log, log[-3000:]
    code, log = _umbel_node(
        insecure, "tls-to-plain", "--partition-id", 1, "--root-certificates", secure.certs / "ca.crt"
    )
    assert code == deploy.EXIT_TLS and "does not speak TLS" in log, log[-3000:]


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
    cmd = deploy.superlink_command(host="0.0.0.0", port=9100, database=tmp_path / "s.db", certs=tmp_path)
    flower = cmd[cmd.index("--") + 1 :]
    assert cmd[cmd.index("--fleet-host") + 1] == "0.0.0.0" and cmd[cmd.index("--fleet-port") + 1] == "9100"
    assert flower[flower.index("--host") + 1] == "127.0.0.1" and flower[flower.index("--port") + 1] == "9093"
    assert flower[flower.index("--ssl-certfile") + 1] == str(tmp_path / "server.pem")
    assert "--enable-supernode-auth" in flower  # authentication comes with TLS unless refused by name
    assert "--enable-supernode-auth" not in deploy.superlink_command(certs=tmp_path, auth=False)
    assert "--insecure" in deploy.superlink_command(insecure=True)
    with pytest.raises(ValueError, match="'certs'"):
        deploy.superlink_command(insecure=False)
    with pytest.raises(ValueError, match="'auth'"):
        deploy.superlink_command(insecure=True, auth=True)
    with pytest.raises(ValueError, match="'control_port'"):
        deploy.superlink_command(certs=tmp_path, port=9093)
    cmd = deploy.supernode_command(
        superlink="h:1",
        partition_id=2,
        num_partitions=4,
        data_dir=str(tmp_path),
        device="cuda:1",
        root_certificates=tmp_path / "ca.crt",
        key=tmp_path / "k",
        max_retries=3,
        max_wait_time=60.0,
    )
    assert cmd[cmd.index("--node-config") + 1] == (
        f'partition-id=2 num-partitions=4 data-dir="{tmp_path}" device="cuda:1"'
    )
    assert cmd[cmd.index("--auth-supernode-private-key") + 1] == str(tmp_path / "k")
    assert cmd[cmd.index("--max-retries") + 1] == "3" and cmd[cmd.index("--max-wait-time") + 1] == "60"
    with pytest.raises(ValueError, match="'partition-id'"):
        deploy.supernode_command(superlink="h:1", partition_id=4, num_partitions=4)
    with pytest.raises(ValueError, match="'device'"):
        deploy.supernode_command(superlink="h:1", partition_id=0, num_partitions=4, device="gpu")
    with pytest.raises(ValueError, match="'max-retries'"):
        deploy.supernode_command(superlink="h:1", partition_id=0, num_partitions=4, max_retries=-1)


def _cli(*args) -> subprocess.CompletedProcess:
    return umbel_in_process("deploy", *args)


def test_superlink_cli_is_secure_unless_told_and_says_what_insecure_means(tmp_path, monkeypatch):
    def execve(*args):  # in this process, a SuperLink started by mistake would replace pytest
        raise AssertionError(f"the SuperLink was started: {args[1]}")

    monkeypatch.setattr(os, "execve", execve)
    out = _cli("superlink", "--certs", tmp_path / "none", "--dry-run")
    assert out.returncode == 0 and "--enable-supernode-auth" in out.stdout and "127.0.0.1:8000" in out.stdout
    out = _cli("superlink", "--certs", tmp_path / "none")  # no certificates: refused before starting
    assert out.returncode == 2 and "umbel deploy certs" in out.stderr and "--insecure" in out.stderr
    out = _cli("superlink", "--insecure", "--dry-run")
    assert out.returncode == 0 and "INSECURE" in out.stderr and "claim a client id" in out.stderr
    out = _cli("superlink", "--tls-without-auth", "--dry-run", "--certs", tmp_path)
    assert "--enable-supernode-auth" not in out.stdout and "WITHOUT SUPERNODE AUTHENTICATION" in out.stderr
    out = _cli("superlink", "--insecure", "--tls-without-auth", "--dry-run")
    assert out.returncode == 2


def test_the_exposed_address_passes_only_exact_fleet_paths():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    from starlette.testclient import TestClient

    client = TestClient(FleetOnly(app))
    assert "/v1/fleet/pull-messages" in fleet_paths() and "/v1/fleet/register-node" in fleet_paths()
    assert client.post("/v1/fleet/pull-messages").status_code == 200 and client.get("/health").status_code == 200
    for path in (
        "/v1/control/list-runs",
        "/v1/control/register-node",
        "/v1/runtime/get-nodes",
        "/docs",
        "/openapi.json",
        "/v1/fleet/",
        "/v1/fleet/pull-messages/x",
        "/V1/FLEET/pull-messages",
    ):
        response = client.post(path)
        assert response.status_code == 404 and "only the Fleet API" in response.text, path
    assert seen == ["/v1/fleet/pull-messages", "/health"]
    sent = []

    async def receive():
        return {"type": "http.request"}

    async def send(message):
        sent.append(message)

    import asyncio

    asyncio.run(FleetOnly(app)({"type": "http", "path": "/v1/fleet/../control/list-runs"}, receive, send))
    asyncio.run(FleetOnly(app)({"type": "websocket", "path": "/v1/fleet/pull-messages"}, receive, send))
    assert sent[0]["status"] == 404 and sent[-1] == {"type": "websocket.close", "code": 1008}
    assert seen == ["/v1/fleet/pull-messages", "/health"]


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _serve(tls_dir: Path | None) -> tuple[http.server.HTTPServer, int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    if tls_dir is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls_dir / "server.pem", tls_dir / "server.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def test_the_probe_names_each_connection_problem(tmp_path):
    certs = deploy.make_certificates(tmp_path / "c")
    other = deploy.make_certificates(tmp_path / "other")
    tls, tls_port = _serve(tmp_path / "c")
    plain, plain_port = _serve(None)
    try:
        assert deploy.probe_superlink(f"127.0.0.1:{tls_port}", certs["ca"]) is None
        assert deploy.probe_superlink(f"127.0.0.1:{plain_port}", None) is None
        code, why = deploy.probe_superlink(f"127.0.0.1:{tls_port}", None)
        assert code == deploy.EXIT_TLS and "it speaks TLS" in why
        code, why = deploy.probe_superlink(f"127.0.0.1:{plain_port}", certs["ca"])
        assert code == deploy.EXIT_TLS and "does not speak TLS" in why
        code, why = deploy.probe_superlink(f"127.0.0.1:{tls_port}", other["ca"])
        assert code == deploy.EXIT_TLS and "does not verify" in why
    finally:
        tls.shutdown()
        plain.shutdown()
    closed = free_port()
    naps = []
    code, why = deploy.wait_for_superlink(
        f"127.0.0.1:{closed}", None, max_retries=3, max_wait_time=100, sleep=naps.append
    )
    assert code == deploy.EXIT_UNREACHABLE and "Gave up after 3 retries" in why and naps == [1.0, 2.0, 4.0]


def test_a_refused_activation_is_retried_within_the_bounds_then_explained(tmp_path, capsys):
    refused = [
        sys.executable,
        "-c",
        ("print('Exit Code: 305'); print('[code: 2004] Failed to activate SuperNode.'); raise SystemExit(1)"),
    ]
    naps = []
    code = deploy.run_supernode(refused, os.environ, max_retries=2, max_wait_time=100, sleep=naps.append)
    err = capsys.readouterr().err
    assert code == deploy.EXIT_REFUSED and naps == [1.0, 2.0] and "Refused 3 times" in err
    assert err.count("retrying in") == 2 and "umbel deploy register" in err
    other = [sys.executable, "-c", "print('Exit Code: 999'); raise SystemExit(1)"]
    assert deploy.run_supernode(other, os.environ, max_retries=5, max_wait_time=100, sleep=naps.append) == 1
    assert naps == [1.0, 2.0]  # only a refused activation is retried
    fine = [sys.executable, "-c", "print('bye')"]
    assert deploy.run_supernode(fine, os.environ, max_retries=5, max_wait_time=100) == deploy.EXIT_OK


def test_flower_refusals_are_explained_with_their_own_exit_code():
    # the lines Flower 1.41 logs (seen in this repository's deployment tests)
    unregistered = (
        "ERROR :     Exit Code: 305\nFailed to initialize the connection to the SuperLink.\n"
        "[code: 2004] Failed to activate SuperNode.\n"
    )
    keyless = "Exit Code: 305\n[code: 2001] SuperNode authentication is enabled. All SuperNodes must be registered"
    assert deploy.diagnose_flower_log(unregistered)[0] == deploy.EXIT_REFUSED
    assert "--key" in deploy.diagnose_flower_log(keyless)[1]
    assert deploy.diagnose_flower_log("WARNING : Giving up reconnection after 60 s")[0] == deploy.EXIT_UNREACHABLE
    assert deploy.diagnose_flower_log("INFO : all fine") is None
    assert len(set(deploy.EXIT_CODES)) == 6 and deploy.EXIT_OK == 0


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


def test_compose_files_give_each_supernode_its_partition_key_and_gpu(tmp_path):
    yaml = pytest.importorskip("yaml")
    committed = {name: (PROJECT_ROOT / "deploy" / name).read_text() for name in ("compose.yaml", "compose.gpu.yaml")}
    deploy.write_compose(tmp_path, 4, gpus=1)
    for name, text in committed.items():  # the files in deploy/ are the generator's output, for 4 nodes
        assert (tmp_path / name).read_text() == text, f"regenerate deploy/{name}: umbel deploy compose --nodes 4"
    deploy.write_compose(tmp_path, 3, gpus=2, fleet_port=8100)
    base = yaml.safe_load((tmp_path / "compose.yaml").read_text())
    gpu = yaml.safe_load((tmp_path / "compose.gpu.yaml").read_text())
    nodes = sorted(name for name in base["services"] if name.startswith("supernode-"))
    assert nodes == ["supernode-0", "supernode-1", "supernode-2"] and set(gpu["services"]) == {"superlink", *nodes}
    link = base["services"]["superlink"]
    assert link["ports"] == ["8100:8100"]  # the Fleet port alone is published
    assert link["command"][link["command"].index("--control-port") + 1] == "9093"
    assert "--insecure" not in link["command"] and "--tls-without-auth" not in link["command"]
    assert not any("ca.key" in v or (v.startswith("./secrets/keys") and ".pub:" not in v) for v in link["volumes"])
    assert "healthcheck" in link and "9093/health" in " ".join(link["healthcheck"]["test"])
    for i, name in enumerate(nodes):
        service = base["services"][name]
        cmd = service["command"]
        assert cmd[cmd.index("--partition-id") + 1] == str(i) and cmd[cmd.index("--num-partitions") + 1] == "3"
        assert cmd[cmd.index("--superlink") + 1] == "superlink:8100" and "--max-retries" in cmd
        assert service["volumes"][:2] == [
            "./secrets/certs/ca.crt:/secrets/ca.crt:ro",
            f"./secrets/keys/supernode-{i}:/secrets/key:ro",
        ]
        assert "ports" not in service and "healthcheck" in service
        (device,) = gpu["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["device_ids"] == [str(i % 2)] and device["capabilities"] == ["gpu"]
    one = deploy.gpu_override(5, gpus=1)  # one GPU: every SuperNode shares GPU 0
    assert {
        s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"][0]
        for n, s in one["services"].items()
        if n != "superlink"
    } == {"0"}


def test_image_runs_as_a_user_and_the_build_context_holds_no_secrets():
    dockerfile = (PROJECT_ROOT / "deploy" / "Dockerfile").read_text().splitlines()
    froms = [line for line in dockerfile if line.startswith("FROM ")]
    assert len(froms) == 1 and ":3.11.7-slim-bookworm" in froms[0]  # an exact tag, not a floating one
    users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any("-c constraints.txt" in line for line in dockerfile)  # the exact set CI tests
    pins = [
        line
        for line in (PROJECT_ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert all("==" in line for line in pins)
    flower = _pinned_flower(pins)
    assert flower in SpecifierSet(_required_flower()), f"constraints.txt pins flwr {flower} outside pyproject's range"
    ignore = [
        line.strip()
        for line in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"  # everything out, then an allow-list
    allowed = [line[1:] for line in ignore if line.startswith("!")]
    assert not any(
        a.startswith(("deploy/secrets", "results", "data", ".git")) or a in ("deploy/", "deploy") for a in allowed
    ), allowed


def _pinned_flower(pins: list[str]) -> str:
    (version,) = [line.split("==", 1)[1] for line in pins if line.startswith("flwr==")]
    return version


def _required_flower() -> str:
    with (PROJECT_ROOT / "pyproject.toml").open("rb") as fh:
        dependencies = tomllib.load(fh)["project"]["dependencies"]
    (spec,) = [d.split("]", 1)[1] for d in dependencies if d.startswith("flwr[")]
    return spec


def _serverapps(dep: Deployment) -> list[psutil.Process]:
    """The ServerApp processes the SuperLink's SuperExec has started."""
    found = []
    for proc in psutil.Process(dep.procs["superlink"].pid).children(recursive=True):
        try:
            if any("flwr-serverapp" in part for part in proc.cmdline()[:2]):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _straight_in_process(dep: Deployment, run_name: str, **overrides) -> Path:
    """The same run as ``dep.submit(run_name, **overrides)``, without a kill, in this process: umbel's
    ServerApp and ClientApp exchanging real Flower messages without the transport (no roster: no keys)."""
    rc = dep.config(run_name, **{**overrides, "roster-path": ""})
    server_app_main(InProcessGrid(client_app, rc, NUM_NODES), Context(0, 0, {}, RecordDict(), rc))
    return dep.root / "results" / run_name


@pytest.mark.slow
@pytest.mark.timeout(2 * RUN_TIMEOUT)
def test_a_run_killed_after_a_checkpoint_resumes_to_the_straight_runs_models(secure):
    """The TLS + SuperNode authentication deployment's runs, each with the roster `umbel deploy register`
    wrote and a registered impostor claiming partition 0 (issue 33): the impostor is refused by key and
    the genuine node trains as client 0. kill -9 of the ServerApp after the round-1 checkpoint, then
    resume-from: the same cluster models, assignment and accuracy as the same run without the kill (run
    in process: the deployment's clients compute exactly what umbel's ClientApp computes there); each
    SuperNode ends holding its cluster's model."""
    dep = secure
    roster = dep.keys / "roster.json"
    assert roster.is_file()  # written by `umbel deploy register`
    short = {"rounds": 2, "eval-every": 2, "roster-path": str(roster)}
    dep.start_node(0, DUPLICATE, dep.keys / DUPLICATE)
    try:
        dep.wait_online(DUPLICATE)  # else the killed run may ask for identities before the impostor is there
        killed = dep.submit("ckpt-killed", **short, **{"checkpoint-every": 1})
        checkpoint = dep.root / "results" / "ckpt-killed" / "checkpoint.npz"
        deadline = time.monotonic() + RUN_TIMEOUT
        while not checkpoint.exists():
            assert killed.poll() is None and time.monotonic() < deadline, dep.tails("ckpt-killed")
            time.sleep(0.1)
        apps = _serverapps(dep)
        assert apps, dep.tails("ckpt-killed")
        for app in apps:
            app.send_signal(signal.SIGKILL)
        dep.stop("ckpt-killed")
        saved = checkpoint.read_bytes()
        resumed_run = dep.submit("ckpt-resumed", **short, **{"resume-from": str(checkpoint)})
        straight_folder = _straight_in_process(dep, "ckpt-straight", **short)
        folder = dep.finish("ckpt-resumed", resumed_run)
    finally:
        dep.stop_gracefully(DUPLICATE)
    for run in ("ckpt-killed", "ckpt-resumed"):
        out = dep.log(run).read_text()
        assert "it claims client 0, but the roster binds client 0 to key SHA256:" in out, out[-4000:]
        assert f"{NUM_NODES} clients identified" in out
    lines = _metrics(folder)
    assert lines[-1]["train-replies"] == NUM_NODES and lines[-1]["eval-clients"] == NUM_NODES, lines
    assert "resuming from" in dep.log("ckpt-resumed").read_text()
    # round 1 comes from the checkpoint, timings and all: a resume that ran round 1 again would differ
    assert lines[0]["round-seconds"] == _metrics(dep.root / "results" / "ckpt-killed")[0]["round-seconds"]
    assert checkpoint.read_bytes() == saved  # the resumed run wrote its own folder, not the old one
    straight, resumed = load_models(straight_folder), load_models(folder)
    assert resumed.assignment == straight.assignment and resumed.models.keys() == straight.models.keys()
    for k, model in straight.models.items():
        for name, tensor in model.state_dict().items():
            np.testing.assert_allclose(resumed.models[k].state_dict()[name].numpy(), tensor.numpy(), atol=1e-6)
    finals = [json.loads((f / "summary.json").read_text())["final-accuracy"] for f in (straight_folder, folder)]
    assert finals[0] == pytest.approx(finals[1], abs=1e-6)
    _check_delivery(dep, folder)
    link = dep.log("superlink").read_text()
    assert f"https://127.0.0.1:{dep.port}" in link and "SuperNode authentication is disabled" not in link
