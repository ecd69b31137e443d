"""A SuperNode's environment for warm ClientApp processes (``client.warm``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from client import warm

from .shared import executable, launcher_path


@contextlib.contextmanager
def warm_clientapps(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """``env`` for a SuperNode whose ClientApp processes are forked warm (``client.warm``).

    Yields ``env`` with the ``flwr-clientapp`` launcher first on ``PATH`` (then Flower's own scripts)
    and the warm server's socket; the server runs meanwhile (it imports Flower and torch while the
    SuperNode starts: a message before it listens runs Flower's own command). On exit the server's
    session gets SIGTERM (it, and any ClientApp it forked that still runs, as the SuperNode's session
    does) and its folder (0700) is removed.
    """
    folder = Path(tempfile.mkdtemp(prefix="umbel-warm-"))
    try:
        fallback = executable(warm.COMMAND)
        launcher = warm.write_launcher(folder / "bin", fallback)
        sock = folder / "clientapp.sock"
        env = {**env, "PATH": launcher_path(launcher.parent, env.get("PATH", "")), warm.SOCKET_ENV: str(sock)}
        # its own session, as the SuperNode's: a terminal's Ctrl-C is for the SuperNode alone
        server = subprocess.Popen(
            warm.server_command(sock, fallback), env=env, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            yield env
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGTERM)  # the server, and any ClientApp still running
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
