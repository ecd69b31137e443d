"""``umbel deploy connection`` and ``umbel deploy register``: the Flower CLI's side of a deployment."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import tomli_w

from .shared import SECRETS, deploy_env, executable


def write_connection(
    flwr_home: Path,
    name: str,
    address: str,
    *,
    root_certificates: Path | None = None,
    insecure: bool = False,
    default: bool = True,
) -> Path:
    """Add or replace ``[superlink.<name>]`` in ``flwr_home/config.toml``; other entries are kept.

    Raises
    ------
    ValueError
        If neither or both of ``root_certificates`` and ``insecure`` are given.
    """
    if (root_certificates is None) == (not insecure):
        raise ValueError("The 'root_certificates' and 'insecure' parameters of write_connection: give exactly one.")
    path = flwr_home / "config.toml"
    config = tomllib.loads(path.read_text()) if path.exists() else {}
    links = config.setdefault("superlink", {})
    entry: dict[str, object] = {"address": address}
    if root_certificates is None:  # insecure (checked above)
        entry["insecure"] = True
    else:
        entry["root-certificates"] = str(Path(root_certificates).resolve())
    links[name] = entry
    if default or "default" not in links:
        links["default"] = name
    flwr_home.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(config))
    return path


def register_commands(keys_dir: Path, connection: str) -> list[list[str]]:
    """One ``flwr supernode register <key>.pub <connection> --name <key>`` per public key."""
    pubs = sorted(keys_dir.glob("*.pub"))
    if not pubs:
        raise ValueError(
            f"The 'keys' parameter of register must be a folder with .pub files. Got {str(keys_dir)!r} instead."
        )
    return [[executable("flwr"), "supernode", "register", str(p), connection, "--name", p.stem] for p in pubs]


def add_parsers(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``connection`` and ``register`` to ``umbel deploy``'s subcommands."""
    p = sub.add_parser("connection", help="write the Flower CLI's connection entry", formatter_class=fmt)
    p.add_argument("name")
    p.add_argument("--address", required=True, metavar="HOST:PORT")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--root-certificates", type=Path, metavar="CA_CRT")
    group.add_argument("--insecure", action="store_true")
    p.add_argument("--flwr-home", type=Path, default=None, help="default: $FLWR_HOME or ~/.flwr")
    p.add_argument("--no-default", action="store_true", help="keep the current default connection")

    p = sub.add_parser("register", help="register every SuperNode public key of a folder", formatter_class=fmt)
    p.add_argument("connection", help="the Flower connection naming the SuperLink")
    p.add_argument("--keys", type=Path, default=SECRETS / "keys")
    p.add_argument("--flwr-home", type=Path, default=None)


def _connection(args: argparse.Namespace) -> int:
    home = args.flwr_home or Path(os.environ.get("FLWR_HOME", Path.home() / ".flwr"))
    path = write_connection(
        home,
        args.name,
        args.address,
        root_certificates=args.root_certificates,
        insecure=args.insecure,
        default=not args.no_default,
    )
    print(f"connection '{args.name}' -> {args.address} written to {path}")
    return 0


def _register(args: argparse.Namespace) -> int:
    env = deploy_env(args.flwr_home)
    for cmd in register_commands(args.keys, args.connection):
        print("+", shlex.join(cmd), flush=True)
        code = subprocess.call(cmd, env=env)
        if code != 0:
            return code
    if any(args.keys.glob("supernode-*.pub")):
        from strategies.roster import write_roster

        roster = write_roster(args.keys)
        print(f"roster {roster}: partition i bound to supernode-<i>.pub (run-config roster-path: '{roster}')")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"connection": _connection, "register": _register}
