"""Processes the end-to-end tests start: wait for a port, stop a process tree by PID; ``umbel`` in process."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
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


def umbel_in_process(*args: object, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``umbel ARGS`` through ``server.cli.main`` in this process (with ``env`` as its environment, if
    given): its exit code and what it printed.

    The same parsing and handlers as the console command, without a fresh interpreter importing
    torch and every strategy first (seconds of CPU per call, tens on a loaded box).
    """
    from server.cli import main

    argv = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
