"""Write a scenario's clients to disk as the folders real clients read (``umbel export``).

``DIR/partition_<i>/`` holds client ``i``'s samples (its train and local test samples
together: the client splits them again by the run's fractions) in one of the formats of
:mod:`common.local_data`, and ``DIR/federation.json`` the number of partitions, the classes,
the input shape and each partition's true group (the truth file of ``truth-path``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.scenarios import Partition, rotate_images
from common.sources import PARTITION_FOLDER
from common.validation import check_choice

EXPORT_FORMATS: tuple[str, ...] = ("hf", "npz", "imagefolder")
FEDERATION_FILE = "federation.json"


def partition_arrays(partition: Partition, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Client ``partition_id``'s raw samples (train then test): images rotated, labels mapped.

    Returns
    -------
    x : ndarray of shape (n, *input_shape), the dataset's dtype (``uint8`` pixels for images)
    y : ndarray of shape (n,)
    """
    split, ds = partition.clients[partition_id], partition.dataset
    x = np.concatenate([ds.x_train[split.train_idx], ds.x_test[split.test_idx]])
    y = np.concatenate([ds.y_train[split.train_idx], ds.y_test[split.test_idx]])
    if split.rotation:
        x = rotate_images(x, split.rotation)
    if split.label_map is not None:
        y = split.label_map[y]
    return x, y


def export_partition(partition: Partition, out: str | Path, fmt: str = "hf") -> Path:
    """Write every client of ``partition`` under ``out`` and return the ``federation.json`` path.

    Raises
    ------
    ValueError
        If ``fmt`` is unknown, ``out`` exists and is not empty, or ``imagefolder`` is asked
        for data that are not images.
    """
    check_choice(fmt, "format", "umbel export", EXPORT_FORMATS)
    info = partition.dataset.info
    if fmt == "imagefolder" and (len(info.input_shape) != 3 or info.input_shape[0] not in (1, 3)):
        raise ValueError(
            f"The 'format' parameter of umbel export must be 'hf' or 'npz' for data of shape "
            f"{info.input_shape} (ImageFolder holds 1- or 3-channel images). Got 'imagefolder' instead."
        )
    root = Path(out).expanduser()
    if root.exists() and any(root.iterdir()):
        raise ValueError(
            f"The 'out' parameter of umbel export must be a new or empty folder. Got '{root}', "
            "which holds files, instead."
        )
    root.mkdir(parents=True, exist_ok=True)
    writer = {"hf": _write_hf, "npz": _write_npz, "imagefolder": _write_imagefolder}[fmt]
    partitions = []
    for pid, split in enumerate(partition.clients):
        x, y = partition_arrays(partition, pid)
        folder = root / PARTITION_FOLDER.format(pid)
        writer(folder, x, y)
        partitions.append(
            {"partition-id": pid, "path": folder.name, "num-samples": len(y), "true-group": int(split.group)}
        )
    meta = {
        "num-partitions": len(partition.clients),
        "num-classes": info.num_classes,
        "input-shape": list(info.input_shape),
        "format": fmt,
        "true-groups": [p["true-group"] for p in partitions],
        "num-groups": partition.num_groups,
        "dataset": info.name,
        "scenario": partition.config.scenario,
        "seed": partition.config.seed,
        "partitions": partitions,
    }
    path = root / FEDERATION_FILE
    path.write_text(json.dumps(meta, indent=2) + "\n")
    return path


def _write_npz(folder: Path, x: np.ndarray, y: np.ndarray) -> None:
    folder.mkdir(parents=True)
    np.savez(folder / "data.npz", x=x, y=y)


def _write_hf(folder: Path, x: np.ndarray, y: np.ndarray) -> None:
    from datasets import Array2D, Array3D, Dataset, Features, Image, Sequence, Value
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    label = Value("int64") if np.issubdtype(y.dtype, np.integer) else Value("float32")
    if x.dtype == np.uint8 and x.ndim == 4 and x.shape[1] in (1, 3):
        images = x[:, 0] if x.shape[1] == 1 else np.moveaxis(x, 1, -1)
        features = Features({"image": Image(), "label": label})
        data = {"image": list(images), "label": y}
    else:
        kind = {2: Sequence(Value("float32")), 3: Array2D(x.shape[1:], "float32"), 4: Array3D(x.shape[1:], "float32")}[
            x.ndim
        ]
        features = Features({"x": kind, "label": label})
        data = {"x": x.astype(np.float32), "label": y}
    Dataset.from_dict(data, features=features).save_to_disk(str(folder))


def _write_imagefolder(folder: Path, x: np.ndarray, y: np.ndarray) -> None:
    from PIL import Image

    pixels = x if x.dtype == np.uint8 else np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)
    for i, (image, label) in enumerate(zip(pixels, y, strict=True)):
        target = folder / str(int(label))
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[0] if image.shape[0] == 1 else np.moveaxis(image, 0, -1)).save(target / f"{i:06d}.png")
