"""A client's own data on its own disk: read, check against the run config, split.

Three formats, chosen by ``data-format`` or detected:

- ``hf``: a Hugging Face ``datasets`` folder written by ``Dataset.save_to_disk`` (what
  ``flwr-datasets create`` writes per partition), read with ``datasets.load_from_disk``; a
  ``DatasetDict``'s splits are joined. Columns: ``x-column`` or the first of ``image``,
  ``img``, ``x``; ``y-column`` or the first of ``label``, ``y``.
- ``imagefolder``: a torchvision ``ImageFolder`` tree, one sub-folder per class. Folder names
  that are integers are the class ids (a client may hold only some classes); other names are
  allowed only when every class has a folder, and then map in sorted order, as torchvision does.
- ``npz``: an ``.npz`` file (or a folder holding exactly one) with arrays ``x`` and ``y``
  (or the columns named by ``x-column`` / ``y-column``).

Images may be ``(n, C, H, W)``, ``(n, H, W, C)`` or, for one channel, ``(n, H, W)``;
``uint8`` pixels are scaled to [0, 1], other inputs are cast to ``float32``. The samples are
split into train / validation / local test by seeded fractions that depend only on the run's
seed and the partition id, so a deployment and its simulation rehearsal split alike. Every
error names the node (partition id), the path and what was expected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.validation import check_choice, check_float, check_int, check_str

FORMATS: tuple[str, ...] = ("auto", "hf", "imagefolder", "npz")
X_COLUMNS: tuple[str, ...] = ("image", "img", "x")
Y_COLUMNS: tuple[str, ...] = ("label", "y")
IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm")
_HF_MARKERS = ("state.json", "dataset_dict.json", "dataset_info.json")
_OWNER = "the run config"


class ClientDataError(ValueError):
    """A client's own data is missing, unreadable or disagrees with the run config."""


@dataclass(frozen=True)
class FolderSpec:
    """What the run config says a client's own data must look like, and how to split it.

    Attributes
    ----------
    num_classes : int
        Labels must lie in ``[0, num_classes - 1]``; 0 means regression (float targets).
    input_shape : tuple of int
        ``(C, H, W)`` for images, ``(F,)`` for tabular inputs.
    data_format : {"auto", "hf", "imagefolder", "npz"}
    x_column, y_column : str
        Column (or ``.npz`` array) names; ``""`` detects them.
    test_fraction, val_fraction : float
        Shares of the client's samples held out as local test and validation data.
    seed : int
        The run's seed.
    """

    num_classes: int
    input_shape: tuple[int, ...]
    data_format: str = "auto"
    x_column: str = ""
    y_column: str = ""
    test_fraction: float = 0.2
    val_fraction: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_int(self.num_classes, "num-classes", _OWNER, low=0)
        check_choice(self.data_format, "data-format", _OWNER, FORMATS)
        check_str(self.x_column, "x-column", _OWNER)
        check_str(self.y_column, "y-column", _OWNER)
        check_float(self.test_fraction, "test-fraction", _OWNER, low=0.0, high=1.0, closed=(True, False))
        check_float(self.val_fraction, "val-fraction", _OWNER, low=0.0, high=1.0, closed=(True, False))
        if self.test_fraction + self.val_fraction >= 1.0:
            raise ValueError(
                "The 'val-fraction' parameter of the run config must leave room for training: "
                "test-fraction + val-fraction < 1. "
                f"Got {self.val_fraction} with test-fraction {self.test_fraction} instead."
            )
        check_int(self.seed, "seed", _OWNER, low=0)


@dataclass(frozen=True, eq=False)
class LocalSplits:
    """A client's own samples, model-ready and split; ``class_counts`` are of the train split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_counts: tuple[int, ...]


def _error(pid: int | None, path: Path | str, expected: str, got: str) -> ClientDataError:
    node = "" if pid is None else f" of node partition-id={pid}"
    return ClientDataError(f"The data{node} at '{path}' must {expected}. Got {got} instead.")


def detect_format(path: Path, pid: int | None = None) -> str:
    """``"hf"``, ``"imagefolder"`` or ``"npz"`` from what ``path`` holds.

    Raises
    ------
    ClientDataError
        If ``path`` is missing or empty, or its content is none of the formats.
    """
    if not path.exists():
        raise _error(pid, path, "be an existing folder or .npz file", "a path that does not exist")
    if path.is_file():
        if path.suffix == ".npz":
            return "npz"
        raise _error(pid, path, "be a folder or an .npz file", f"a file with suffix {path.suffix!r}")
    entries = sorted(path.iterdir())
    if not entries:
        raise _error(pid, path, "hold the client's data", "an empty folder")
    names = {e.name for e in entries}
    if names & set(_HF_MARKERS):
        return "hf"
    if len([e for e in entries if e.suffix == ".npz"]) == 1:
        return "npz"
    subdirs = [e for e in entries if e.is_dir()]
    if subdirs and any(_images_in(d) for d in subdirs):
        return "imagefolder"
    raise _error(
        pid,
        path,
        "be a Hugging Face save_to_disk folder (state.json), an ImageFolder tree "
        "(one sub-folder of images per class) or an .npz file with arrays x and y",
        f"a folder holding {sorted(names)[:8]}",
    )


def read_folder(path: str | Path, spec: FolderSpec, pid: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read and check every sample at ``path``.

    Returns
    -------
    x : ndarray of shape (n, *input_shape), float32
    y : ndarray of shape (n,), int64 labels (float32 targets when ``num_classes == 0``)

    Raises
    ------
    ClientDataError
        Naming the node, the path and what was expected, for a missing or empty folder, an
        unknown format, unreadable files, a wrong sample shape or a label outside the classes.
    """
    path = Path(path).expanduser()
    x, y = read_raw(path, spec, pid)
    x = _to_float(_channels_first(x, spec.input_shape, pid, path))
    return x, _labels(y, spec.num_classes, pid, path)


def read_raw(path: Path, spec: FolderSpec, pid: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The samples and labels at ``path`` as stored (pixels not scaled, layout not changed).

    ``spec`` gives the format, the columns and, for ImageFolder, the classes and channels
    (``num_classes == 0``: every class folder is a class; an ``input_shape`` that is not
    ``(C, H, W)``: images keep their own mode).

    Raises
    ------
    ClientDataError
        As :func:`read_folder`, for everything but shapes and label ranges.
    """
    fmt = detect_format(path, pid) if spec.data_format == "auto" else spec.data_format
    if not path.exists():
        raise _error(pid, path, "be an existing folder or .npz file", "a path that does not exist")
    reader = {"hf": _read_hf, "imagefolder": _read_imagefolder, "npz": _read_npz}[fmt]
    x, y = reader(path, spec, pid)
    if len(x) != len(y):
        raise _error(pid, path, "hold as many labels as samples", f"{len(x)} samples and {len(y)} labels")
    if len(y) == 0:
        raise _error(pid, path, "hold at least one sample", "an empty data set")
    return x, y


def split_samples(x: np.ndarray, y: np.ndarray, spec: FolderSpec, pid: int, path: str | Path = "") -> LocalSplits:
    """Split into train / validation / local test by ``spec``'s fractions, seeded by (seed, pid).

    A held-out share with a positive fraction gets at least one sample; train keeps at least one.

    Raises
    ------
    ClientDataError
        If there are fewer samples than the splits need.
    """
    n = len(y)
    n_test = max(1, round(spec.test_fraction * n)) if spec.test_fraction > 0 else 0
    n_val = max(1, round(spec.val_fraction * n)) if spec.val_fraction > 0 else 0
    if n - n_test - n_val < 1:
        raise _error(
            pid,
            path,
            f"hold at least {n_test + n_val + 1} samples for the splits (test-fraction "
            f"{spec.test_fraction}, val-fraction {spec.val_fraction}, and 1 to train)",
            f"{n} samples",
        )
    order = np.random.default_rng([spec.seed, pid, 15]).permutation(n)
    test, val, train = (
        np.sort(order[:n_test]),
        np.sort(order[n_test : n_test + n_val]),
        np.sort(order[n_test + n_val :]),
    )
    counts = np.bincount(y[train], minlength=spec.num_classes) if spec.num_classes else np.zeros(0, np.int64)
    return LocalSplits(x[train], y[train], x[val], y[val], x[test], y[test], tuple(int(c) for c in counts))


def load_client_folder(path: str | Path, spec: FolderSpec, pid: int) -> LocalSplits:
    """:func:`read_folder` then :func:`split_samples`: one client's model-ready splits."""
    x, y = read_folder(path, spec, pid)
    return split_samples(x, y, spec, pid, path)


def read_federation(root: str | Path) -> dict:
    """The ``federation.json`` that ``umbel export`` writes in ``root`` (or the file itself).

    Raises
    ------
    ClientDataError
        If the file is missing or lacks ``num-partitions``, ``num-classes``, ``input-shape``.
    """
    path = Path(root).expanduser()
    path = path / "federation.json" if path.is_dir() else path
    try:
        meta = json.loads(path.read_text())
        int(meta["num-partitions"]), int(meta["num-classes"]), list(meta["input-shape"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ClientDataError(
            f"The federation file '{path}' must be a JSON object with num-partitions, "
            f"num-classes and input-shape (as umbel export writes). Got an error: {err!r} "
            "instead."
        ) from err
    return meta


def read_truth(path: str | Path) -> dict[int, int]:
    """Each partition's true group from a ``federation.json`` (key ``true-groups``).

    Raises
    ------
    ClientDataError
        If the file cannot be read or has no ``true-groups`` list of ints.
    """
    meta = read_federation(path)
    groups = meta.get("true-groups")
    if not isinstance(groups, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        raise ClientDataError(
            f"The 'truth-path' parameter of the run config must name a federation.json with "
            f"a 'true-groups' list of ints. Got {str(groups)[:80]} in '{path}' instead."
        )
    return dict(enumerate(groups))


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _column(available: list[str], wanted: str, detect: tuple[str, ...], what: str, pid: int | None, path: Path) -> str:
    if wanted:
        if wanted not in available:
            raise _error(
                pid, path, f"have the {what} column {wanted!r} (run-config '{what}-column')", f"columns {available}"
            )
        return wanted
    for name in detect:
        if name in available:
            return name
    raise _error(
        pid,
        path,
        f"have a {what} column named one of {detect} (or set run-config '{what}-column')",
        f"columns {available}",
    )


def _read_hf(path: Path, spec: FolderSpec, pid: int | None) -> tuple[np.ndarray, np.ndarray]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as err:
        raise _error(
            pid, path, "be a folder written by datasets' save_to_disk", f"an unreadable folder ({err})"
        ) from err
    parts = list(loaded.values()) if isinstance(loaded, datasets.DatasetDict) else [loaded]
    columns = list(parts[0].column_names)
    x_col = _column(columns, spec.x_column, X_COLUMNS, "x", pid, path)
    y_col = _column(columns, spec.y_column, Y_COLUMNS, "y", pid, path)
    xs, ys = [], []
    for part in parts:
        batch = part.select_columns([x_col, y_col]).with_format("numpy")[:]
        x = batch[x_col]
        if x.dtype == object:
            try:
                x = np.stack(list(x))
            except ValueError as err:
                raise _error(
                    pid, path, f"hold samples of one shape {spec.input_shape}", f"samples of different shapes ({err})"
                ) from err
        xs.append(x)
        ys.append(np.asarray(batch[y_col]))
    return np.concatenate(xs), np.concatenate(ys)


def _read_npz(path: Path, spec: FolderSpec, pid: int | None) -> tuple[np.ndarray, np.ndarray]:
    file = path if path.is_file() else next(p for p in sorted(path.iterdir()) if p.suffix == ".npz")
    try:
        with np.load(file, allow_pickle=False) as arrays:
            names = list(arrays.files)
            x_col = _column(names, spec.x_column, ("x",) + X_COLUMNS[:2], "x", pid, file)
            y_col = _column(names, spec.y_column, Y_COLUMNS[::-1], "y", pid, file)
            return np.asarray(arrays[x_col]), np.asarray(arrays[y_col])
    except (OSError, ValueError, EOFError) as err:
        if isinstance(err, ClientDataError):
            raise
        raise _error(pid, file, "be a readable .npz file", f"an error: {err}") from err


def _read_imagefolder(path: Path, spec: FolderSpec, pid: int | None) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    folders = sorted(d for d in path.iterdir() if d.is_dir())
    if not folders:
        raise _error(pid, path, "hold one sub-folder of images per class (ImageFolder)", "no sub-folder")
    names = [d.name for d in folders]
    if all(n.isdigit() for n in names):
        label_of = {n: int(n) for n in names}
    elif spec.num_classes in (0, len(names)):  # 0: a whole data set, whose folders are all the classes
        label_of = {n: i for i, n in enumerate(names)}
    else:
        raise _error(
            pid,
            path,
            f"name its class folders by class id (0 .. {spec.num_classes - 1}), or hold "
            f"exactly num-classes={spec.num_classes} folders",
            f"folders {names[:12]}",
        )
    mode = {1: "L", 3: "RGB"}.get(spec.input_shape[0]) if len(spec.input_shape) == 3 else None
    xs, ys = [], []
    for folder in folders:
        for file in _images_in(folder):
            try:
                with Image.open(file) as image:
                    bands = len(image.getbands())
                    if mode is not None and image.mode not in ("P", "1") and bands != spec.input_shape[0]:
                        raise _error(
                            pid,
                            file,
                            f"be an image with {spec.input_shape[0]} channel(s) (run-config 'input-shape')",
                            f"mode {image.mode} with {bands}",
                        )
                    xs.append(np.asarray(image.convert(mode) if mode and image.mode != mode else image))
            except OSError as err:
                raise _error(pid, file, "be a readable image", f"an error: {err}") from err
            ys.append(label_of[folder.name])
    if not xs:
        raise _error(pid, path, "hold at least one image in its class folders", "no image file")
    shapes = {a.shape for a in xs}
    if len(shapes) > 1:
        raise _error(pid, path, f"hold images of one shape, {spec.input_shape}", f"shapes {sorted(shapes)[:4]}")
    return np.stack(xs), np.asarray(ys, dtype=np.int64)


def _channels_first(x: np.ndarray, shape: tuple[int, ...], pid: int | None, path: Path) -> np.ndarray:
    got = tuple(x.shape[1:])
    if got == shape:
        return x
    if len(shape) == 3:
        channels, height, width = shape
        if got == (height, width) and channels == 1:
            return x[:, None]
        if got == (height, width, channels):
            return np.ascontiguousarray(np.moveaxis(x, -1, 1))
    if len(shape) == 1 and int(np.prod(got)) == shape[0] and x.ndim > 1:
        return x.reshape(len(x), -1)
    raise _error(pid, path, f"hold samples of shape {shape} (run-config 'input-shape')", f"samples of shape {got}")


def _to_float(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise ClientDataError(f"The inputs must be numbers. Got dtype {x.dtype} instead.")
    return np.asarray(x, dtype=np.float32)


def _labels(y: np.ndarray, num_classes: int, pid: int | None, path: Path) -> np.ndarray:
    y = np.asarray(y).reshape(len(y), -1)
    if y.shape[1] != 1:
        raise _error(pid, path, "hold one label per sample", f"labels of shape {y.shape}")
    y = y[:, 0]
    if num_classes == 0:
        return y.astype(np.float32)
    if not np.issubdtype(y.dtype, np.integer) and not (
        np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y))
    ):
        raise _error(pid, path, f"hold integer class labels in [0, {num_classes - 1}]", f"labels of dtype {y.dtype}")
    y = y.astype(np.int64)
    bad = (y < 0) | (y >= num_classes)
    if bad.any():
        raise _error(
            pid,
            path,
            f"hold labels in [0, {num_classes - 1}] (run-config 'num-classes' {num_classes})",
            f"label {int(y[bad][0])} ({int(bad.sum())} samples outside)",
        )
    return y
