"""``umbel deploy supernode``: one SuperNode, started only once its SuperLink answers over its transport.

A refusal or a lost SuperLink ends it with an exit code that says why (``EXIT_CODES``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from common.validation import check_int
from server.terminal import for_terminal

from .warm import warm_clientapps
from .shared import (
    EXIT_USAGE,
    MAX_RETRIES,
    MAX_WAIT_TIME,
    SECRETS,
    SUPERNODE_PORT,
    deploy_env,
    executable,
    split_address,
)


def supernode_command(
    *,
    superlink: str,
    partition_id: int,
    num_partitions: int,
    port: int = SUPERNODE_PORT,
    host: str = "127.0.0.1",
    data_dir: str | None = None,
    data_path: str | None = None,
    device: str | None = None,
    root_certificates: Path | None = None,
    key: Path | None = None,
    max_retries: int | None = None,
    max_wait_time: float | None = None,
    model_out: str | None = None,
) -> list[str]:
    """The ``flower-supernode`` command line for one partition.

    ``root_certificates=None`` means insecure; ``key`` is the SuperNode's private key
    for node authentication. ``data_dir`` (the public dataset's folder), ``data_path`` (this
    client's own data: the only data the node reads) and ``device`` go into the node config,
    where the ClientApp prefers them to the run-config's. ``max_retries`` and ``max_wait_time``
    bound how long Flower retries a lost SuperLink (``None``: forever).

    Raises
    ------
    ValueError
        Naming the parameter: partition id outside ``[0, num_partitions - 1]``, a bad port
        or device, a key without TLS.
    """
    check_int(num_partitions, "num-partitions", "supernode_command", low=1)
    check_int(partition_id, "partition-id", "supernode_command", low=0, high=num_partitions - 1)
    check_int(port, "port", "supernode_command", low=1, high=65535)
    if max_retries is not None:
        check_int(max_retries, "max-retries", "supernode_command", low=0)
    if max_wait_time is not None and not max_wait_time > 0:
        raise ValueError(
            f"The 'max-wait-time' parameter of supernode_command must be > 0. Got {max_wait_time!r} instead."
        )
    node_config: dict[str, int | str] = {"partition-id": partition_id, "num-partitions": num_partitions}
    if data_dir:
        node_config["data-dir"] = str(Path(data_dir).expanduser().resolve())
    if data_path:
        node_config["data-path"] = str(Path(data_path).expanduser().resolve())
    if model_out:  # where the ClientApp writes this client's final cluster model (docs/models.md)
        node_config["model-out"] = str(Path(model_out).expanduser().resolve())
    if device:
        # imports torch: only when a device is named, so that `umbel deploy --help` answers at once
        from common.training import check_device_name

        node_config["device"] = check_device_name(device, "supernode_command")
    if any('"' in str(v) for v in node_config.values()):
        raise ValueError(
            "The 'data_dir' and 'data_path' parameters of supernode_command must not hold '\"'. "
            f"Got {data_dir!r} and {data_path!r} instead."
        )
    cmd = [
        executable("flower-supernode"),
        "--superlink",
        superlink,
        "--host",
        host,
        "--port",
        str(port),
        "--node-config",
        " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in node_config.items()),
    ]
    if max_retries is not None:
        cmd += ["--max-retries", str(max_retries)]
    if max_wait_time is not None:
        cmd += ["--max-wait-time", f"{max_wait_time:g}"]
    if root_certificates is None:
        if key is not None:
            raise ValueError("The 'key' parameter of supernode_command needs TLS: give 'root_certificates'.")
        return [*cmd, "--insecure"]
    cmd += ["--root-certificates", str(root_certificates)]
    return [*cmd, "--auth-supernode-private-key", str(key)] if key is not None else cmd


EXIT_OK, EXIT_FLOWER, EXIT_UNREACHABLE, EXIT_TLS, EXIT_REFUSED = 0, 1, 3, 4, 5
EXIT_CODES = {
    EXIT_OK: "stopped by SIGINT/SIGTERM (or Flower ended normally)",
    EXIT_FLOWER: "Flower stopped with another error (its 'Exit Code: N' is in the log)",
    EXIT_USAGE: "bad arguments or missing files (nothing was started)",
    EXIT_UNREACHABLE: "the SuperLink could not be reached within --max-retries / --max-wait-time",
    EXIT_TLS: "transport mismatch: TLS against a plain-HTTP SuperLink or the reverse, or a certificate "
    "that does not verify against --root-certificates",
    EXIT_REFUSED: "the SuperLink refused this node: its key is not registered (or was unregistered), "
    "or it has no key while the SuperLink admits only registered keys",
}
# (pattern in Flower's SuperNode log, exit code, what to tell the user)
_FLOWER_FAILURES = (
    (
        "[code: 2004]",
        EXIT_REFUSED,
        (
            "the SuperLink did not activate this node's key: it does not know the key "
            "(register its .pub on the SuperLink's host: umbel deploy register; or check "
            "that --key is the key that was registered)."
        ),
    ),
    (
        "[code: 2001]",
        EXIT_REFUSED,
        (
            "the SuperLink admits only registered SuperNode keys and this node has "
            "none: give --key <private key> whose .pub is registered."
        ),
    ),
    ("Giving up reconnection", EXIT_UNREACHABLE, "the SuperLink stopped answering and the retries ran out."),
    ("Exit Code: 302", EXIT_USAGE, "the --key file is not a valid EC private key in OpenSSH format."),
)


def probe_superlink(address: str, root_certificates: Path | None, timeout: float = 5.0) -> tuple[int, str] | None:
    """Check once that a SuperNode with these settings can talk to the SuperLink at ``address``.

    Returns ``None`` when an HTTP(S) ``/health`` request is answered, else ``(exit code,
    reason)`` with ``EXIT_UNREACHABLE`` (nothing listens, or no answer in ``timeout`` s) or
    ``EXIT_TLS`` (the two sides disagree on TLS, or the certificate does not verify).
    """
    host, port = split_address(address)
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as err:
        return EXIT_UNREACHABLE, f"nothing answers at {address} ({err.strerror or err})."
    request = f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    with raw:
        if root_certificates is None:
            try:
                raw.sendall(request)
                answer = raw.recv(5)
            except OSError:
                answer = b""
            if answer.startswith(b"HTTP/"):
                return None
            return EXIT_TLS, (
                f"the SuperLink at {address} does not answer plain HTTP: it speaks TLS. Start this "
                "node with --root-certificates <ca.crt> (and --key) instead of --insecure."
            )
        context = ssl.create_default_context(cafile=str(root_certificates))
        try:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(request)
                answer = tls.recv(5)
        except ssl.SSLCertVerificationError as err:
            return EXIT_TLS, (
                f"the SuperLink's certificate does not verify against {root_certificates}: "
                f"{err.verify_message}. Use the ca.crt made with this SuperLink's certificate, and "
                f"make sure '{host}' was one of its 'umbel deploy certs --host' names."
            )
        except (ssl.SSLError, ConnectionResetError) as err:
            return EXIT_TLS, (
                f"the SuperLink at {address} does not speak TLS ({getattr(err, 'reason', None) or err}): "
                "it runs --insecure. Start this node with --insecure, or the SuperLink with --certs."
            )
        except OSError as err:
            return EXIT_UNREACHABLE, f"the connection to {address} failed ({err})."
    return None if answer.startswith(b"HTTP/") else (EXIT_UNREACHABLE, f"{address} gave no HTTP answer.")


def wait_for_superlink(
    address: str, root_certificates: Path | None, *, max_retries: int, max_wait_time: float, sleep=time.sleep
) -> tuple[int, str] | None:
    """``probe_superlink`` until it answers; retries only while the SuperLink is unreachable.

    At most ``max_retries`` retries and ``max_wait_time`` seconds, with backoff 1, 2, 4 .. 10 s.
    """
    start = time.monotonic()
    attempt, reason = 0, ""
    for attempt in range(max_retries + 1):
        problem = probe_superlink(address, root_certificates)
        if problem is None or problem[0] != EXIT_UNREACHABLE:
            return problem
        reason = problem[1]
        delay = min(10.0, 2.0**attempt)
        if attempt == max_retries or time.monotonic() - start + delay > max_wait_time:
            break
        print(
            f"umbel deploy supernode: {reason} Retrying in {delay:g} s ({attempt + 1} of {max_retries} retries).",
            file=sys.stderr,
            flush=True,
        )
        sleep(delay)
    return EXIT_UNREACHABLE, f"{reason} Gave up after {attempt} retries and {time.monotonic() - start:.0f} s."


def diagnose_flower_log(text: str) -> tuple[int, str] | None:
    """The exit code and explanation for a known failure in a SuperNode's log, if any."""
    for pattern, code, reason in _FLOWER_FAILURES:
        if pattern in text:
            return code, reason
    return None


def supervise(cmd: list[str], env: Mapping[str, str]) -> tuple[int, str | None]:
    """Run Flower's SuperNode, pass its output through, and explain a known failure.

    SIGINT and SIGTERM are passed on to it (in its own session, so that it deactivates
    itself at the SuperLink before it exits). Returns one of ``EXIT_CODES`` and the reason.
    """
    proc = subprocess.Popen(
        cmd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    signalled: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        signalled.append(sig)
        proc.send_signal(sig)

    handlers = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    tail: list[str] = []
    output = proc.stdout or ()  # never None: stdout is a pipe

    def relay() -> None:
        for raw in output:
            line = raw.decode(errors="replace")
            sys.stdout.write(for_terminal(line))
            sys.stdout.flush()
            tail[:] = [*tail[-199:], line]

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        code = proc.wait()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)  # a SuperExec it left behind would hold the pipe open
        reader.join(timeout=10)
    if code == 0 or signalled:
        return EXIT_OK, None
    problem = diagnose_flower_log("".join(tail))
    if problem is None:
        what = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}; see its 'Exit Code' above"
        return EXIT_FLOWER, f"flower-supernode {what}."
    return problem


def run_supernode(
    cmd: list[str], env: Mapping[str, str], *, max_retries: int, max_wait_time: float, sleep=time.sleep
) -> int:
    """``supervise`` the SuperNode; restart it while the SuperLink refuses to activate its key.

    A registered key is refused while a previous session of it is still online (a SuperNode
    killed without deactivating stays online for Flower's heartbeat window, about 60 s), so
    that refusal is retried within ``max_retries`` and ``max_wait_time``; any other outcome
    ends it. Returns one of ``EXIT_CODES``.
    """
    start = time.monotonic()
    for attempt in range(max_retries + 1):
        code, reason = supervise(cmd, env)
        if not (code == EXIT_REFUSED and reason == _FLOWER_FAILURES[0][2]):
            break
        delay = min(10.0, 2.0**attempt)
        if attempt == max_retries or time.monotonic() - start + delay > max_wait_time:
            reason += f" (Refused {attempt + 1} times in {time.monotonic() - start:.0f} s.)"
            break
        print(
            f"umbel deploy supernode: not activated: {reason} A previous session of this key may also still be "
            f"online (up to about 60 s after it was killed); retrying in {delay:g} s ({attempt + 1} of "
            f"{max_retries} retries).",
            file=sys.stderr,
            flush=True,
        )
        sleep(delay)
    if reason is not None:
        print(f"umbel deploy supernode: {'refused: ' if code == EXIT_REFUSED else ''}{reason}", file=sys.stderr)
    return code


def add_parsers(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``supernode`` to ``umbel deploy``'s subcommands."""
    p = sub.add_parser(
        "supernode",
        help="start flower-supernode for one partition",
        formatter_class=fmt,
        epilog="exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()),
    )
    p.add_argument("--superlink", required=True, metavar="HOST:PORT", help="the SuperLink's Fleet address")
    p.add_argument("--partition-id", type=int, required=True)
    p.add_argument("--num-partitions", type=int, required=True, help="equal to the run's num-clients")
    p.add_argument("--data-dir", default=None, help="the public dataset's folder (node config data-dir)")
    p.add_argument(
        "--model-out", default=None, help="file this client's final cluster model is written to (node config model-out)"
    )
    p.add_argument(
        "--data-path",
        default=None,
        help="this client's own data: a Hugging Face save_to_disk folder, an ImageFolder tree or an "
        ".npz (node config data-path; docs/own-data.md)",
    )
    p.add_argument("--device", default=None, help="auto, cpu, cuda or cuda:N (node config device)")
    p.add_argument(
        "--port", type=int, default=SUPERNODE_PORT, help="local Runtime API port: distinct per SuperNode on a host"
    )
    p.add_argument("--host", default="127.0.0.1", help="interface of the local Runtime API")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--root-certificates",
        type=Path,
        default=SECRETS / "certs" / "ca.crt",
        metavar="CA_CRT",
        help="the CA certificate (TLS)",
    )
    group.add_argument("--insecure", action="store_true", help="plain HTTP: only against a --insecure SuperLink")
    p.add_argument("--key", type=Path, default=None, help="this SuperNode's private key (node authentication)")
    p.add_argument(
        "--max-retries",
        type=int,
        default=MAX_RETRIES,
        help="retries while the SuperLink is unreachable, at start and after a loss, before giving up",
    )
    p.add_argument("--max-wait-time", type=float, default=MAX_WAIT_TIME, help="seconds of retrying before giving up")
    cold = "a new process importing Flower and torch for each message (Flower's), not a fork of a warm one"
    p.add_argument("--cold-clientapps", action="store_true", help=f"start every ClientApp as {cold}")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")


def _supernode(args: argparse.Namespace) -> int:
    root = None if args.insecure else args.root_certificates
    if root is not None and not root.is_file():
        raise FileNotFoundError(
            f"the CA certificate {root} does not exist: copy the SuperLink's ca.crt here "
            "(--root-certificates), or pass --insecure against an insecure SuperLink."
        )
    if args.key is not None and not args.key.is_file():
        raise FileNotFoundError(
            f"The 'key' parameter of umbel deploy supernode must be this SuperNode's private key file "
            f"(made by 'umbel deploy keys'). Got '{args.key}', which does not exist, instead."
        )
    cmd = supernode_command(
        superlink=args.superlink,
        partition_id=args.partition_id,
        num_partitions=args.num_partitions,
        port=args.port,
        host=args.host,
        data_dir=args.data_dir,
        data_path=args.data_path,
        device=args.device,
        root_certificates=root,
        key=args.key,
        max_retries=args.max_retries,
        max_wait_time=args.max_wait_time,
        model_out=args.model_out,
    )
    if args.dry_run:
        print(shlex.join(cmd))
        return EXIT_OK
    problem = wait_for_superlink(args.superlink, root, max_retries=args.max_retries, max_wait_time=args.max_wait_time)
    if problem is not None:
        print(f"umbel deploy supernode: cannot connect: {problem[1]}", file=sys.stderr, flush=True)
        return problem[0]
    with contextlib.nullcontext(deploy_env()) if args.cold_clientapps else warm_clientapps(deploy_env()) as env:
        return run_supernode(cmd, env, max_retries=args.max_retries, max_wait_time=args.max_wait_time)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"supernode": _supernode}
