"""The operator's roster: which node key (or node id) may hold which partition in a deployment.

With SuperNode authentication the SuperLink knows every node's public key; a roster binds each
partition id to one key, so that a registered node cannot take another client's place, even by
claiming it first. ``umbel deploy register`` writes one from the key folder (``supernode-<i>.pub``
holds partition ``i``); run-config ``roster-path`` gives it to the ServerApp. Without a roster,
the first node to claim a partition id holds it (``federation.Membership``).

File format (JSON), partition id -> an OpenSSH or PEM public key, or a Flower node id::

    {"0": "ecdsa-sha2-nistp384 AAAA... supernode-0", "1": 1234567890}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

ROSTER_FILE = "roster.json"


def canonical_key(data: bytes | str) -> bytes:
    """A public key (OpenSSH, PEM or DER) as DER SubjectPublicKeyInfo bytes, to compare keys.

    Raises
    ------
    ValueError
        If ``data`` is no public key in any of these forms.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    text = raw.strip()
    loaders = (serialization.load_ssh_public_key, serialization.load_pem_public_key, serialization.load_der_public_key)
    for load in loaders:
        try:
            key = load(text)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
        return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    raise ValueError("not an OpenSSH, PEM or DER public key")


def fingerprint(der: bytes) -> str:
    """``SHA256:ab12cd34ef56``: a short name of a canonical key, for logs."""
    return "SHA256:" + hashlib.sha256(der).hexdigest()[:12] if der else "no key"


@dataclass(frozen=True)
class Roster:
    """Partition id -> the one key (canonical DER) or node id that may hold it."""

    keys: dict[int, bytes] = field(default_factory=dict)
    node_ids: dict[int, int] = field(default_factory=dict)

    def refusal(self, pid: int, node: int, key: bytes) -> str | None:
        """Why ``node`` with public ``key`` (as Flower shows it) may not hold ``pid``; None if it may."""
        if pid in self.node_ids:
            if node == self.node_ids[pid]:
                return None
            return f"the roster binds client {pid} to node {self.node_ids[pid]}"
        if pid not in self.keys:
            return f"the roster names no key for client {pid}"
        try:
            mine = canonical_key(key) if key else b""
        except ValueError:
            mine = b""
        if mine == self.keys[pid]:
            return None
        bound = fingerprint(self.keys[pid])
        return f"the roster binds client {pid} to key {bound}; node {node} has {fingerprint(mine)}"


def read_roster(path: str | Path) -> Roster:
    """Read a roster file (module docstring).

    Raises
    ------
    ValueError, FileNotFoundError
        Naming the file and the entry that is wrong.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"The 'roster-path' parameter must name a JSON roster. Got '{path}' ({err}).") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f"The 'roster-path' parameter must name a JSON object of partition id -> key. Got '{path}' instead."
        )
    keys: dict[int, bytes] = {}
    node_ids: dict[int, int] = {}
    for name, value in data.items():
        where = f"entry {name!r} of the roster-path file '{path}'"
        if not name.isdigit():
            raise ValueError(
                f"The partition ids of the roster-path file '{path}' must be ints >= 0. Got {name!r} instead."
            )
        if isinstance(value, int) and not isinstance(value, bool):
            node_ids[int(name)] = value
        elif isinstance(value, str):
            try:
                keys[int(name)] = canonical_key(value)
            except ValueError as err:
                raise ValueError(f"The {where} must be a public key or a node id. Got {value[:40]!r} ({err})") from None
        else:
            raise ValueError(f"The {where} must be a public key or a node id. Got {value!r} instead.")
    return Roster(keys, node_ids)


def write_roster(keys_dir: Path, out: Path | None = None) -> Path:
    """``keys_dir/roster.json`` binding partition ``i`` to ``supernode-<i>.pub`` (other keys are left out).

    Raises
    ------
    FileNotFoundError
        If ``keys_dir`` holds no ``supernode-<i>.pub``.
    """
    entries = {}
    for pub in sorted(keys_dir.glob("supernode-*.pub")):
        suffix = pub.name.removeprefix("supernode-").removesuffix(".pub")
        if suffix.isdigit():
            entries[int(suffix)] = pub.read_text().strip()
    if not entries:
        raise FileNotFoundError(f"{keys_dir} holds no supernode-<i>.pub to bind to partition i.")
    out = out or keys_dir / ROSTER_FILE
    out.write_text(json.dumps({str(k): v for k, v in sorted(entries.items())}, indent=2) + "\n")
    return out
