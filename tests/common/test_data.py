"""Tests for common.data: metadata, file parsing, fallbacks and scaling. No network is touched."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from common import data
from common.data import (
    DATASETS,
    Dataset,
    DataUnavailableError,
    dataset_info,
    load_dataset,
    read_idx,
    to_float,
)

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch, tmp_path):
    """Never download and never touch the real cache during tests."""

    def refuse(name, root):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(data, "_download", refuse)
    monkeypatch.setattr(data, "CACHE_ROOT", tmp_path / "cache")
    yield
    load_dataset.cache_clear()


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def _write_idx_set(folder: Path, n_train: int = 6, n_test: int = 4, gz: bool = True) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.arange(n_train, dtype=np.uint8) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": np.arange(n_test, dtype=np.uint8)[::-1] % 10,
    }
    for stem, array in arrays.items():
        if gz:
            with gzip.open(folder / f"{stem}.gz", "wb") as handle:
                handle.write(_idx_bytes(array))
        else:
            (folder / stem).write_bytes(_idx_bytes(array))
    return arrays


def test_dataset_info_covers_every_dataset():
    for name in DATASETS:
        info = dataset_info(name)
        assert info.name == name
        assert info.task == ("regression" if name == "regression" else "classification")
    assert dataset_info("cifar10").input_shape == (3, 32, 32)
    assert dataset_info("fashion-mnist").input_shape == (1, 28, 28)
    assert dataset_info("regression").num_classes == 0


def test_dataset_info_unknown_name_lists_datasets():
    with pytest.raises(ValueError, match=r"The 'dataset' parameter .*'svhn'.*Got 'imagenet'"):
        dataset_info("imagenet")


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist not installed")
def test_real_fashion_mnist():
    ds = load_dataset("fashion-mnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_train.dtype == np.uint8
    assert ds.x_test.shape == (10000, 1, 28, 28)
    assert ds.y_train.dtype == np.int64
    assert np.all(np.bincount(ds.y_train) == 6000)
    assert np.all(np.bincount(ds.y_test) == 1000)
    assert not ds.x_train.flags.writeable
    assert load_dataset("fashion-mnist") is ds
    x = to_float(ds.info, ds.x_train[:2000])
    assert x.dtype == np.float32
    assert abs(float(x.mean())) < 0.1 and abs(float(x.std()) - 1.0) < 0.1


def test_read_idx_gz_and_plain(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    with gzip.open(tmp_path / "a.gz", "wb") as handle:
        handle.write(_idx_bytes(images))
    (tmp_path / "b").write_bytes(_idx_bytes(images))
    np.testing.assert_array_equal(read_idx(tmp_path / "a.gz"), images)
    np.testing.assert_array_equal(read_idx(tmp_path / "b"), images)


@pytest.mark.parametrize(
    "payload, message",
    [
        (_idx_bytes(np.zeros((2, 3), np.uint8))[:-1], "truncated or corrupt"),
        (b"\x00\x00\x0d\x01" + b"\x00" * 8, "bad magic"),
        (b"\x00\x00\x08\x03\x00", "truncated inside its header"),
    ],
)
def test_read_idx_corrupt(tmp_path, payload, message):
    path = tmp_path / "broken-idx"
    path.write_bytes(payload)
    with pytest.raises(ValueError, match=message) as err:
        read_idx(path)
    assert "broken-idx" in str(err.value)


def test_read_idx_truncated_gzip(tmp_path):
    good = gzip.compress(_idx_bytes(np.zeros((50, 28, 28), np.uint8)))
    path = tmp_path / "cut.gz"
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="cut.gz"):
        read_idx(path)


@pytest.mark.parametrize("layout", ["", "mnist", "MNIST/raw"])
def test_load_mnist_from_data_dir_layouts(tmp_path, layout):
    arrays = _write_idx_set(tmp_path / "d" / layout, gz=layout != "mnist")
    ds = load_dataset("mnist", data_dir=str(tmp_path / "d"))
    assert ds.x_train.shape == (6, 1, 28, 28) and ds.x_test.shape == (4, 1, 28, 28)
    np.testing.assert_array_equal(ds.x_train[:, 0], arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(ds.y_test, arrays["t10k-labels-idx1-ubyte"])
    assert ds.y_train.dtype == np.int64


def test_mismatched_idx_counts_rejected(tmp_path):
    folder = tmp_path / "d"
    _write_idx_set(folder, gz=False)
    (folder / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(5, np.uint8)))
    with pytest.raises(ValueError, match="inconsistent"):
        load_dataset("mnist", data_dir=str(folder))


def test_load_cifar10_tiny(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), b"labels": [3, 9]}
        batches[name] = batch
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    ds = load_dataset("cifar10", data_dir=str(tmp_path))
    assert ds.x_train.shape == (10, 3, 32, 32) and ds.x_test.shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(ds.x_train[0].reshape(-1), batches["data_batch_1"][b"data"][0])
    np.testing.assert_array_equal(ds.y_test, [3, 9])
    x = to_float(ds.info, ds.x_train)
    assert x.shape == (10, 3, 32, 32) and x.dtype == np.float32


def test_load_cifar10_corrupt_batch(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="data_batch_1"):
        load_dataset("cifar10", data_dir=str(tmp_path))


def test_load_svhn_tiny(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (32, 32, 3, 4), dtype=np.uint8)
    for split in ("train", "test"):
        savemat(tmp_path / f"{split}_32x32.mat", {"X": x, "y": np.array([[10], [1], [2], [10]])})
    ds = load_dataset("svhn", data_dir=str(tmp_path))
    assert ds.x_train.shape == (4, 3, 32, 32)
    np.testing.assert_array_equal(ds.y_train, [0, 1, 2, 0])
    np.testing.assert_array_equal(ds.x_train[2, 1, 5, 7], x[5, 7, 1, 2])


def test_missing_files_explain_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "SYSTEM_DIRS", {"fashion-mnist": (str(tmp_path / "nowhere"),)})
    with pytest.raises(DataUnavailableError) as err:
        load_dataset("fashion-mnist")
    message = str(err.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert "'data-dir'" in message and "nowhere" in message and "cache" in message
    assert "network disabled" in message
    assert isinstance(err.value, FileNotFoundError)


def test_given_data_dir_is_the_only_place_searched(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataUnavailableError) as err:
        load_dataset("fashion-mnist", data_dir=str(tmp_path / "empty"))
    assert (
        "empty" in str(err.value)
        and "/usr/share/datasets" not in str(err.value).split("were not found in")[1].split("and the")[0]
    )


def test_data_dir_that_does_not_exist_is_named(tmp_path):
    pattern = r"The 'data-dir' parameter of the run config must be an existing directory\. Got '.*nope' instead"
    with pytest.raises(DataUnavailableError, match=pattern):
        load_dataset("fashion-mnist", data_dir=str(tmp_path / "nope"))


def test_missing_cifar_mentions_data_dir(tmp_path):
    with pytest.raises(DataUnavailableError, match="'data-dir'"):
        load_dataset("cifar10", data_dir=str(tmp_path))


def test_download_fallback_is_used(tmp_path, monkeypatch):
    calls = []

    def fake_download(name, root):
        calls.append(name)
        _write_idx_set(root / "MNIST" / "raw")

    monkeypatch.setattr(data, "_download", fake_download)
    ds = load_dataset("mnist")
    assert calls == ["mnist"] and ds.x_train.shape == (6, 1, 28, 28)


def test_regression_has_no_files():
    with pytest.raises(ValueError, match="linear-regression"):
        load_dataset("regression")


def test_digits_stratified_seeded_split():
    ds = load_dataset("digits", seed=0)
    assert isinstance(ds, Dataset)
    assert ds.x_train.shape[1:] == (1, 8, 8) and ds.x_train.dtype == np.float32
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    assert len(ds.y_train) + len(ds.y_test) == 1797
    total = np.bincount(ds.y_train) + np.bincount(ds.y_test)
    np.testing.assert_array_equal(np.bincount(ds.y_test), np.round(total / 6).astype(int))
    again = load_dataset("digits", seed=0)
    other = load_dataset("digits", seed=1)
    assert again is ds
    assert not np.array_equal(other.y_test, ds.y_test) or not np.array_equal(other.x_test, ds.x_test)
    np.testing.assert_array_equal(to_float(ds.info, ds.x_train), ds.x_train)


def test_digits_are_scikit_learns_whether_read_from_its_csv_or_from_load_digits(monkeypatch):
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, target = data._digits_images()
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(target, bunch.target)
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)  # no CSV where sklearn keeps it
    images, target = data._digits_images()
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(target, bunch.target)


def test_a_digits_client_does_not_import_scikit_learn():
    """A ClientApp process loading digits skips sklearn.datasets (SciPy, pandas: about 1.6 CPU s)."""
    import subprocess
    import sys

    code = (
        "import sys; from common.data import load_dataset; ds = load_dataset('digits', seed=0); "
        "assert len(ds.y_train) + len(ds.y_test) == 1797; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy', 'pandas')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]", out.stdout[:500]


def test_bad_arguments():
    with pytest.raises(ValueError, match="'seed' parameter"):
        load_dataset("digits", seed=-1)
    with pytest.raises(ValueError, match="'data-dir' parameter"):
        load_dataset("digits", data_dir=3)  # type: ignore[arg-type]


class _RunsCode:
    """Unpickling this calls ``os.system``: what a tampered batch would do."""

    def __reduce__(self):
        import os

        return (os.system, ("echo pwned > /dev/null",))


def test_a_cifar10_batch_that_names_anything_but_numpy_arrays_is_refused_before_it_runs(tmp_path, monkeypatch):
    import os

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 9], b"x": _RunsCode()}
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    called = []
    monkeypatch.setattr(os, "system", lambda cmd: called.append(cmd))
    with pytest.raises(ValueError, match=r"data_batch_1.*names posix\.system"):
        load_dataset("cifar10", data_dir=str(tmp_path))
    assert called == []
