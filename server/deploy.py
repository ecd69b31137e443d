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
  only when it finished and trained (``server.deploy_follow``).

Generated material goes to ``deploy/secrets/`` by default (git-ignored). ``superlink``
replaces this process with the SuperLink's; ``--dry-run`` prints the command instead.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import ipaddress
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import tomli_w
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.validation import check_int
from server.terminal import for_terminal

from . import deploy_follow

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SECRETS = PROJECT_ROOT / "deploy" / "secrets"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
CERT_FILES = {"ca": "ca.crt", "ca-key": "ca.key", "cert": "server.pem", "key": "server.key"}
# Flower reads these from the environment of the process it starts: no telemetry (it costs seconds
# offline), no update check, unbuffered logs.
ENV_DEFAULTS = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "PYTHONUNBUFFERED": "1"}


# ----------------------------------------------------------------------- material
def make_certificates(out: Path, hosts: Sequence[str] = (), days: int = 365, force: bool = False) -> dict[str, Path]:
    """Write a CA and a server certificate signed by it into ``out``.

    Parameters
    ----------
    out : Path
        Folder for ``ca.crt``, ``ca.key``, ``server.pem`` and ``server.key`` (created).
    hosts : sequence of str
        DNS names or IP addresses of the SuperLink as clients dial it, added to
        ``localhost``, ``127.0.0.1`` and ``::1`` as subjectAltNames.
    days : int, default=365
        Validity of both certificates.
    force : bool, default=False
        Overwrite existing files; otherwise existing material is an error.

    Returns
    -------
    dict of str to Path
        ``ca``, ``ca-key``, ``cert`` and ``key`` paths.

    Raises
    ------
    ValueError
        If ``days`` is not a positive int, a host is empty, or files exist and ``force`` is false.
    """
    check_int(days, "days", "make_certificates", low=1)
    names = list(dict.fromkeys([*LOCAL_NAMES, *hosts]))
    if any(not h.strip() for h in names):
        raise ValueError(
            f"The 'hosts' parameter of make_certificates must hold non-empty names. Got {hosts!r} instead."
        )
    paths = {k: out / v for k, v in CERT_FILES.items()}
    _refuse_overwrite(paths.values(), force)
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "umbel deployment CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    common_name = next((h for h in names if h not in LOCAL_NAMES), "localhost")
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(subject, ca_name, key.public_key(), now, days)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out.mkdir(parents=True, exist_ok=True)
    _write(paths["ca"], ca.public_bytes(serialization.Encoding.PEM))
    _write(paths["cert"], cert.public_bytes(serialization.Encoding.PEM))
    _write(paths["ca-key"], _pem_private(ca_key), private=True)
    _write(paths["key"], _pem_private(key), private=True)
    return paths


def make_keys(out: Path, names: Sequence[str], force: bool = False) -> list[Path]:
    """Write one EC P-384 key pair per name: ``out/<name>`` (private) and ``out/<name>.pub``.

    Both are in OpenSSH format, as ``flower-supernode --auth-supernode-private-key`` and
    ``flwr supernode register`` read them. Returns the private key paths.

    Raises
    ------
    ValueError
        If a name is empty, repeated or holds a path separator, or files exist and
        ``force`` is false.
    """
    if not names or len(set(names)) != len(names) or any(not n or "/" in n or n.startswith(".") for n in names):
        raise ValueError(
            f"The 'names' parameter of make_keys must be distinct plain file names. Got {list(names)!r} instead."
        )
    paths = [out / n for n in names]
    _refuse_overwrite([p for path in paths for p in (path, path.with_name(path.name + ".pub"))], force)
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        key = ec.generate_private_key(ec.SECP384R1())
        _write(
            path,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            ),
            private=True,
        )
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        _write(path.with_name(path.name + ".pub"), public + f" {path.name}\n".encode())
    return paths


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


# ----------------------------------------------------------------------- commands
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
    port: int = 8000,
    database: Path | None = None,
    certs: Path | None = None,
    auth: bool | None = None,
    insecure: bool | None = None,
    control_host: str = "127.0.0.1",
    control_port: int = 9093,
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
    _executable("flower-superlink")
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


def supernode_command(
    *,
    superlink: str,
    partition_id: int,
    num_partitions: int,
    port: int = 9094,
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
        _executable("flower-supernode"),
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


# ----------------------------------------------------------------------- SuperNode diagnosis
EXIT_OK, EXIT_FLOWER, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_TLS, EXIT_REFUSED = 0, 1, 2, 3, 4, 5
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
    host, port = _split_address(address)
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


def register_commands(keys_dir: Path, connection: str) -> list[list[str]]:
    """One ``flwr supernode register <key>.pub <connection> --name <key>`` per public key."""
    pubs = sorted(keys_dir.glob("*.pub"))
    if not pubs:
        raise ValueError(
            f"The 'keys' parameter of register must be a folder with .pub files. Got {str(keys_dir)!r} instead."
        )
    return [[_executable("flwr"), "supernode", "register", str(p), connection, "--name", p.stem] for p in pubs]


# ----------------------------------------------------------------------- Docker compose
DEPLOY_DIR = PROJECT_ROOT / "deploy"
CUDA_TORCH_INDEX = "https://download.pytorch.org/whl/cu126"
SUPERNODE_PORT = 9094
CONTROL_PORT = 9093


def compose_config(nodes: int, *, fleet_port: int = 8000, max_retries: int = 10, max_wait_time: float = 300.0) -> dict:
    """A Docker compose project: one SuperLink and ``nodes`` SuperNodes, TLS + node authentication.

    SuperNode ``i`` holds partition ``i`` of ``nodes`` and mounts only ``ca.crt``, its own key
    ``secrets/keys/supernode-<i>`` and the data folder; the SuperLink mounts its certificate
    and key and the public keys (to register them from inside its container). Only the Fleet
    port is published; the Control API listens on the SuperLink container's loopback.

    Raises
    ------
    ValueError
        If ``nodes`` < 1.
    """
    check_int(nodes, "nodes", "compose_config", low=1)
    link = {
        "build": {
            "context": "..",
            "dockerfile": "deploy/Dockerfile",
            "args": {"UID": "${UMBEL_UID:-10001}", "GID": "${UMBEL_GID:-10001}"},
        },
        "image": "umbel:latest",
        "command": [
            "umbel",
            "deploy",
            "superlink",
            "--host",
            "0.0.0.0",
            "--port",
            str(fleet_port),
            "--control-port",
            str(CONTROL_PORT),
            "--certs",
            "/secrets",
            "--database",
            "/state/superlink.db",
        ],
        "ports": [f"{fleet_port}:{fleet_port}"],
        "volumes": [
            *(f"./secrets/certs/{f}:/secrets/{f}:ro" for f in ("ca.crt", "server.pem", "server.key")),
            *(f"./secrets/keys/supernode-{i}.pub:/keys/supernode-{i}.pub:ro" for i in range(nodes)),
            "superlink-state:/state",
            "../results:/results",
        ],
        "healthcheck": _healthcheck(f"https://127.0.0.1:{CONTROL_PORT}/health"),
        "restart": "unless-stopped",
    }
    services: dict[str, dict] = {"superlink": link}
    for i in range(nodes):
        services[f"supernode-{i}"] = {
            "image": "umbel:latest",
            "depends_on": {"superlink": {"condition": "service_healthy"}},
            "restart": "on-failure:5",
            "command": [
                "umbel",
                "deploy",
                "supernode",
                "--superlink",
                f"superlink:{fleet_port}",
                "--root-certificates",
                "/secrets/ca.crt",
                "--key",
                "/secrets/key",
                "--partition-id",
                str(i),
                "--num-partitions",
                str(nodes),
                "--data-dir",
                "/data",
                "--port",
                str(SUPERNODE_PORT),
                "--max-retries",
                str(max_retries),
                "--max-wait-time",
                f"{max_wait_time:g}",
            ],
            "volumes": [
                "./secrets/certs/ca.crt:/secrets/ca.crt:ro",
                f"./secrets/keys/supernode-{i}:/secrets/key:ro",
                "${UMBEL_DATA:-../data}:/data:ro",
            ],
            "healthcheck": _healthcheck(f"http://127.0.0.1:{SUPERNODE_PORT}/health"),
        }
    return {"name": "umbel", "services": services, "volumes": {"superlink-state": {}}}


def gpu_override(nodes: int, gpus: int = 1) -> dict:
    """Compose override: CUDA torch in the image, SuperNode ``i`` on GPU ``i % gpus`` (one GPU: all share it).

    Inside each container the granted GPU is ``cuda:0``, which the ClientApp picks (device "auto").
    """
    check_int(nodes, "nodes", "gpu_override", low=1)
    check_int(gpus, "gpus", "gpu_override", low=1)
    services: dict[str, dict] = {"superlink": {"build": {"args": {"TORCH_INDEX": CUDA_TORCH_INDEX}}}}
    for i in range(nodes):
        services[f"supernode-{i}"] = {
            "deploy": {
                "resources": {
                    "reservations": {
                        "devices": [{"driver": "nvidia", "device_ids": [str(i % gpus)], "capabilities": ["gpu"]}]
                    }
                }
            }
        }
    return {"services": services}


def write_compose(folder: Path, nodes: int, *, gpus: int = 1, fleet_port: int = 8000) -> list[Path]:
    """Write ``compose.yaml`` (``compose_config``) and ``compose.gpu.yaml`` (``gpu_override``) into ``folder``."""
    import yaml  # pyyaml comes with flwr

    command = f"umbel deploy compose --nodes {nodes} --gpus {gpus}" + (
        f" --port {fleet_port}" if fleet_port != 8000 else ""
    )
    texts = {
        "compose.yaml": (
            (
                f"# Generated by `{command}`: change that command, not this file.\n"
                f"# 1 SuperLink (Fleet API on the published port {fleet_port}; Control API inside its "
                f"container only)\n# and {nodes} SuperNodes, TLS + SuperNode authentication. Steps: "
                "docs/deployment.md, 'Docker'.\n"
            ),
            compose_config(nodes, fleet_port=fleet_port),
        ),
        "compose.gpu.yaml": (
            (
                f"# Generated by `{command}`. Add `-f deploy/compose.gpu.yaml` to every docker compose\n"
                f"# command: CUDA torch, SuperNode i on GPU i mod {gpus} (NVIDIA Container Toolkit).\n"
            ),
            gpu_override(nodes, gpus),
        ),
    }
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (header, config) in texts.items():
        paths.append(folder / name)
        paths[-1].write_text(header + yaml.safe_dump(config, sort_keys=False, width=120))
    return paths


def _healthcheck(url: str) -> dict:
    probe = (
        (
            "import ssl,sys,urllib.request as u; "
            f"sys.exit(u.urlopen('{url}', timeout=5, context=ssl.create_default_context(cafile='/secrets/ca.crt'))"
            ".status != 200)"
        )
        if url.startswith("https")
        else (f"import sys,urllib.request as u; sys.exit(u.urlopen('{url}', timeout=5).status != 200)")
    )
    return {
        "test": ["CMD", "python", "-c", probe],
        "interval": "15s",
        "timeout": "6s",
        "retries": 3,
        "start_period": "60s",
    }


def deploy_env(flwr_home: Path | None = None) -> dict[str, str]:
    """The current environment with Flower's quiet defaults (kept if already set) and ``FLWR_HOME``."""
    env = {**ENV_DEFAULTS, **os.environ}
    if flwr_home is not None:
        env["FLWR_HOME"] = str(flwr_home.resolve())
    return env


# ----------------------------------------------------------------------- CLI
def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``deploy`` and its subcommands to the ``umbel`` parser."""
    deploy = commands.add_parser(
        "deploy",
        help="run umbel on real machines (SuperLink, SuperNodes, TLS, auth)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = deploy.add_subparsers(dest="deploy_command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    p = sub.add_parser("certs", help="make a CA and the SuperLink's TLS certificate", formatter_class=fmt)
    p.add_argument("--out", type=Path, default=SECRETS / "certs")
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME_OR_IP",
        help="the SuperLink's name or address as clients dial it (repeat); localhost is always in",
    )
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--force", action="store_true", help="overwrite existing files")

    p = sub.add_parser("keys", help="make SuperNode key pairs for node authentication", formatter_class=fmt)
    p.add_argument("--out", type=Path, default=SECRETS / "keys")
    p.add_argument("--count", type=int, default=None, help="make supernode-0 .. supernode-<count-1>")
    p.add_argument("--name", action="append", default=[], help="a key's name (repeat); instead of --count")
    p.add_argument("--force", action="store_true", help="overwrite existing files")

    p = sub.add_parser(
        "superlink", help="start the SuperLink (Fleet API exposed, Control API private)", formatter_class=fmt
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface of the Fleet API, the only one SuperNodes need (0.0.0.0: every interface)",
    )
    p.add_argument("--port", type=int, default=8000, help="port of the Fleet API (open it to the client hosts)")
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
        default=10,
        help="retries while the SuperLink is unreachable, at start and after a loss, before giving up",
    )
    p.add_argument("--max-wait-time", type=float, default=300.0, help="seconds of retrying before giving up")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")

    p = sub.add_parser(
        "compose", help="write Docker compose files for one SuperLink and N SuperNodes", formatter_class=fmt
    )
    p.add_argument("--nodes", type=int, required=True, help="number of SuperNodes (partitions 0..N-1)")
    p.add_argument(
        "--gpus", type=int, default=1, help="GPUs on the Docker host for compose.gpu.yaml: SuperNode i gets GPU i mod N"
    )
    p.add_argument("--port", type=int, default=8000, help="the published Fleet port")
    p.add_argument("--out", type=Path, default=DEPLOY_DIR, help="folder for compose.yaml and compose.gpu.yaml")

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
    deploy_follow.add_parsers(sub, fmt)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``umbel deploy`` subcommand; returns the exit code."""
    try:
        return _COMMANDS[args.deploy_command](args)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"umbel deploy {args.deploy_command}: error: {err}", file=sys.stderr)
        return 2


def _certs(args: argparse.Namespace) -> int:
    paths = make_certificates(args.out, args.host, args.days, args.force)
    print(
        f"CA {paths['ca']} (give it to SuperNodes and the CLI); server certificate {paths['cert']} and key "
        f"{paths['key']} (SuperLink host only); keep {paths['ca-key']} offline."
    )
    return 0


def _keys(args: argparse.Namespace) -> int:
    if (args.count is None) == (not args.name):
        raise ValueError("give --count or --name")
    names = args.name or [f"supernode-{i}" for i in range(check_int(args.count, "count", "umbel deploy keys", low=1))]
    for path in make_keys(args.out, names, args.force):
        print(f"{path} (private: that SuperNode's host only)  {path}.pub (register it)")
    return 0


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
    return run_supernode(cmd, deploy_env(), max_retries=args.max_retries, max_wait_time=args.max_wait_time)


def _compose(args: argparse.Namespace) -> int:
    for path in write_compose(args.out, args.nodes, gpus=args.gpus, fleet_port=args.port):
        print(path)
    print(f"1 SuperLink and {args.nodes} SuperNodes; next steps in docs/deployment.md ('Docker').")
    return 0


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


def _exec(cmd: list[str], dry_run: bool) -> int:
    if dry_run:
        print(shlex.join(cmd))
        return 0
    sys.stdout.flush()
    os.execve(cmd[0], cmd, deploy_env())
    return 0  # not reached


_COMMANDS = {
    "certs": _certs,
    "keys": _keys,
    "superlink": _superlink,
    "supernode": _supernode,
    "connection": _connection,
    "register": _register,
    "compose": _compose,
    "run": lambda args: deploy_follow.run_command(args, deploy_env(args.flwr_home), _executable("flwr")),
    "wait": lambda args: deploy_follow.run_command(args, deploy_env(args.flwr_home), _executable("flwr")),
}


# ----------------------------------------------------------------------- helpers
def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"The 'superlink' parameter must be HOST:PORT. Got {address!r} instead.")
    return host.strip("[]"), int(port)


def _executable(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).exists():
        raise FileNotFoundError(f"'{name}' is not installed here (pip install 'flwr[simulation]==1.42.*').")
    return found


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: dt.datetime, days: int) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem_private(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _refuse_overwrite(paths, force: bool) -> None:
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(existing)} already exist; pass --force to replace them.")


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
