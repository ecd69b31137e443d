"""``umbel deploy``: run umbel as real processes, a SuperLink and one SuperNode per client.

Subcommands, in the order a deployment uses them (docs/deployment.md):

- ``certs``: a private CA and a SuperLink server certificate whose subjectAltNames are the
  names and addresses the SuperNodes and the CLI dial;
- ``keys``: one EC P-384 key pair per SuperNode (OpenSSH format, as Flower's node
  authentication reads them);
- ``superlink``: start the SuperLink with its Fleet API alone on ``--host:--port`` and the
  Control and ServerAppIo APIs on ``--control-host:--control-port`` (127.0.0.1);
  TLS and SuperNode authentication unless ``--insecure`` or ``--tls-without-auth``;
- ``connection``: write the Flower CLI's connection entry to ``$FLWR_HOME/config.toml``;
- ``register``: ``flwr supernode register`` every public key of a folder;
- ``supernode``: check that the SuperLink answers over this transport, then run
  ``flower-supernode`` for one partition, with its data folder and device in its node
  config; a refusal or a lost SuperLink ends it with an exit code that says why;
- ``compose``: write Docker compose files for one SuperLink and N SuperNodes;
- ``run`` / ``wait``: submit umbel and follow the run, or follow a submitted run, exiting 0
  only when it finished and trained (``server.deploy.follow``).

Generated material goes to ``deploy/secrets/`` by default (git-ignored). ``superlink``
replaces this process with the SuperLink's; ``--dry-run`` prints the command instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from . import certs, compose, connection, follow, superlink, supernode
from .shared import EXIT_USAGE, USAGE_ERRORS

# in the order ``umbel deploy --help`` lists their subcommands
_MODULES = (certs, superlink, supernode, compose, connection, follow)
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: command for module in _MODULES for name, command in module.COMMANDS.items()
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``deploy`` and its subcommands to the ``umbel`` parser."""
    deploy = commands.add_parser(
        "deploy",
        help="run umbel on real machines (SuperLink, SuperNodes, TLS, auth)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = deploy.add_subparsers(dest="deploy_command", required=True)
    for module in _MODULES:
        module.add_parsers(sub, argparse.ArgumentDefaultsHelpFormatter)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``umbel deploy`` subcommand; returns the exit code."""
    try:
        return _COMMANDS[args.deploy_command](args)
    except USAGE_ERRORS as err:
        print(f"umbel deploy {args.deploy_command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
