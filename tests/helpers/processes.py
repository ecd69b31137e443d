"""Processes the end-to-end tests start: wait for a port, stop a process tree by PID."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    """Return once 127.0.0.1:``port`` accepts connections; fail, with the log, if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the SuperLink exited:\n{log.read_text()[-3000:]}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"the SuperLink did not listen on {port} within {timeout:g} s:\n{log.read_text()[-3000:]}")


def kill_trees(pids: list[int]) -> None:
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
