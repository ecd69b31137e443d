"""``umbel deploy superlink``: the SuperLink, its Fleet API exposed and its Control API private."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from common.validation import check_int

from .shared import CERT_FILES, CONTROL_PORT, FLEET_PORT, SECRETS, deploy_env, executable

INSECURE_NOTICE = (
    "INSECURE: plain HTTP and no SuperNode authentication. Anyone on the network path can read "
    "and change the models, signals and identities in transit, and any process that reaches the "
    "Fleet address can join as a SuperNode and claim a client id. Use it on loopback or a network "
    "you trust completely."
)
TLS_WITHOUT_AUTH_NOTICE = (
    "TLS WITHOUT SUPERNODE AUTHENTICATION: traffic is encrypted, but any process that reaches the "
    "Fleet address and holds ca.crt (every client host has it) can join as a SuperNode and claim a "
    "client id."
)


def superlink_command(
    *,
    host: str = "127.0.0.1",
    port: int = FLEET_PORT,
    database: Path | None = None,
    certs: Path | None = None,
    auth: bool | None = None,
    insecure: bool | None = None,
    control_host: str = "127.0.0.1",
    control_port: int = CONTROL_PORT,
) -> list[str]:
    """The command line of a SuperLink whose Fleet API alone is on ``host:port``.

    The Control and Runtime (ServerAppIo) APIs stay on ``control_host:control_port``
    (``server.superlink``), where the operator's ``flwr`` CLI and Flower's SuperExec connect.

    Parameters
    ----------
    host, port : str, int
        The Fleet API's address: what the SuperNodes dial.
    database : Path, optional
        Flower's state database; ``None`` keeps the state in memory.
    certs : Path, optional
        Folder made by ``make_certificates``; TLS for every API.
    auth : bool, optional
        Admit only registered SuperNode keys; default: with TLS, yes. ``True`` needs ``certs``.
    insecure : bool, optional
        Plain HTTP without authentication; must be asked for (``True``) when ``certs`` is
        ``None``. ``None`` means ``certs is None`` (the builder's earlier meaning).
    control_host, control_port : str, int
        Address of the Control and Runtime APIs; keep it private.

    Raises
    ------
    ValueError
        If ``auth`` is asked without TLS, TLS and ``insecure`` are both given, or the
        Control API would share the Fleet API's address.
    """
    check_int(port, "port", "superlink_command", low=1, high=65535)
    check_int(control_port, "control_port", "superlink_command", low=1, high=65535)
    insecure = certs is None if insecure is None else insecure
    if insecure and certs is not None:
        raise ValueError("The 'insecure' parameter of superlink_command cannot be combined with 'certs'.")
    if not insecure and certs is None:
        raise ValueError("The 'certs' parameter of superlink_command is required unless insecure=True.")
    if insecure and auth:
        raise ValueError("The 'auth' parameter of superlink_command needs TLS: give 'certs'.")
    auth = not insecure if auth is None else auth
    if (host, port) == (control_host, control_port) or (port == control_port and "0.0.0.0" in (host, control_host)):
        raise ValueError(
            f"The 'control_port' parameter of superlink_command must differ from the Fleet "
            f"address. Got {control_host}:{control_port} and {host}:{port} instead."
        )
    cmd = [
        sys.executable,
        "-m",
        "server.superlink",
        "--fleet-host",
        host,
        "--fleet-port",
        str(port),
        "--",
        "--host",
        control_host,
        "--port",
        str(control_port),
        "--disable-runtime-dependency-installation",
    ]
    executable("flower-superlink")
    if database is not None:
        cmd += ["--database", str(database)]
    if certs is None:  # insecure (checked above)
        return [*cmd, "--insecure"]
    cmd += [
        "--ssl-ca-certfile",
        str(certs / CERT_FILES["ca"]),
        "--ssl-certfile",
        str(certs / CERT_FILES["cert"]),
        "--ssl-keyfile",
        str(certs / CERT_FILES["key"]),
    ]
    return [*cmd, "--enable-supernode-auth"] if auth else cmd


def add_parsers(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``superlink`` to ``umbel deploy``'s subcommands."""
    p = sub.add_parser(
        "superlink", help="start the SuperLink (Fleet API exposed, Control API private)", formatter_class=fmt
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface of the Fleet API, the only one SuperNodes need (0.0.0.0: every interface)",
    )
    p.add_argument("--port", type=int, default=FLEET_PORT, help="port of the Fleet API (open it to the client hosts)")
    p.add_argument(
        "--control-host",
        default="127.0.0.1",
        help="interface of the Control and ServerAppIo APIs (flwr CLI, ServerApp); keep it private",
    )
    p.add_argument("--control-port", type=int, default=CONTROL_PORT, help="port of the Control and ServerAppIo APIs")
    p.add_argument(
        "--database",
        type=Path,
        default=SECRETS / "superlink.db",
        help="state database (runs, registered nodes); ':memory:' keeps none",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--certs",
        type=Path,
        default=SECRETS / "certs",
        metavar="DIR",
        help="folder made by 'umbel deploy certs' (TLS for every API)",
    )
    group.add_argument(
        "--insecure", action="store_true", help="plain HTTP, no SuperNode authentication (prints why not)"
    )
    p.add_argument(
        "--tls-without-auth",
        action="store_true",
        help="TLS but admit any SuperNode that has ca.crt (SuperNode authentication is on by default)",
    )
    p.add_argument("--auth", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")


def _superlink(args: argparse.Namespace) -> int:
    if args.insecure and args.tls_without_auth:
        raise ValueError("--tls-without-auth needs TLS; it cannot be combined with --insecure")
    certs = None if args.insecure else args.certs
    if certs is not None and not args.dry_run:
        missing = [f for f in ("ca", "cert", "key") if not (certs / CERT_FILES[f]).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{certs} lacks {', '.join(CERT_FILES[f] for f in missing)}: run 'umbel deploy "
                "certs' first, or pass --insecure to run without TLS."
            )
    database = None if args.database == Path(":memory:") else args.database.resolve()
    if database is not None and not args.dry_run:
        database.parent.mkdir(parents=True, exist_ok=True)
    cmd = superlink_command(
        host=args.host,
        port=args.port,
        database=database,
        certs=certs,
        auth=None if certs is None else not args.tls_without_auth,
        insecure=args.insecure,
        control_host=args.control_host,
        control_port=args.control_port,
    )
    if args.insecure:
        print(f"umbel deploy superlink: {INSECURE_NOTICE}", file=sys.stderr, flush=True)
    elif args.tls_without_auth:
        print(f"umbel deploy superlink: {TLS_WITHOUT_AUTH_NOTICE}", file=sys.stderr, flush=True)
    print(
        f"umbel deploy superlink: SuperNodes dial {args.host}:{args.port} (Fleet API only); the flwr CLI and the "
        f"ServerApp use {args.control_host}:{args.control_port} (Control and ServerAppIo APIs).",
        flush=True,
    )
    return _exec(cmd, args.dry_run)


def _exec(cmd: list[str], dry_run: bool) -> int:
    if dry_run:
        print(shlex.join(cmd))
        return 0
    sys.stdout.flush()
    os.execve(cmd[0], cmd, deploy_env())
    return 0  # not reached


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"superlink": _superlink}
