"""Warm ClientApp processes (client.warm): what a fork is given, what the launcher returns, and the fallback."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from client import warm
from server.cli import PROJECT_ROOT
from server.deploy import shared
from server.deploy.warm import warm_clientapps

PROBE = "tests.helpers.warm_probe:main"


def _cold(tmp_path: Path) -> str:
    """A stand-in for Flower's own command: says it ran cold, exits 7."""
    path = tmp_path / "cold" / warm.COMMAND
    path.parent.mkdir(exist_ok=True)
    path.write_text('#!/bin/sh\necho COLD "$@"\nexit 7\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def server(tmp_path):
    """A warm server whose forks run the probe; yields (launcher, env)."""
    fallback = _cold(tmp_path)
    launcher = warm.write_launcher(tmp_path / "bin", fallback)
    sock = tmp_path / "s.sock"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), warm.SOCKET_ENV: str(sock)}
    proc = subprocess.Popen(warm.server_command(sock, fallback, PROBE), env=env)
    deadline = time.monotonic() + 120
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    yield launcher, env
    proc.terminate()
    proc.wait(timeout=30)


def _seen(out: str) -> dict:
    return json.loads(out.splitlines()[0])


def test_without_a_server_the_launcher_runs_flowers_own_command(tmp_path):
    launcher = warm.write_launcher(tmp_path / "bin", _cold(tmp_path))
    env = {**os.environ, warm.SOCKET_ENV: str(tmp_path / "nobody.sock")}
    out = subprocess.run([launcher, "--token", "t"], env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (7, "COLD --token t\n")


def test_a_fork_gets_the_launchers_arguments_environment_folder_and_streams_and_returns_its_exit_code(server, tmp_path):
    launcher, env = server
    folders = [tmp_path / "a", tmp_path / "b"]
    procs = []
    for i, folder in enumerate(folders):  # two at once, as two messages
        folder.mkdir()
        procs.append(
            subprocess.Popen(
                [launcher, str(3 + i)],
                cwd=folder,
                env={**env, "WARM_PROBE": f"only the launcher's {i}"},  # not in the server's environment
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    draws = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=60)
        seen = _seen(out)
        assert proc.returncode == 3 + i, (out, err)
        assert seen["argv"] == [str(launcher), str(3 + i)] and seen["cwd"] == str(folders[i])
        assert seen["probe"] == f"only the launcher's {i}" and seen["preloaded"] is True
        assert seen["umbel"] == []  # umbel's own modules come from the run's FAB, not from the server
        assert seen["pid"] != proc.pid and "COLD" not in out
        assert err == "probe stderr\n"
        draws.append(seen["draw"])
    assert draws[0] != draws[1]  # numpy's global random state reseeded in each fork, as in a cold process


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_launcher_ends_its_fork_and_the_launcher_says_so(server, sig):
    launcher, env = server
    proc = subprocess.Popen([launcher, "sleep"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    fork = _seen(proc.stdout.readline())["pid"]
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 128 + sig  # SIGINT: Python's KeyboardInterrupt, as a cold process
    deadline = time.monotonic() + 10
    while Path(f"/proc/{fork}").exists() and "Z" not in Path(f"/proc/{fork}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the fork outlived SIGTERM"
        time.sleep(0.05)


def test_a_malformed_request_costs_only_itself(server):
    launcher, env = server
    for junk in (b"", b"\x00\x00\x00\x05{}", b"no streams with this"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(env[warm.SOCKET_ENV])
            conn.sendall(junk)
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(30)
            try:
                answer = conn.recv(4)
            except ConnectionResetError:  # closed with the junk unread
                answer = b""
            assert answer == b""  # no pid: nothing ran
    out = subprocess.run([launcher, "0"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and _seen(out.stdout)["preloaded"] is True


def _servers(sock: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if str(sock) in (p.info["cmdline"] or [])]


def test_the_supernodes_environment_puts_the_launcher_first_in_a_private_folder_removed_after():
    base = {**os.environ, "PATH": "/usr/bin"}
    with warm_clientapps(base) as env:
        sock = Path(env[warm.SOCKET_ENV])
        assert len(_servers(sock)) == 1
        first = env["PATH"].split(os.pathsep)
        assert first[0] == str(sock.parent / "bin") and first[-1] == "/usr/bin"
        assert first[1] == str(shared.flower_scripts())
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        launcher = sock.parent / "bin" / warm.COMMAND
        assert launcher.read_text().startswith(f"#!{sys.executable}\n")
        assert f"{shared.executable(warm.COMMAND)!r}" in launcher.read_text()
    assert not sock.parent.exists() and not _servers(sock)


def test_umbel_deploy_supernode_forks_warm_clientapps_unless_told_cold(monkeypatch):
    from server import cli
    from server.deploy import supernode

    seen: list[dict] = []
    monkeypatch.setattr(supernode, "wait_for_superlink", lambda *a, **k: None)
    monkeypatch.setattr(supernode, "run_supernode", lambda cmd, env, **k: seen.append(dict(env)) or 0)
    node = ["deploy", "supernode", "--superlink", "127.0.0.1:9", "--partition-id", "0", "--num-partitions", "2"]
    assert cli.main([*node, "--insecure"]) == 0
    assert cli.main([*node, "--insecure", "--cold-clientapps"]) == 0
    warm_env, cold_env = seen
    assert Path(warm_env[warm.SOCKET_ENV]).parent.name.startswith("umbel-warm-")
    assert warm_env["PATH"].split(os.pathsep)[0].endswith("bin") and not Path(warm_env[warm.SOCKET_ENV]).exists()
    assert warm.SOCKET_ENV not in cold_env and cold_env["PATH"] == os.environ["PATH"]


def test_a_server_that_does_not_fork_in_time_leaves_the_message_to_flowers_own_command(tmp_path):
    sock = tmp_path / "stuck.sock"
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.bind(str(sock))
    stuck.listen(1)  # accepts, never answers
    probe = "import sys; from client import warm; warm.FORK_TIMEOUT = 1.0; sys.exit(warm.launch(sys.argv, sys.argv[1]))"
    started = time.monotonic()
    log = tmp_path / "out.txt"
    with stuck, log.open("w") as sink:  # a file, not a pipe: the stuck socket holds the streams sent to it
        code = subprocess.run(
            [sys.executable, "-c", probe, _cold(tmp_path), "--token", "t"],
            cwd=PROJECT_ROOT,
            env={**os.environ, warm.SOCKET_ENV: str(sock)},
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=60,
        ).returncode
    assert code == 7 and log.read_text().startswith("COLD"), log.read_text()
    assert time.monotonic() - started < 30


def test_a_launcher_that_gave_up_waiting_is_not_run_twice(server, tmp_path):
    """The server, stopped, answers only after the launcher ran Flower's command: it must not fork the message too."""
    launcher, env = server
    (held,) = _servers(Path(env[warm.SOCKET_ENV]))
    probe = "import sys; from client import warm; warm.FORK_TIMEOUT = 1.0; sys.exit(warm.launch(sys.argv, sys.argv[1]))"
    log, cold = tmp_path / "out.txt", _cold(tmp_path)
    held.suspend()
    try:
        with log.open("w") as sink:
            code = subprocess.run(
                [sys.executable, "-c", probe, cold, "0"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=60,
            ).returncode
    finally:
        held.resume()
    time.sleep(3)  # the server now reads the abandoned request
    assert code == 7 and log.read_text() == f"COLD {cold} 0\n"  # the fallback alone: no fork's output
    out = subprocess.run([launcher, "0"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and _seen(out.stdout)["preloaded"] is True
