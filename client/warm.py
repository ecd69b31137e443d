"""Warm ClientApp processes: each message's ``flwr-clientapp`` forked from a process that imported Flower and torch.

Flower 1.42's SuperNode starts a new ``flwr-clientapp`` process for every message it receives, and
each one imports Flower and torch again: most of its CPU time (about 4 of 5 s on a 2-core box,
far more on a small device). ``umbel deploy supernode`` starts one :func:`serve` process beside its
SuperNode and puts a ``flwr-clientapp`` launcher (:func:`write_launcher`) first on the SuperNode's
``PATH``. The launcher hands its arguments, environment, working folder and standard streams to
the server, which forks; the fork runs Flower's own ``flwr-clientapp`` entry point with them,
and the launcher exits with its exit code (``128 + N`` for signal N) and passes SIGINT and SIGTERM
on to it. Only third-party packages are imported ahead (``PRELOAD``): the app's own modules come
from the FAB that Flower installs for the run, as in a cold start, and nothing initialises CUDA or
torch's threads before a fork. When no server answers (not started yet, gone, or not forking within
``FORK_TIMEOUT``), the launcher runs Flower's command itself.

The socket lives in a folder only this user can enter (0700); whoever can connect could already
run ``flwr-clientapp`` as this user.
"""

from __future__ import annotations

import array
import importlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

PRELOAD = ("numpy", "torch", "flwr.supernode.cli")
"""Imported once by the server; each fork starts with them loaded."""
SOCKET_ENV = "UMBEL_WARM_CLIENTAPP"
"""The launcher reads the server's socket path from this variable."""
COMMAND = "flwr-clientapp"
FORK_TIMEOUT = 20.0
"""Seconds the launcher waits for the server's fork before it runs Flower's command itself (Flower
starts another copy of a ClientApp that has not connected within 30 s)."""
ENTRY = "flwr.supernode.cli:flwr_clientapp"
"""What each fork runs: Flower's ``flwr-clientapp`` entry point (``module:function``)."""
_HEADER = struct.Struct("!I")
_STATUS = struct.Struct("!i")


def write_launcher(folder: Path, fallback: str) -> Path:
    """Write the executable ``flwr-clientapp`` launcher into ``folder``; ``fallback`` is Flower's own command."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / COMMAND
    root = Path(__file__).resolve().parents[1]  # this very package, wherever the SuperExec starts it from
    lines = [
        f"#!{sys.executable}",
        "import sys",
        f"sys.path.insert(0, {str(root)!r})",
        "from client.warm import launch",
        f"sys.exit(launch(sys.argv, {fallback!r}))",
        "",
    ]
    path.write_text("\n".join(lines))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def launch(argv: Sequence[str], fallback: str) -> int:
    """The launcher: run ``argv`` in a fork of the warm server, or exec ``fallback`` when none answers."""
    path = os.environ.get(SOCKET_ENV, "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(FORK_TIMEOUT)
        conn.connect(path)
        body = json.dumps({"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        fds = array.array("i", [0, 1, 2])
        conn.sendmsg([_HEADER.pack(len(body)) + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        pid = _read_status(conn)
        conn.settimeout(None)
    except OSError:  # no server, or one that did not fork in time
        pid = None
    if pid is None:  # nothing ran: Flower's own command, as if there were no launcher
        conn.close()
        os.execv(fallback, [fallback, *argv[1:]])

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    code = _read_status(conn)
    return 1 if code is None else (128 - code if code < 0 else code)


def server_command(path: Path, fallback: str, entry: str = ENTRY) -> list[str]:
    """The command of the warm server listening on ``path``, whose forks run ``entry`` as ``fallback`` would."""
    return [sys.executable, str(Path(__file__).resolve()), str(path), fallback, entry]


def serve(path: str, fallback: str, entry: str = ENTRY) -> None:
    """The warm server: import ``PRELOAD``, listen on ``path``, fork one ``entry`` per connection.

    Run as a script (``server_command``), so that no module of this package is imported ahead of the
    run's FAB; its import path starts as Flower's ``fallback`` script's would. It ends when its
    parent (``umbel deploy supernode``) ends or it gets SIGTERM.
    """
    sys.path[0] = os.path.dirname(fallback)
    started = time.monotonic()
    for name in PRELOAD:
        importlib.import_module(name)
    parent = os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the reporters are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".new")
    os.replace(path + ".new", path)  # launchers see the socket only once it listens
    server.listen(64)
    server.settimeout(1.0)
    print(
        f"umbel: warm ClientApp processes ({', '.join(PRELOAD)} imported in {time.monotonic() - started:.1f} s)",
        flush=True,
    )
    while os.getppid() == parent:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            _report(conn, entry)
        conn.close()


def _report(conn: socket.socket, entry: str) -> None:
    """In a fork of the server: read the request, fork the ClientApp, send its pid and exit status."""
    code = 1
    try:
        request, fds = _read_request(conn)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run(request, fds, entry)
        for fd in fds:
            os.close(fd)
        conn.sendall(_STATUS.pack(pid))
        _, status = os.waitpid(pid, 0)
        conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))
        code = 0
    except Exception:  # noqa: BLE001 - the launcher sees the connection close and says so
        traceback.print_exc()
    finally:
        os._exit(code)


def _run(request: dict, fds: list[int], entry: str) -> None:
    """In the ClientApp's process: take the launcher's streams, folder, environment and arguments, run Flower."""
    code: int | str | None = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        module, _, function = entry.partition(":")
        getattr(importlib.import_module(module), function)()
        code = 0
    except SystemExit as done:
        code = done.code
    except BaseException:  # noqa: BLE001 - reported as the process's exit status, as a cold start would
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _read_exact(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_status(conn: socket.socket) -> int | None:
    data = _read_exact(conn, _STATUS.size)
    return None if data is None else _STATUS.unpack(data)[0]


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    head, ancillary, _, _ = conn.recvmsg(_HEADER.size, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if len(head) != _HEADER.size or len(fds) != 3:
        raise ValueError(f"a launcher's request must carry a header and 3 streams. Got {len(fds)} streams instead.")
    body = _read_exact(conn, _HEADER.unpack(head)[0])
    if body is None:
        raise ValueError("a launcher's request ended early.")
    return json.loads(body), list(fds)


if __name__ == "__main__":
    serve(*sys.argv[1:4])
