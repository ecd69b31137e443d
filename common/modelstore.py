"""Arrays and JSON on disk in formats that load without running code (no pickle anywhere).

A *bundle* is one ``.npz`` file (a zip of ``.npy`` arrays, read with ``allow_pickle=False``)
whose member ``__meta__`` holds a JSON document as UTF-8 bytes: the arrays of a cluster
model, of a checkpoint or of a strategy's placement state, and what describes them, in one
file that is written atomically (temp file, fsync, rename). JSON files are written the same
way. Every reader names the path, what it expected and what it found.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

META = "__meta__"
PICKLE_MAGIC = b"\x80"  # every pickle protocol >= 2 starts with PROTO (0x80)


class StoreError(ValueError):
    """A file umbel reads is missing, malformed, tampered with or of another kind."""


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _atomic_path(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp")


def _commit(tmp: Path, path: Path) -> None:
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_bundle(path: str | Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None = None) -> str:
    """Write ``arrays`` (name -> array) and the JSON ``meta`` to ``path`` atomically; its SHA-256.

    Raises
    ------
    ValueError
        If an array holds Python objects (they would need pickle) or a name is ``__meta__``.
    """
    path = Path(path)
    if META in arrays:
        raise ValueError(f"The array name {META!r} is reserved for the bundle's JSON document.")
    tmp = _atomic_path(path)
    doc = np.frombuffer(json.dumps(dict(meta or {}), sort_keys=True).encode(), dtype=np.uint8)
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in {**arrays, META: doc}.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arr), allow_pickle=False)
    _commit(tmp, path)
    return sha256_file(path)


def read_bundle(
    path: str | Path, what: str = "umbel file", sha256: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the JSON document of a bundle written by :func:`write_bundle`.

    Parameters
    ----------
    path : str or Path
        The ``.npz`` file.
    what : str
        What the file should be, for the messages ("checkpoint", "cluster model 0", ...).
    sha256 : str, optional
        The digest the file must have (a manifest's record of it).

    Raises
    ------
    StoreError
        If the file is missing, a pickle, not a bundle, or its digest differs from ``sha256``.
    """
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"The {what} {str(path)!r} must be a file. Got no such file instead.")
    with path.open("rb") as fh:
        head = fh.read(2)
    if head[:1] == PICKLE_MAGIC:
        raise StoreError(
            f"The {what} {str(path)!r} must be a .npz bundle. Got a Python pickle instead (written by an "
            "older umbel?); umbel never loads pickles, which can run code."
        )
    if sha256 is not None:
        found = sha256_file(path)
        if found != sha256:
            raise StoreError(
                f"The {what} {str(path)!r} must have the SHA-256 its manifest records ({sha256}). "
                f"Got {found} instead: the file was changed after it was written."
            )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise StoreError(
            f"The {what} {str(path)!r} must be a .npz bundle. Got an unreadable file instead: {err}"
        ) from err
    doc = arrays.pop(META, None)
    if doc is None or doc.dtype != np.uint8 or doc.ndim != 1:
        raise StoreError(
            f"The {what} {str(path)!r} must hold a {META!r} JSON member. Got members {sorted(arrays)[:5]} instead."
        )
    try:
        meta = json.loads(doc.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StoreError(
            f"The {what} {str(path)!r} must hold JSON in {META!r}. Got unreadable bytes instead: {err}"
        ) from err
    if not isinstance(meta, dict):
        raise StoreError(
            f"The {what} {str(path)!r} must hold a JSON object in {META!r}. Got {type(meta).__name__} instead."
        )
    return arrays, meta


def write_json(path: str | Path, data: Any) -> str:
    """Write ``data`` as indented JSON to ``path`` atomically; its SHA-256."""
    path = Path(path)
    tmp = _atomic_path(path)
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    _commit(tmp, path)
    return sha256_file(path)


def read_json(path: str | Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``; ``StoreError`` naming ``what`` when it is missing or not one."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"The {what} {str(path)!r} must be a file. Got no such file instead.")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StoreError(f"The {what} {str(path)!r} must be JSON. Got unreadable text instead: {err}") from err
    if not isinstance(data, dict):
        raise StoreError(f"The {what} {str(path)!r} must hold a JSON object. Got {type(data).__name__} instead.")
    return data
