"""``umbel deploy certs`` and ``umbel deploy keys``: the TLS material and the SuperNodes' key pairs."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.validation import check_int

from .shared import CERT_FILES, LOCAL_NAMES, SECRETS, refuse_overwrite, write_file


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
    refuse_overwrite(paths.values(), force)
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
    write_file(paths["ca"], ca.public_bytes(serialization.Encoding.PEM))
    write_file(paths["cert"], cert.public_bytes(serialization.Encoding.PEM))
    write_file(paths["ca-key"], _pem_private(ca_key), private=True)
    write_file(paths["key"], _pem_private(key), private=True)
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
    refuse_overwrite([p for path in paths for p in (path, path.with_name(path.name + ".pub"))], force)
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        key = ec.generate_private_key(ec.SECP384R1())
        write_file(
            path,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            ),
            private=True,
        )
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        write_file(path.with_name(path.name + ".pub"), public + f" {path.name}\n".encode())
    return paths


def add_parsers(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``certs`` and ``keys`` to ``umbel deploy``'s subcommands."""
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


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"certs": _certs, "keys": _keys}


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
