"""``umbel deploy``: run umbel as real processes, a SuperLink and one SuperNode per client.

Subcommands, in the order a deployment uses them (README "Run on real machines"):

- ``certs``: a private CA and a SuperLink server certificate whose subjectAltNames are the
  names and addresses the SuperNodes and the CLI dial;
- ``keys``: one EC P-384 key pair per SuperNode (OpenSSH format, as Flower's node
  authentication reads them);
- ``superlink``: start ``flower-superlink`` (TLS unless ``--insecure``; ``--auth`` admits only
  registered SuperNode keys);
- ``connection``: write the Flower CLI's connection entry to ``$FLWR_HOME/config.toml``;
- ``register``: ``flwr supernode register`` every public key of a folder;
- ``supernode``: start ``flower-supernode`` for one partition, with its data folder and device
  in its node config.

Generated material goes to ``deploy/secrets/`` by default (git-ignored). ``superlink`` and
``supernode`` replace this process with Flower's own (so signals and the PID are Flower's);
``--dry-run`` prints the command instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import tomli_w
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.validation import check_int

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SECRETS = PROJECT_ROOT / "deploy" / "secrets"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
CERT_FILES = {"ca": "ca.crt", "ca-key": "ca.key", "cert": "server.pem", "key": "server.key"}
# Flower reads these from the environment of the process it starts (FLOWER.md 1.4 and 9).
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
        raise ValueError(f"The 'hosts' parameter of make_certificates must hold non-empty names. Got {hosts!r} instead.")
    paths = {k: out / v for k, v in CERT_FILES.items()}
    _refuse_overwrite(paths.values(), force)
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "umbel deployment CA")])
    ca = (_builder(ca_name, ca_name, ca_key.public_key(), now, days)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    common_name = next((h for h in names if h not in LOCAL_NAMES), "localhost")
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (_builder(subject, ca_name, key.public_key(), now, days)
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
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
        raise ValueError(f"The 'names' parameter of make_keys must be distinct plain file names. Got {list(names)!r} instead.")
    paths = [out / n for n in names]
    _refuse_overwrite([p for path in paths for p in (path, path.with_name(path.name + ".pub"))], force)
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        key = ec.generate_private_key(ec.SECP384R1())
        _write(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()), private=True)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        _write(path.with_name(path.name + ".pub"), public + f" {path.name}\n".encode())
    return paths


def write_connection(flwr_home: Path, name: str, address: str, *, root_certificates: Path | None = None,
                     insecure: bool = False, default: bool = True) -> Path:
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
    if insecure:
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
def superlink_command(*, host: str = "127.0.0.1", port: int = 8000, database: Path | None = None,
                      certs: Path | None = None, auth: bool = False) -> list[str]:
    """The ``flower-superlink`` command line; ``certs=None`` means insecure (plain HTTP).

    Raises
    ------
    ValueError
        If ``auth`` is asked without TLS (Flower's node authentication needs TLS).
    """
    check_int(port, "port", "superlink_command", low=1, high=65535)
    cmd = [_executable("flower-superlink"), "--host", host, "--port", str(port),
           "--disable-runtime-dependency-installation"]
    if database is not None:
        cmd += ["--database", str(database)]
    if certs is None:
        if auth:
            raise ValueError("The 'auth' parameter of superlink_command needs TLS: give 'certs'.")
        return [*cmd, "--insecure"]
    cmd += ["--ssl-ca-certfile", str(certs / CERT_FILES["ca"]), "--ssl-certfile", str(certs / CERT_FILES["cert"]),
            "--ssl-keyfile", str(certs / CERT_FILES["key"])]
    return [*cmd, "--enable-supernode-auth"] if auth else cmd


def supernode_command(*, superlink: str, partition_id: int, num_partitions: int, port: int = 9094,
                      host: str = "127.0.0.1", data_dir: str | None = None, device: str | None = None,
                      root_certificates: Path | None = None, key: Path | None = None) -> list[str]:
    """The ``flower-supernode`` command line for one partition.

    ``root_certificates=None`` means insecure; ``key`` is the SuperNode's private key
    for node authentication. ``data_dir`` and ``device`` go into the node config, where
    the ClientApp prefers them to the run-config's.

    Raises
    ------
    ValueError
        Naming the parameter: partition id outside ``[0, num_partitions - 1]``, a bad port
        or device, a key without TLS.
    """
    check_int(num_partitions, "num-partitions", "supernode_command", low=1)
    check_int(partition_id, "partition-id", "supernode_command", low=0, high=num_partitions - 1)
    check_int(port, "port", "supernode_command", low=1, high=65535)
    node_config = {"partition-id": partition_id, "num-partitions": num_partitions}
    if data_dir:
        node_config["data-dir"] = str(Path(data_dir).expanduser().resolve())
    if device:
        # imports torch: only when a device is named, so that `umbel deploy --help` answers at once
        from common.training import check_device_name

        node_config["device"] = check_device_name(device, "supernode_command")
    if any('"' in str(v) for v in node_config.values()):
        raise ValueError(f"The 'data_dir' parameter of supernode_command must not hold '\"'. Got {data_dir!r} instead.")
    cmd = [_executable("flower-supernode"), "--superlink", superlink, "--host", host, "--port", str(port),
           "--node-config", " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in node_config.items())]
    if root_certificates is None:
        if key is not None:
            raise ValueError("The 'key' parameter of supernode_command needs TLS: give 'root_certificates'.")
        return [*cmd, "--insecure"]
    cmd += ["--root-certificates", str(root_certificates)]
    return [*cmd, "--auth-supernode-private-key", str(key)] if key is not None else cmd


def register_commands(keys_dir: Path, connection: str) -> list[list[str]]:
    """One ``flwr supernode register <key>.pub <connection> --name <key>`` per public key."""
    pubs = sorted(keys_dir.glob("*.pub"))
    if not pubs:
        raise ValueError(f"The 'keys' parameter of register must be a folder with .pub files. Got {str(keys_dir)!r} instead.")
    return [[_executable("flwr"), "supernode", "register", str(p), connection, "--name", p.stem] for p in pubs]


def deploy_env(flwr_home: Path | None = None) -> dict[str, str]:
    """This environment with Flower's quiet defaults (kept if already set) and ``FLWR_HOME``."""
    env = {**ENV_DEFAULTS, **os.environ}
    if flwr_home is not None:
        env["FLWR_HOME"] = str(flwr_home.resolve())
    return env


# ----------------------------------------------------------------------- CLI
def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``deploy`` and its subcommands to the ``umbel`` parser."""
    deploy = commands.add_parser("deploy", help="run umbel on real machines (SuperLink, SuperNodes, TLS, auth)",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = deploy.add_subparsers(dest="deploy_command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    p = sub.add_parser("certs", help="make a CA and the SuperLink's TLS certificate", formatter_class=fmt)
    p.add_argument("--out", type=Path, default=SECRETS / "certs")
    p.add_argument("--host", action="append", default=[], metavar="NAME_OR_IP",
                   help="the SuperLink's name or address as clients dial it (repeat); localhost is always in")
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--force", action="store_true", help="overwrite existing files")

    p = sub.add_parser("keys", help="make SuperNode key pairs for node authentication", formatter_class=fmt)
    p.add_argument("--out", type=Path, default=SECRETS / "keys")
    p.add_argument("--count", type=int, default=None, help="make supernode-0 .. supernode-<count-1>")
    p.add_argument("--name", action="append", default=[], help="a key's name (repeat); instead of --count")
    p.add_argument("--force", action="store_true", help="overwrite existing files")

    p = sub.add_parser("superlink", help="start flower-superlink", formatter_class=fmt)
    p.add_argument("--host", default="0.0.0.0", help="interface to listen on (127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="the one TCP port for SuperNodes and the CLI")
    p.add_argument("--database", type=Path, default=SECRETS / "superlink.db",
                   help="state database (runs, registered nodes); ':memory:' keeps none")
    _security(p, auth=True)

    p = sub.add_parser("supernode", help="start flower-supernode for one partition", formatter_class=fmt)
    p.add_argument("--superlink", required=True, metavar="HOST:PORT")
    p.add_argument("--partition-id", type=int, required=True)
    p.add_argument("--num-partitions", type=int, required=True, help="equal to the run's num-clients")
    p.add_argument("--data-dir", default=None, help="this node's data folder (node config data-dir)")
    p.add_argument("--device", default=None, help="auto, cpu, cuda or cuda:N (node config device)")
    p.add_argument("--port", type=int, default=9094, help="local Runtime API port: distinct per SuperNode on a host")
    p.add_argument("--host", default="127.0.0.1", help="interface of the local Runtime API")
    _security(p, auth=False)

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


def _security(p: argparse.ArgumentParser, auth: bool) -> None:
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--insecure", action="store_true", help="plain HTTP: trusted networks only")
    if auth:
        group.add_argument("--certs", type=Path, metavar="DIR", help=f"folder made by 'umbel deploy certs' ({SECRETS / 'certs'})")
        p.add_argument("--auth", action="store_true", help="admit only registered SuperNode keys (needs --certs)")
    else:
        group.add_argument("--root-certificates", type=Path, metavar="CA_CRT", help="the CA certificate (TLS)")
        p.add_argument("--key", type=Path, default=None, help="this SuperNode's private key (node authentication)")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")


def run(args: argparse.Namespace) -> int:
    """Carry out one ``umbel deploy`` subcommand; returns the exit code."""
    try:
        return _COMMANDS[args.deploy_command](args)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"umbel deploy {args.deploy_command}: error: {err}", file=sys.stderr)
        return 2


def _certs(args: argparse.Namespace) -> int:
    paths = make_certificates(args.out, args.host, args.days, args.force)
    print(f"CA {paths['ca']} (give it to SuperNodes and the CLI); server certificate {paths['cert']} and key "
          f"{paths['key']} (SuperLink host only); keep {paths['ca-key']} offline.")
    return 0


def _keys(args: argparse.Namespace) -> int:
    if (args.count is None) == (not args.name):
        raise ValueError("give --count or --name")
    names = args.name or [f"supernode-{i}" for i in range(check_int(args.count, "count", "umbel deploy keys", low=1))]
    for path in make_keys(args.out, names, args.force):
        print(f"{path} (private: that SuperNode's host only)  {path}.pub (register it)")
    return 0


def _superlink(args: argparse.Namespace) -> int:
    database = None if args.database == Path(":memory:") else args.database.resolve()
    if database is not None and not args.dry_run:
        database.parent.mkdir(parents=True, exist_ok=True)
    return _exec(superlink_command(host=args.host, port=args.port, database=database,
                                   certs=None if args.insecure else args.certs, auth=args.auth), args.dry_run)


def _supernode(args: argparse.Namespace) -> int:
    cmd = supernode_command(superlink=args.superlink, partition_id=args.partition_id,
                            num_partitions=args.num_partitions, port=args.port, host=args.host,
                            data_dir=args.data_dir, device=args.device,
                            root_certificates=None if args.insecure else args.root_certificates, key=args.key)
    return _exec(cmd, args.dry_run)


def _connection(args: argparse.Namespace) -> int:
    home = args.flwr_home or Path(os.environ.get("FLWR_HOME", Path.home() / ".flwr"))
    path = write_connection(home, args.name, args.address, root_certificates=args.root_certificates,
                            insecure=args.insecure, default=not args.no_default)
    print(f"connection '{args.name}' -> {args.address} written to {path}")
    return 0


def _register(args: argparse.Namespace) -> int:
    env = deploy_env(args.flwr_home)
    for cmd in register_commands(args.keys, args.connection):
        print("+", shlex.join(cmd), flush=True)
        code = subprocess.call(cmd, env=env)
        if code != 0:
            return code
    return 0


def _exec(cmd: list[str], dry_run: bool) -> int:
    if dry_run:
        print(shlex.join(cmd))
        return 0
    sys.stdout.flush()
    os.execve(cmd[0], cmd, deploy_env())
    return 0  # not reached


_COMMANDS = {"certs": _certs, "keys": _keys, "superlink": _superlink, "supernode": _supernode,
             "connection": _connection, "register": _register}


# ----------------------------------------------------------------------- helpers
def _executable(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).exists():
        raise FileNotFoundError(f"'{name}' is not installed here (pip install 'flwr[simulation]==1.41.*').")
    return found


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: dt.datetime, days: int) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days)))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem_private(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _refuse_overwrite(paths, force: bool) -> None:
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(existing)} already exist; pass --force to replace them.")


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
