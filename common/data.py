"""Datasets: metadata, loading from local files, and model-ready scaling.

Images are kept as raw ``uint8`` pixels in ``(n, C, H, W)`` layout so that scenarios can
rotate them exactly; :func:`to_float` turns them into standardised ``float32``. Loaded
datasets are cached per process and their arrays are read-only.

A given ``data-dir`` (run-config) is the one place searched, and torchvision downloads into
it when the files are missing. Without one, files are looked for in system locations (Debian's
``dataset-fashion-mnist`` package), then in ``~/.cache/umbel/<name>``, where torchvision
downloads them as a last resort. When all fails a :class:`DataUnavailableError` says how to
get them.

The user's own whole dataset is ``"hf-disk:PATH"``, ``"npz:PATH"`` or ``"imagefolder:PATH"``
(read by :mod:`common.local_data`), which scenarios partition like a built-in one. Its classes
(largest label + 1) and input shape come from the data, so :func:`dataset_info` reads it;
a seeded sixth of each class is its test set, as for ``digits``; ``uint8`` pixels are only
scaled to [0, 1].
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.validation import check_int, check_str

DATASETS: tuple[str, ...] = ("fashion-mnist", "mnist", "cifar10", "svhn", "digits", "regression")
# "<prefix>:PATH" names the user's own whole dataset in that format (common.local_data.FORMATS).
PATH_PREFIXES: dict[str, str] = {"hf-disk": "hf", "npz": "npz", "imagefolder": "imagefolder"}
TASKS: tuple[str, ...] = ("classification", "regression")

_INFO: dict[str, tuple[str, int, tuple[int, ...]]] = {
    "fashion-mnist": ("classification", 10, (1, 28, 28)),
    "mnist": ("classification", 10, (1, 28, 28)),
    "cifar10": ("classification", 10, (3, 32, 32)),
    "svhn": ("classification", 10, (3, 32, 32)),
    "digits": ("classification", 10, (1, 8, 8)),
    "regression": ("regression", 0, (1,)),
}

# Per-channel mean and std of the [0, 1]-scaled training images (the usual published values).
_NORMALISATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
}

_DEBIAN_FASHION = "/usr/share/datasets/fashion-mnist"  # where dataset-fashion-mnist installs
SYSTEM_DIRS: dict[str, tuple[str, ...]] = {"fashion-mnist": (_DEBIAN_FASHION,)}
CACHE_ROOT: Path = Path.home() / ".cache" / "umbel"

_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_TORCHVISION_FOLDER = {"fashion-mnist": "FashionMNIST", "mnist": "MNIST"}
_CIFAR_FOLDER = "cifar-10-batches-py"
_CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
_SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")
_OWNER = "load_dataset"


class DataUnavailableError(FileNotFoundError):
    """The dataset's files were found nowhere and could not be downloaded."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a dataset.

    Attributes
    ----------
    name : str
        One of :data:`DATASETS`.
    task : str
        ``"classification"`` or ``"regression"``.
    num_classes : int
        Number of classes; 0 for regression.
    input_shape : tuple of int
        ``(C, H, W)`` for images, ``(F,)`` for tabular or regression inputs.
    """

    name: str
    task: str
    num_classes: int
    input_shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Dataset:
    """Train and test arrays of one dataset.

    Attributes
    ----------
    info : DatasetInfo
    x_train, x_test : ndarray
        Images: ``uint8`` of shape ``(n, C, H, W)``; digits and regression: ``float32``.
    y_train, y_test : ndarray of shape (n,)
        ``int64`` labels, or ``float32`` targets for regression.
    """

    info: DatasetInfo
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def dataset_info(name: str) -> DatasetInfo:
    """Return the metadata of dataset ``name`` without touching any file.

    A ``"<prefix>:PATH"`` dataset is read (once per process) to learn its classes and shape.

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`DATASETS` nor ``"<prefix>:PATH"`` with a prefix of
        :data:`PATH_PREFIXES`, or if such a dataset cannot be read.
    """
    check_dataset(name, "the run config")
    if path_dataset(name) is not None:
        return _path_arrays(name)[0]
    task, num_classes, shape = _INFO[name]
    return DatasetInfo(name=name, task=task, num_classes=num_classes, input_shape=shape)


def path_dataset(name: str) -> tuple[str, str] | None:
    """``(format, path)`` of a ``"<prefix>:PATH"`` dataset name; ``None`` for other names."""
    prefix, sep, path = str(name).partition(":")
    return (PATH_PREFIXES[prefix], path) if sep and prefix in PATH_PREFIXES and path else None


def check_dataset(name: str, owner: str) -> str:
    """``name`` if it is one of :data:`DATASETS` or a ``"<prefix>:PATH"`` dataset.

    Raises
    ------
    ValueError
        In scikit-learn's form, naming ``'dataset'`` and both kinds of allowed values.
    """
    if path_dataset(name) is not None:
        return name
    if isinstance(name, str) and name in DATASETS:
        return name
    prefixes = ", ".join(f"'{p}:PATH'" for p in PATH_PREFIXES)
    raise ValueError(
        f"The 'dataset' parameter of {owner} must be one of {DATASETS} or the user's own "
        f"dataset as {prefixes}. Got {name!r} instead."
    )


def load_dataset(name: str, data_dir: str = "", seed: int = 0) -> Dataset:
    """Load dataset ``name`` (cached per process; arrays are read-only).

    Parameters
    ----------
    name : str
        One of :data:`DATASETS` except ``"regression"``, which the ``linear-regression``
        scenario generates.
    data_dir : str, default=""
        Directory searched first (also its ``<name>/`` and torchvision sub-folders).
    seed : int, default=0
        Seed of the train/test split of ``digits``; ignored by datasets with an official split.

    Raises
    ------
    ValueError
        If the name or seed is invalid, ``name`` is ``"regression"``, or a file is corrupt.
    DataUnavailableError
        If the files are nowhere to be found and cannot be downloaded.
    """
    info = dataset_info(name)
    check_str(data_dir, "data-dir", _OWNER)
    check_int(seed, "seed", _OWNER, low=0)
    if info.task == "regression":
        raise ValueError(
            "The 'regression' dataset has no files: its data are generated by the "
            "'linear-regression' scenario (build_partition with scenario='linear-regression')."
        )
    seeded = name == "digits" or path_dataset(name) is not None
    return _load_cached(name, data_dir, seed if seeded else 0)


def to_float(info: DatasetInfo, x: np.ndarray) -> np.ndarray:
    """Return model-ready ``float32`` inputs.

    Parameters
    ----------
    info : DatasetInfo
    x : ndarray of shape (n, C, H, W) or (n, F)
        ``uint8`` images are scaled to [0, 1] and standardised per channel with the dataset's
        usual mean and std; float inputs are only cast to ``float32``.

    Returns
    -------
    ndarray of the same shape, dtype float32
    """
    if x.dtype != np.uint8:
        return np.asarray(x, dtype=np.float32)
    channels = info.input_shape[0]
    mean, std = _NORMALISATION.get(info.name, ((0.0,) * channels, (1.0,) * channels))
    shape = (1, len(mean)) + (1,) * (x.ndim - 2)
    scaled = x.astype(np.float32) / np.float32(255.0)
    return (scaled - np.asarray(mean, np.float32).reshape(shape)) / np.asarray(std, np.float32).reshape(shape)


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, data_dir: str, seed: int) -> Dataset:
    info = dataset_info(name)
    if name == "digits":
        arrays = _load_digits(seed)
    elif path_dataset(name) is not None:
        _, x, y = _path_arrays(name)
        test = _test_rows(y, seed)
        arrays = (x[~test], y[~test], x[test], y[test])
    else:
        arrays = _load_files(name, data_dir)
    for array in arrays:
        array.setflags(write=False)
    return Dataset(info, *arrays)


load_dataset.cache_clear = _load_cached.cache_clear  # type: ignore[attr-defined]


def _load_digits(seed: int) -> tuple[np.ndarray, ...]:
    images, target = _digits_images()
    x = (images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = target.astype(np.int64)
    test = _test_rows(y, seed)
    return x[~test], y[~test], x[test], y[test]


def _digits_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: ``(1797, 8, 8)`` images of 0-16 and their labels.

    Read from the CSV that scikit-learn ships, as its ``load_digits`` does: importing
    ``sklearn.datasets`` would pull in SciPy and pandas, about 1.6 CPU s in every ClientApp process a
    deployment starts. ``load_digits`` itself where the file is not where scikit-learn keeps it.
    """
    spec = importlib.util.find_spec("sklearn")
    csv = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if csv is None or not csv.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with gzip.open(csv, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


def _test_rows(y: np.ndarray, seed: int) -> np.ndarray:
    """A seeded sixth of each class (rounded) as the test set: a boolean mask."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        test[members[: int(round(len(members) / 6))]] = True
    return test


@functools.lru_cache(maxsize=2)
def _path_arrays(name: str) -> tuple[DatasetInfo, np.ndarray, np.ndarray]:
    """Info, raw ``(n, C, H, W)`` or ``(n, F)`` samples and int64 labels of a path dataset."""
    from common.local_data import FolderSpec, read_raw

    fmt, path = path_dataset(name)  # type: ignore[misc]
    x, y = read_raw(Path(path).expanduser(), FolderSpec(0, (1,), data_format=fmt))
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = np.ascontiguousarray(np.moveaxis(x, -1, 1))
    elif x.ndim != 2 and x.ndim != 4:
        raise ValueError(
            f"The 'dataset' parameter of the run config must name samples of shape (n, F), (n, H, W), "
            f"(n, C, H, W) or (n, H, W, C). Got {name!r} with samples of shape {x.shape} instead."
        )
    if x.dtype != np.uint8:
        x = x.astype(np.float32)
    y = np.asarray(y).reshape(-1)
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError(
            f"The 'dataset' parameter of the run config must name data with integer class labels >= 0 "
            f"(every scenario splits by label or trains a classifier). Got {name!r} with labels of "
            f"dtype {y.dtype}, min {y.min()} instead."
        )
    y = y.astype(np.int64)
    for array in (x, y):
        array.setflags(write=False)
    return DatasetInfo(name, "classification", int(y.max()) + 1, tuple(int(s) for s in x.shape[1:])), x, y


def _load_files(name: str, data_dir: str) -> tuple[np.ndarray, ...]:
    searched, target = _search_dirs(name, data_dir)
    for folder in searched:
        if _complete(name, folder):
            return _read(name, folder)
    try:
        _download(name, target)
    except Exception as exc:  # torchvision raises many kinds (URLError, RuntimeError, ...)
        reason = f"{type(exc).__name__}: {exc}"
    else:
        for folder in _layouts(name, target):
            if _complete(name, folder):
                return _read(name, folder)
        reason = "the download finished but the expected files are not there"
    raise DataUnavailableError(_missing_message(name, searched, target, reason))


def _search_dirs(name: str, data_dir: str) -> tuple[list[Path], Path]:
    """Folders to look in, and where a download goes.

    A given ``data_dir`` is the one place (downloads go there too, as with torchvision's
    ``root``); without it, the system copy and then umbel's cache.
    """
    if data_dir:
        root = Path(data_dir).expanduser()
        if not root.is_dir():
            raise DataUnavailableError(
                f"The 'data-dir' parameter of the run config must be an existing directory. Got {data_dir!r} instead."
            )
        return _layouts(name, root), root
    dirs = [Path(d) for d in SYSTEM_DIRS.get(name, ())] + _layouts(name, CACHE_ROOT / name)
    return list(dict.fromkeys(dirs)), CACHE_ROOT / name


def _layouts(name: str, root: Path) -> list[Path]:
    if name == "cifar10":
        return [root / _CIFAR_FOLDER, root / name / _CIFAR_FOLDER, root]
    if name == "svhn":
        return [root, root / name]
    return [root, root / name, root / _TORCHVISION_FOLDER[name] / "raw"]


def _required(name: str) -> tuple[str, ...]:
    return {"cifar10": _CIFAR_FILES, "svhn": _SVHN_FILES}.get(name, _IDX_FILES)


def _complete(name: str, folder: Path) -> bool:
    if name in ("cifar10", "svhn"):
        return all((folder / f).is_file() for f in _required(name))
    return all(_idx_path(folder, f) is not None for f in _IDX_FILES)


def _idx_path(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _read(name: str, folder: Path) -> tuple[np.ndarray, ...]:
    if name == "cifar10":
        x_train, y_train = _read_cifar([folder / f for f in _CIFAR_FILES[:5]])
        x_test, y_test = _read_cifar([folder / "test_batch"])
    elif name == "svhn":
        x_train, y_train = read_svhn(folder / "train_32x32.mat")
        x_test, y_test = read_svhn(folder / "test_32x32.mat")
    else:
        paths = [_idx_path(folder, f) for f in _IDX_FILES]
        x_train, y_train, x_test, y_test = (read_idx(p) for p in paths)  # type: ignore[arg-type]
        x_train, x_test = x_train[:, None], x_test[:, None]
    for x, y, split in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        _check_pair(name, folder, split, x, y)
    return x_train, y_train.astype(np.int64), x_test, y_test.astype(np.int64)


def _check_pair(name: str, folder: Path, split: str, x: np.ndarray, y: np.ndarray) -> None:
    info = dataset_info(name)
    if x.shape[1:] != info.input_shape or len(x) != len(y):
        raise ValueError(
            f"The {split} files of {name} in {folder} are inconsistent: images of shape "
            f"{x.shape} with {len(y)} labels; expected images of shape (n, *{info.input_shape})"
            " and n labels."
        )
    if len(y) and (y.min() < 0 or y.max() >= info.num_classes):
        raise ValueError(
            f"The {split} labels of {name} in {folder} must lie in [0, {info.num_classes - 1}]; "
            f"found values in [{y.min()}, {y.max()}]."
        )


def read_idx(path: str | Path) -> np.ndarray:
    """Parse an IDX file of unsigned bytes (plain or ``.gz``).

    Returns
    -------
    ndarray of dtype uint8 and the shape stored in the header, e.g. (n, 28, 28) or (n,)

    Raises
    ------
    ValueError
        If the file is unreadable, has a bad magic number, or its size does not match its header.
    """
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as exc:
        raise ValueError(f"Cannot read IDX file {path}: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] == 0:
        raise ValueError(
            f"{path} is not an IDX file of unsigned bytes: bad magic number {raw[:4].hex()!r} "
            "(expected 000008 followed by the number of dimensions)."
        )
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"IDX file {path} is truncated inside its header.")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise ValueError(
            f"IDX file {path} is truncated or corrupt: header {dims} needs {expected} bytes "
            f"of data, found {len(raw) - header}."
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


# CIFAR-10's python batches are pickles (the data set's own format, the one pickle umbel reads):
# a dict of bytes, lists and one uint8 ndarray. Only numpy's array reconstruction may be named in
# them, so a tampered batch cannot make the unpickler call anything else.
_CIFAR_GLOBALS = frozenset(
    {(module, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray") for name in ("_reconstruct",)}
    | {("numpy", "ndarray"), ("numpy", "dtype")}
)


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_GLOBALS:
            raise pickle.UnpicklingError(
                f"a CIFAR-10 batch holds only numpy arrays, lists and bytes; it names {module}.{name}"
            )
        return super().find_class(module, name)


def _read_cifar(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                batch = _CifarUnpickler(handle, encoding="bytes").load()
            data = np.asarray(batch[b"data"], dtype=np.uint8)
            labels = np.asarray(batch[b"labels"], dtype=np.int64)
            xs.append(data.reshape(len(data), 3, 32, 32))
        except Exception as exc:  # unpickling a bad file can raise almost anything
            raise ValueError(f"Cannot read CIFAR-10 batch {path}: {exc!r}") from exc
        ys.append(labels)
    return np.concatenate(xs), np.concatenate(ys)


def read_svhn(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read an SVHN ``*_32x32.mat`` file.

    Returns
    -------
    x : ndarray of shape (n, 3, 32, 32), uint8
    y : ndarray of shape (n,), int64, with SVHN's label 10 mapped to digit 0

    Raises
    ------
    ValueError
        If the file is unreadable or lacks the ``X`` (32, 32, 3, n) and ``y`` arrays.
    """
    from scipy.io import loadmat

    try:
        mat = loadmat(str(path))
        x = np.asarray(mat["X"], dtype=np.uint8).transpose(3, 2, 0, 1)
        y = np.asarray(mat["y"], dtype=np.int64).reshape(-1)
    except Exception as exc:  # scipy raises several kinds for malformed files
        raise ValueError(f"Cannot read SVHN file {path}: {exc!r}") from exc
    y[y == 10] = 0
    return np.ascontiguousarray(x), y


def _download(name: str, root: Path) -> None:
    """Download ``name`` into ``root`` with torchvision (needs internet)."""
    from torchvision import datasets

    root.mkdir(parents=True, exist_ok=True)
    if name == "svhn":
        for split in ("train", "test"):
            datasets.SVHN(str(root), split=split, download=True)
        return
    cls = {"fashion-mnist": datasets.FashionMNIST, "mnist": datasets.MNIST}.get(name, datasets.CIFAR10)
    for train in (True, False):
        cls(str(root), train=train, download=True)


def _missing_message(name: str, searched: list[Path], target: Path, reason: str) -> str:
    suffix = "" if name in ("cifar10", "svhn") else "[.gz]"
    files = ", ".join(f + suffix for f in _required(name))
    places = "\n  ".join(str(p) for p in searched)
    fixes = []
    if name == "fashion-mnist":
        fixes.append(
            f"install the Debian package: `apt-get install dataset-fashion-mnist` (puts the files in {_DEBIAN_FASHION})"
        )
    fixes.append("set the 'data-dir' run-config parameter to a directory that holds the files")
    fixes.append(f"run once with internet access so torchvision can download them into {target}")
    return (
        f"The {name} files ({files}) were not found in:\n  {places}\n"
        f"and the torchvision download into {target} failed ({reason}).\n"
        "To fix this, " + "; or ".join(fixes) + "."
    )
