"""Warm ClientApp processes: each message's ``flwr-clientapp`` forked from a process that imported Flower and torch.

Flower 1.42's SuperNode starts a new ``flwr-clientapp`` process for every message it receives, and
each one imports Flower and torch again: most of its CPU time (about 9 CPU s a message on a 2-core
box, far more on a small device). ``umbel deploy supernode`` starts one :func:`serve` process beside
its SuperNode and puts a ``flwr-clientapp`` launcher (:func:`write_launcher`) first on the
SuperNode's ``PATH``. The launcher hands its arguments, environment, working folder and standard
streams to the server, which forks; the fork runs Flower's own ``flwr-clientapp`` entry point with
them, and the launcher exits with its exit code (``128 + N`` for signal N) and passes SIGINT, SIGTERM
and SIGQUIT on to it.

Only third-party packages are imported ahead (``PRELOAD``): the app's own modules come from the FAB
that Flower installs for the run, as in a cold start; nothing initialises CUDA or torch's threads
before a fork, and numpy's global random state is reseeded in each fork. What is read when Python
starts or a package is imported (``PYTHONPATH``, ``OMP_NUM_THREADS``, ``FLWR_LOG_LEVEL``,
``FLWR_TELEMETRY_ENABLED``) comes from the server's environment, which is the SuperNode's; Flower's
runtime installation of an app's dependencies (off in umbel's deployments) would not replace the
preloaded packages.

A launcher waits ``FORK_TIMEOUT`` for the server; when none answers (not listening yet: its imports
take seconds, up to a minute on a loaded box; gone; or too slow), it runs Flower's command itself.
The server forks only after the launcher has confirmed it is still waiting, so a message never runs
twice. The socket lives in a folder only this user can enter (0700); whoever can connect could
already run ``flwr-clientapp`` as this user.
"""

from __future__ import annotations

import array
import atexit
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
"""Seconds the launcher waits for the server before it runs Flower's command itself (Flower starts
another copy of a ClientApp that has not connected within 30 s)."""
ENTRY = "flwr.supernode.cli:flwr_clientapp"
"""What each fork runs: Flower's ``flwr-clientapp`` entry point (``module:function``)."""
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)
_HEADER = struct.Struct("!I")
_STATUS = struct.Struct("!i")
_READY, _GO = b"r", b"g"


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
    pid = None
    try:
        conn.settimeout(FORK_TIMEOUT)
        conn.connect(path)
        body = json.dumps({"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        fds = array.array("i", [0, 1, 2])
        conn.sendmsg([_HEADER.pack(len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        conn.sendall(body)
        if _read_exact(conn, 1) == _READY:
            conn.sendall(_GO)  # from here the fork runs: wait for it whatever it takes
            conn.settimeout(None)
            pid = _read_status(conn)
    except OSError:  # no server, or one too slow: the server forks nothing once this socket is closed
        pid = None
    if pid is None:  # nothing ran: Flower's own command, as if there were no launcher
        conn.close()
        os.execv(fallback, [fallback, *argv[1:]])

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    code = _read_status(conn)
    return 1 if code is None else (128 - code if code < 0 else code)


def server_command(path: Path, fallback: str, entry: str = ENTRY) -> list[str]:
    """The command of the warm server listening on ``path``, whose forks run ``entry`` as ``fallback`` would."""
    return [sys.executable, str(Path(__file__).resolve()), str(path), fallback, entry]


def serve(path: str, fallback: str, entry: str = ENTRY) -> None:
    """The warm server: import ``PRELOAD``, listen on ``path``, fork one ``entry`` per connection.

    Run as a script (``server_command``), so that no module of this package is imported ahead of the
    run's FAB; its import path starts as Flower's ``fallback`` script's would. It ends on SIGTERM, or
    once it listens, within a second of the process that started it (a parent gone during the imports
    counts too); SIGINT is ignored (a terminal's Ctrl-C is for the SuperNode).
    """
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[0] = os.path.dirname(fallback)
    started = time.monotonic()
    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the reporters are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".new")
    server.listen(64)
    os.replace(path + ".new", path)  # launchers see the socket only once it listens
    server.settimeout(1.0)
    print(f"umbel: warm ClientApp processes ({', '.join(PRELOAD)} imported in {time.monotonic() - started:.1f} s)")
    sys.stdout.flush()
    while os.getppid() == parent:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        except OSError as err:  # out of file descriptors, an aborted connection: this request only
            print(f"umbel: warm ClientApp server: accept failed: {err}", file=sys.stderr, flush=True)
            time.sleep(0.1)
            continue
        conn.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            child = os.fork()
        except OSError as err:  # the launcher sees the socket close unanswered and runs Flower's command
            print(f"umbel: warm ClientApp server: fork failed: {err}", file=sys.stderr, flush=True)
            child = -1
        if child == 0:
            server.close()
            _report(conn, entry)
        conn.close()


def _report(conn: socket.socket, entry: str) -> None:
    """In a fork of the server: read the request, fork the ClientApp once the launcher says go, report its pid
    and exit status."""
    code = 1
    try:
        request, fds = _read_request(conn)
        try:
            conn.sendall(_READY)
            go = _read_exact(conn, 1)
        except OSError:
            go = None
        if go != _GO:  # the launcher gave up waiting and runs Flower's command
            return
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run(request, fds, entry)
        for fd in fds:
            os.close(fd)
        print(f"umbel: ClientApp forked warm (pid {pid})", flush=True)
        conn.sendall(_STATUS.pack(pid))
        _, status = os.waitpid(pid, 0)
        conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))
        code = 0
    except Exception:  # noqa: BLE001 - the launcher sees the connection close and says so
        traceback.print_exc()
    finally:
        os._exit(code)


def _run(request: dict, fds: list[int], entry: str) -> None:
    """In the ClientApp's process: take the launcher's streams, folder, environment and arguments, run ``entry``."""
    code: object = 1
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
        if "numpy" in sys.modules:  # a cold process seeds numpy's global state from the OS; a fork copies it
            sys.modules["numpy"].random.seed()
        module, _, function = entry.partition(":")
        getattr(importlib.import_module(module), function)()
        code = 0
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - reported as the process's exit status, as a cold start would
        traceback.print_exc()
    finally:
        if not (code is None or isinstance(code, int)):
            print(code, file=sys.stderr)  # SystemExit("message"), as Python prints it
        status = code if isinstance(code, int) else (0 if code is None else 1)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


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
        for fd in fds:
            os.close(fd)
        raise ValueError(f"a launcher's request must carry a header and 3 streams. Got {len(fds)} streams instead.")
    body = _read_exact(conn, _HEADER.unpack(head)[0])
    if body is None:
        raise ValueError("a launcher's request ended early.")
    return json.loads(body), list(fds)


if __name__ == "__main__":
    serve(*sys.argv[1:4])
