"""A strategy's run state: a DECLARED set of fields, saved as arrays (``.npz``) plus JSON, never pickle.

Each class names the attributes it keeps between rounds in ``state_fields`` (the cluster
models, the assignment, the clients, the generator, the history in the base; each
algorithm's similarity matrices, signals, reference models, ... in its own class) and the
wiring it must not save in ``transient``. Both sets add up along the class hierarchy; an
attribute in neither is a bug that ``undeclared`` reports (a test runs every registered
strategy and fails on one).

The state is written with :func:`common.modelstore.write_bundle`: every numpy array, Flower
``Array`` and ``ArrayRecord`` as a plain array (Flower's memoryviews never reach the file),
everything else as tagged JSON. Reading rebuilds only what the tags name: numpy arrays,
Flower records, generators, and dataclasses defined in umbel's own packages. A checkpoint is
the state after a round (``checkpoint.npz``); ``models/state.npz`` is the state after the last
round, what ``server.models.assign`` places a newcomer with.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from pathlib import Path
from logging import INFO
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common import log

from common.clustering.similarity import CountSketch, GaussianSketch
from common.modelstore import StoreError, read_bundle, write_bundle

from .record import RoundRecord

if TYPE_CHECKING:
    from .federation import ClientInfo

FORMAT = "umbel-state-2"
CHECKPOINT_FILE = "checkpoint.npz"
TAG = "~"
_UMBEL_PACKAGES = ("common.", "strategies.", "client.", "server.")
_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def fields_along(cls: type, attribute: str) -> frozenset[str]:
    """The union of the class attribute ``attribute`` (a set of names) over ``cls``'s hierarchy."""
    out: set[str] = set()
    for klass in cls.__mro__:
        out.update(vars(klass).get(attribute, ()))
    return frozenset(out)


def declared(cls: type) -> frozenset[str]:
    """The state fields ``cls`` and its bases declare."""
    return fields_along(cls, "state_fields")


def undeclared(strategy: Any) -> list[str]:
    """Attributes of ``strategy`` that are neither declared state nor transient (should be none)."""
    cls = type(strategy)
    return sorted(set(vars(strategy)) - declared(cls) - fields_along(cls, "transient"))


def capture(strategy: Any) -> dict[str, Any]:
    """The declared fields ``strategy`` holds, by name."""
    cls = type(strategy)
    return {
        name: getattr(strategy, name)
        for name in sorted(declared(cls))
        if hasattr(strategy, name) and not isinstance(getattr(cls, name, None), property)  # computed, not kept
    }


# ----------------------------------------------------------------- encoding
def encode(value: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    """``value`` as JSON, its arrays moved into ``arrays`` (named ``a<i>``); ``where`` names it in errors.

    Raises
    ------
    TypeError
        On a value of a type the state cannot hold (a memoryview, a function, an open file, ...).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return {TAG: "scalar", "k": _put(arrays, np.asarray(value))}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"State field {where} is an object array; only numeric arrays can be saved.")
        return {TAG: "nd", "k": _put(arrays, value)}
    if isinstance(value, ArrayRecord):
        return {TAG: "record", "v": [[name, _put(arrays, arr.numpy())] for name, arr in value.items()]}
    if isinstance(value, Array):
        return {TAG: "array", "k": _put(arrays, value.numpy())}
    if isinstance(value, np.random.Generator):
        return {TAG: "rng", "v": value.bit_generator.state}
    if isinstance(value, list):
        return [encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (tuple, set, frozenset)):
        kind = {tuple: "tuple", set: "set", frozenset: "frozenset"}[type(value)]
        return {TAG: kind, "v": [encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict):
        return {
            TAG: "dict",
            "v": [[encode(k, arrays, where), encode(v, arrays, f"{where}[{k!r}]")] for k, v in value.items()],
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__module__.startswith(_UMBEL_PACKAGES):
            raise TypeError(
                f"State field {where} is a {cls.__module__}.{cls.__qualname__}, not one of umbel's dataclasses."
            )
        return {
            TAG: "dc",
            "t": f"{cls.__module__}:{cls.__qualname__}",
            "v": {
                f.name: encode(getattr(value, f.name), arrays, f"{where}.{f.name}") for f in dataclasses.fields(value)
            },
        }
    if isinstance(value, (GaussianSketch, CountSketch)):  # rebuilt from their seed, not stored
        return {TAG: "sketch", "t": type(value).__name__, "v": [value.dim, value.sketch_dim, value.seed]}
    if type(value).__module__.startswith(_UMBEL_PACKAGES) and hasattr(value, "__dict__"):
        cls = type(value)
        return {
            TAG: "obj",
            "t": f"{cls.__module__}:{cls.__qualname__}",
            "v": {k: encode(v, arrays, f"{where}.{k}") for k, v in vars(value).items()},
        }
    raise TypeError(
        f"State field {where} holds a {type(value).__name__}, which a checkpoint cannot hold (numbers, strings, "
        "numpy arrays, Flower records, containers of them and umbel dataclasses only); declare the attribute "
        "transient if it is wiring or a cache."
    )


def decode(value: Any, arrays: Mapping[str, np.ndarray], where: str) -> Any:
    """The inverse of :func:`encode`; ``StoreError`` naming ``where`` on anything it did not write."""
    if isinstance(value, list):
        return [decode(v, arrays, where) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get(TAG)
    if tag in ("nd", "scalar", "array"):
        arr = _get(arrays, value["k"], where)
        return arr[()] if tag == "scalar" else Array(arr) if tag == "array" else arr
    if tag == "record":
        return ArrayRecord({name: Array(_get(arrays, k, where)) for name, k in value["v"]})
    if tag == "rng":
        name = value["v"].get("bit_generator")
        if name not in _GENERATORS:
            raise StoreError(f"The state {where} must name a numpy bit generator {_GENERATORS}. Got {name!r} instead.")
        gen = np.random.Generator(getattr(np.random, name)())
        gen.bit_generator.state = value["v"]
        return gen
    if tag in ("tuple", "set", "frozenset"):
        items = [decode(v, arrays, where) for v in value["v"]]
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {decode(k, arrays, where): decode(v, arrays, where) for k, v in value["v"]}
    if tag in ("dc", "obj"):
        return _umbel_object(value, arrays, where, dataclass=tag == "dc")
    if tag == "sketch":
        kind = {"GaussianSketch": GaussianSketch, "CountSketch": CountSketch}[value["t"]]
        return kind(*(int(v) for v in value["v"]))
    raise StoreError(f"The state {where} must be a tagged value umbel wrote. Got the tag {tag!r} instead.")


def _put(arrays: dict[str, np.ndarray], arr: np.ndarray) -> str:
    key = f"a{len(arrays)}"
    arrays[key] = np.array(arr, copy=True)
    return key


def _get(arrays: Mapping[str, np.ndarray], key: str, where: str) -> np.ndarray:
    if key not in arrays:
        raise StoreError(f"The state {where} must find its array {key!r} in the file. Got no such array instead.")
    return arrays[key]


def _umbel_object(value: Mapping[str, Any], arrays: Mapping[str, np.ndarray], where: str, dataclass: bool) -> Any:
    module, _, qualname = str(value["t"]).partition(":")
    if not module.startswith(_UMBEL_PACKAGES):
        raise StoreError(f"The state {where} must hold umbel dataclasses only. Got {value['t']!r} instead.")
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and cls.__module__.startswith(_UMBEL_PACKAGES)):
        raise StoreError(f"The state {where} must name an umbel class. Got {value['t']!r} instead.")
    obj: Any = object.__new__(cls)
    if not dataclass:
        for name, item in value["v"].items():
            object.__setattr__(obj, name, decode(item, arrays, f"{where}.{name}"))
        return obj
    for f in dataclasses.fields(cls):
        if f.name in value["v"]:
            object.__setattr__(obj, f.name, decode(value["v"][f.name], arrays, f"{where}.{f.name}"))
    return obj


# ----------------------------------------------------------------- files
def save_state(strategy: Any, server_round: int, path: Path) -> Path:
    """Write ``strategy``'s declared state after ``server_round`` to ``path`` (a ``.npz`` bundle) atomically."""
    arrays: dict[str, np.ndarray] = {}
    name = type(strategy).name
    state = {field: encode(value, arrays, f"{name}.{field}") for field, value in capture(strategy).items()}
    meta = {"format": FORMAT, "strategy": name, "round": server_round, "state": state}
    write_bundle(path, arrays, meta)
    return Path(path)


def load_checkpoint(path: Path | str, strategy_name: str, what: str = "checkpoint") -> dict[str, Any]:
    """Read a file written by :func:`save_state` for the strategy called ``strategy_name``.

    Returns ``{"format", "strategy", "round", "state"}`` with the state's values rebuilt.

    Raises
    ------
    ValueError
        If the file is missing, a pickle (an older umbel's ``checkpoint.pkl``), of another
        format, incomplete, or written by another strategy.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"The 'resume-from' parameter of the run config must name a {CHECKPOINT_FILE} file. "
            f"Got {str(path)!r} instead (no such file)."
        )
    arrays, meta = read_bundle(path, what)
    if meta.get("format") != FORMAT:
        raise StoreError(f"The {what} {str(path)!r} must be of format {FORMAT!r}. Got {meta.get('format')!r} instead.")
    missing = sorted({"strategy", "round", "state"} - set(meta))
    if missing or not isinstance(meta["state"], dict) or "history" not in meta["state"]:
        raise StoreError(f"The {what} {str(path)!r} is incomplete: it lacks {missing or ['state.history']}.")
    if meta["strategy"] != strategy_name:
        raise StoreError(
            f"The {what} {str(path)!r} must be written by strategy {strategy_name!r}. "
            f"Got one written by {meta['strategy']!r} instead."
        )
    state = {field: decode(value, arrays, f"{strategy_name}.{field}") for field, value in meta["state"].items()}
    return {**meta, "state": state}


def rebind_clients(saved: dict[int, ClientInfo], found: dict[int, ClientInfo]) -> dict[int, ClientInfo]:
    """The saved clients with the node ids of this run (node ids change between runs).

    Raises
    ------
    RuntimeError
        If a saved partition has no node in this run.
    """
    missing = sorted(set(saved) - set(found))
    if missing:
        raise RuntimeError(f"Cannot resume: partitions {missing} of the checkpoint have no node in this run.")
    return {pid: dataclasses.replace(info, node_id=found[pid].node_id) for pid, info in saved.items()}


def restore(strategy: Any, checkpoint: Mapping[str, Any], found: dict[int, ClientInfo] | None = None) -> None:
    """Load a :func:`load_checkpoint` payload's state onto ``strategy``.

    With ``found`` (this run's clients) the clients carry this run's node ids (``rebind_clients``).

    Raises
    ------
    StoreError
        If the state holds a field ``strategy`` does not declare.
    """
    state = dict(checkpoint["state"])
    extra = sorted(set(state) - declared(type(strategy)))
    if extra:
        raise StoreError(
            f"The checkpoint's state must hold only the fields {type(strategy).__name__} declares. "
            f"Got {extra} as well instead."
        )
    if found is not None:
        rebound = rebind_clients({**state["clients"], **state["waiting"]}, found)
        state["clients"] = {pid: rebound[pid] for pid in state["clients"]}
        state["waiting"] = {pid: rebound[pid] for pid in state["waiting"]}
    state["history"] = [r if isinstance(r, RoundRecord) else RoundRecord.from_dict(r) for r in state["history"]]
    for name, value in state.items():
        setattr(strategy, name, value)


class Checkpoints:
    """When a run saves its state (``checkpoint_to``), and the checkpoint it resumes from (``resume``)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.every = 0
        self.pending: dict[str, Any] | None = None  # a ``load_checkpoint`` payload not restored yet

    def save_if_due(self, strategy: Any, server_round: int, last_round: int) -> None:
        """Save ``strategy``'s state after every ``every``-th round and after the last one."""
        if self.path is not None and self.every and (server_round % self.every == 0 or server_round == last_round):
            save_state(strategy, server_round, self.path)

    def resume_onto(self, strategy: Any, found: dict[int, ClientInfo]) -> int:
        """Restore the pending checkpoint onto ``strategy`` with this run's clients; the first round still to run."""
        checkpoint = self.pending
        if checkpoint is None:
            raise RuntimeError("No checkpoint to resume from: call resume() first.")
        restore(strategy, checkpoint, found)
        self.pending = None
        log(
            INFO,
            "Resuming %s after round %d with %d clients",
            type(strategy).name,
            checkpoint["round"],
            len(strategy.clients),
        )
        return int(checkpoint["round"]) + 1
