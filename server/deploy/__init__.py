"""``umbel deploy``: umbel as real processes, a SuperLink and one SuperNode per client.

One module per command: ``certs`` (certs, keys), ``superlink``, ``supernode``, ``compose``,
``connection`` (connection, register) and ``follow`` (run, wait); ``shared`` holds what they
share (paths, ports, exit codes, environment, address and file checks) and ``cli`` the parser
and the dispatch. The names below are the package's public interface.
"""

from .certs import make_certificates, make_keys
from .cli import add_parser, run
from .compose import compose_config, gpu_override, write_compose
from .connection import register_commands, write_connection
from .shared import (
    CERT_FILES,
    CONTROL_PORT,
    DEPLOY_DIR,
    ENV_DEFAULTS,
    EXIT_USAGE,
    FLEET_PORT,
    LOCAL_NAMES,
    PROJECT_ROOT,
    SECRETS,
    SUPERNODE_PORT,
    deploy_env,
    executable,
)
from .superlink import INSECURE_NOTICE, TLS_WITHOUT_AUTH_NOTICE, superlink_command
from .supernode import (
    EXIT_CODES,
    EXIT_FLOWER,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TLS,
    EXIT_UNREACHABLE,
    diagnose_flower_log,
    probe_superlink,
    run_supernode,
    supernode_command,
    supervise,
    wait_for_superlink,
)

__all__ = [
    "CERT_FILES",
    "CONTROL_PORT",
    "DEPLOY_DIR",
    "ENV_DEFAULTS",
    "EXIT_CODES",
    "EXIT_FLOWER",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TLS",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "FLEET_PORT",
    "INSECURE_NOTICE",
    "LOCAL_NAMES",
    "PROJECT_ROOT",
    "SECRETS",
    "SUPERNODE_PORT",
    "TLS_WITHOUT_AUTH_NOTICE",
    "add_parser",
    "compose_config",
    "deploy_env",
    "diagnose_flower_log",
    "executable",
    "gpu_override",
    "make_certificates",
    "make_keys",
    "probe_superlink",
    "register_commands",
    "run",
    "run_supernode",
    "superlink_command",
    "supernode_command",
    "supervise",
    "wait_for_superlink",
    "write_compose",
    "write_connection",
]
