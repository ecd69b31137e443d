"""A client's own data on disk: the three formats, the checks, the split, export and read back."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from common.export import export_partition, partition_arrays
from common.local_data import (
    ClientDataError,
    FolderSpec,
    detect_format,
    load_client_folder,
    read_folder,
    read_truth,
    split_samples,
)
from common.scenarios import ScenarioConfig, build_partition, client_data
from common.sources import (
    FolderSource,
    ScenarioSource,
    data_source,
    folder_spec,
    parse_shape,
    run_info,
)

SPEC = FolderSpec(num_classes=4, input_shape=(1, 5, 6), test_fraction=0.25, seed=3)


def _samples(n=12, channels=1, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, channels, 5, 6), dtype=np.uint8)
    y = np.arange(n) % 4
    return x, y


def _write_hf(path, x, y, image=True, x_name="image", y_name="label"):
    from datasets import Array3D, Dataset, Features, Value
    from datasets import Image as HFImage

    if image:
        features = Features({x_name: HFImage(), y_name: Value("int64")})
        data = {x_name: list(x[:, 0]), y_name: y}
    else:
        features = Features({x_name: Array3D(x.shape[1:], "float32"), y_name: Value("int64")})
        data = {x_name: x.astype(np.float32), y_name: y}
    Dataset.from_dict(data, features=features).save_to_disk(str(path))


def _write_imagefolder(path, x, y):
    for i, (img, label) in enumerate(zip(x, y, strict=True)):
        (path / str(label)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img[0]).save(path / str(label) / f"{i}.png")


@pytest.mark.parametrize("fmt", ["hf", "npz", "imagefolder"])
def test_each_format_reads_the_pixels_and_labels_it_holds(tmp_path, fmt):
    x, y = _samples()
    folder = tmp_path / "client"
    if fmt == "hf":
        _write_hf(folder, x, y)
    elif fmt == "npz":
        folder.mkdir()
        np.savez(folder / "mine.npz", x=x, y=y)
    else:
        _write_imagefolder(folder, x, y)
    assert detect_format(folder) == fmt
    got_x, got_y = read_folder(folder, SPEC, pid=0)
    np.testing.assert_array_equal(_rows(got_x, got_y), _rows(x.astype(np.float32) / np.float32(255), y))
    assert got_x.dtype == np.float32 and got_y.dtype == np.int64


def test_hf_float_arrays_with_other_column_names_and_overrides(tmp_path):
    x, y = _samples()
    x = x.astype(np.float32) / 7.0
    _write_hf(tmp_path / "a", x, y, image=False, x_name="x", y_name="y")
    got_x, got_y = read_folder(tmp_path / "a", SPEC)
    np.testing.assert_allclose(got_x, x)  # float inputs are not rescaled
    np.testing.assert_array_equal(got_y, y)
    _write_hf(tmp_path / "b", x, y, image=False, x_name="pixels", y_name="digit")
    with pytest.raises(ClientDataError, match=r"x column named one of \('image', 'img', 'x'\)"):
        read_folder(tmp_path / "b", SPEC, pid=4)
    spec = FolderSpec(4, (1, 5, 6), x_column="pixels", y_column="digit")
    np.testing.assert_array_equal(read_folder(tmp_path / "b", spec)[1], y)


def test_channels_last_and_missing_channel_axes_become_channels_first(tmp_path):
    x, y = _samples(channels=3)
    np.savez(tmp_path / "hwc.npz", x=np.moveaxis(x, 1, -1), y=y)
    got, _ = read_folder(tmp_path / "hwc.npz", FolderSpec(4, (3, 5, 6)))
    np.testing.assert_allclose(got, x / 255.0, atol=1e-7)
    gray, _ = _samples()
    np.savez(tmp_path / "hw.npz", x=gray[:, 0], y=y)
    np.testing.assert_allclose(read_folder(tmp_path / "hw.npz", SPEC)[0], gray / 255.0, atol=1e-7)


def test_imagefolder_names_are_class_ids_even_when_a_client_holds_few_classes(tmp_path):
    x, y = _samples()
    keep = np.isin(y, [1, 3])
    _write_imagefolder(tmp_path / "c", x[keep], y[keep])
    _, got = read_folder(tmp_path / "c", SPEC)
    assert sorted(set(got.tolist())) == [1, 3]  # torchvision's ImageFolder would say 0 and 1


def test_imagefolder_with_named_classes_needs_every_class(tmp_path):
    x, y = _samples()
    names = np.array(["cat", "dog", "eel", "fox"])
    for i, (img, label) in enumerate(zip(x, y, strict=True)):
        (tmp_path / "n" / names[label]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img[0]).save(tmp_path / "n" / names[label] / f"{i}.png")
    np.testing.assert_array_equal(np.sort(read_folder(tmp_path / "n", SPEC)[1]), np.sort(y))
    with pytest.raises(ClientDataError, match="num-classes=5"):
        read_folder(tmp_path / "n", FolderSpec(5, (1, 5, 6)))


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "be an existing folder or .npz file. Got a path that does not exist"),
        ("empty", "hold the client's data. Got an empty folder"),
        ("unknown", "be a Hugging Face save_to_disk folder"),
        ("label", r"hold labels in \[0, 3\] \(run-config 'num-classes' 4\). Got label 7"),
        ("shape", r"hold samples of shape \(1, 5, 6\) \(run-config 'input-shape'\). Got samples of shape \(1, 6, 5\)"),
        ("few", "hold at least 2 samples for the splits"),
        ("rgb", r"be an image with 1 channel\(s\)"),
    ],
)
def test_bad_data_names_the_node_the_path_and_what_was_expected(tmp_path, case, expected):
    x, y = _samples()
    folder = tmp_path / "node-data"
    if case == "empty":
        folder.mkdir()
    elif case == "unknown":
        folder.mkdir()
        (folder / "data.csv").write_text("1,2\n")
    elif case == "label":
        y = y.copy()
        y[5] = 7
        _write_hf(folder, x, y)
    elif case == "shape":
        folder.mkdir()
        np.savez(folder / "d.npz", x=np.swapaxes(x, 2, 3), y=y)
    elif case == "few":
        folder.mkdir()
        np.savez(folder / "d.npz", x=x[:1], y=y[:1])
    elif case == "rgb":
        (folder / "2").mkdir(parents=True)
        Image.fromarray(np.zeros((5, 6, 3), np.uint8)).save(folder / "2" / "a.png")
    with pytest.raises(ClientDataError, match=expected) as err:
        load_client_folder(folder, SPEC, pid=7)
    assert "partition-id=7" in str(err.value)
    assert str(folder) in str(err.value)


def test_the_split_is_seeded_disjoint_complete_and_sized_by_the_fractions():
    x = np.arange(40, dtype=np.float32).reshape(40, 1, 1, 1)
    y = np.arange(40) % 4
    spec = FolderSpec(4, (1, 1, 1), test_fraction=0.2, val_fraction=0.1, seed=5)
    a = split_samples(x, y, spec, pid=2)
    b = split_samples(x, y, spec, pid=2)
    other = split_samples(x, y, spec, pid=3)
    assert (len(a.y_train), len(a.y_val), len(a.y_test)) == (28, 4, 8)
    ids = [s.ravel().astype(int) for s in (a.x_train, a.x_val, a.x_test)]
    assert sorted(np.concatenate(ids).tolist()) == list(range(40))
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert not np.array_equal(a.x_test, other.x_test)
    np.testing.assert_array_equal(y[ids[0]], a.y_train)  # labels travel with their samples
    assert a.class_counts == tuple(np.bincount(a.y_train, minlength=4))


def test_fractions_that_leave_nothing_to_train_are_refused():
    with pytest.raises(ValueError, match="'val-fraction'"):
        FolderSpec(4, (1, 5, 6), test_fraction=0.6, val_fraction=0.4)


def test_run_info_overrides_and_input_shape_parsing():
    assert run_info({"dataset": "digits"}).input_shape == (1, 8, 8)
    info = run_info({"dataset": "digits", "num-classes": 3, "input-shape": "3, 16,16"})
    assert (info.num_classes, info.input_shape, info.task) == (3, (3, 16, 16), "classification")
    with pytest.raises(ValueError, match="'input-shape'"):
        parse_shape("1,x,3")
    with pytest.raises(ValueError, match="'input-shape'"):
        parse_shape("1,0")


@pytest.fixture(scope="module")
def digits_partition():
    return build_partition(ScenarioConfig(dataset="digits", num_clients=5, groups=3, samples_per_label=15, seed=2))


@pytest.mark.parametrize("fmt", ["hf", "npz", "imagefolder"])
def test_export_writes_each_clients_samples_and_the_truth(tmp_path, digits_partition, fmt):
    meta_path = export_partition(digits_partition, tmp_path / "fed", fmt)
    meta = json.loads(meta_path.read_text())
    assert meta["num-partitions"] == 5 and meta["num-classes"] == 10 and meta["input-shape"] == [1, 8, 8]
    assert read_truth(meta_path) == dict(enumerate(digits_partition.true_groups().tolist()))
    spec = folder_spec({"dataset": "digits", "seed": 2})
    for pid in range(5):
        x, y = read_folder(tmp_path / "fed" / f"partition_{pid}", spec, pid)
        raw_x, raw_y = partition_arrays(digits_partition, pid)
        ref = client_data(digits_partition, pid)
        assert len(y) == len(ref.y_train) + len(ref.y_test)
        np.testing.assert_array_equal(np.sort(y), np.sort(raw_y))
        if fmt == "imagefolder":  # PNGs hold 8-bit pixels
            raw_x = np.rint(raw_x * 255) / 255
        np.testing.assert_allclose(_rows(x, y), _rows(raw_x, raw_y), atol=1e-6)


def _rows(x, y):
    """Samples as rows ``[label, pixels...]`` in lexicographic order (order-free comparison)."""
    rows = np.column_stack([y, x.reshape(len(x), -1)]).astype(np.float64)
    return rows[np.lexsort(rows.T[::-1])]


def test_export_refuses_a_folder_that_holds_files(tmp_path, digits_partition):
    (tmp_path / "x.txt").write_text("keep me")
    with pytest.raises(ValueError, match="'out' parameter of umbel export"):
        export_partition(digits_partition, tmp_path, "npz")


def test_a_simulated_client_reads_only_its_own_folder(tmp_path, digits_partition):
    export_partition(digits_partition, tmp_path, "npz")
    for pid in (0, 1, 3, 4):
        for file in (tmp_path / f"partition_{pid}").iterdir():
            file.unlink()
    source = data_source({"dataset": "digits", "data-path": str(tmp_path), "seed": 2})
    assert isinstance(source, FolderSource)
    data = source.client_data(2)
    assert len(data.y_train) + len(data.y_test) == len(partition_arrays(digits_partition, 2)[1])
    assert data.group == -1  # the client does not know its true group; the truth file does
    with pytest.raises(ClientDataError, match="partition-id=1"):
        source.client_data(1)


def test_node_config_data_path_wins_over_the_run_config_and_the_scenario(tmp_path, digits_partition):
    export_partition(digits_partition, tmp_path, "npz")
    rc = {"dataset": "digits", "data-path": "/nowhere", "seed": 2}
    node = data_source(rc, {"data-path": str(tmp_path / "partition_3")})
    assert isinstance(node, FolderSource) and node.path(0) == tmp_path / "partition_3"
    assert isinstance(data_source({"dataset": "digits"}), ScenarioSource)


def test_truth_file_without_groups_is_refused(tmp_path):
    (tmp_path / "federation.json").write_text(json.dumps({"num-partitions": 2, "num-classes": 3, "input-shape": [4]}))
    with pytest.raises(ClientDataError, match="'truth-path'"):
        read_truth(tmp_path)


@pytest.fixture(scope="module")
def whole_digits_npz(tmp_path_factory):
    """All of digits as the user's own whole dataset: (n, H, W) uint8 pixels and labels."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    path = tmp_path_factory.mktemp("whole") / "digits.npz"
    np.savez(path, x=(bunch.images * 15).astype(np.uint8), y=bunch.target)
    return path, bunch


def test_a_path_dataset_is_partitioned_by_a_label_scenario(whole_digits_npz):
    path, bunch = whole_digits_npz
    cfg = ScenarioConfig(dataset=f"npz:{path}", num_clients=4, groups=2, samples_per_label=20, seed=1)
    part = build_partition(cfg)
    assert part.dataset.info.input_shape == (1, 8, 8) and part.dataset.info.num_classes == 10
    assert len(part.dataset.y_train) + len(part.dataset.y_test) == len(bunch.target)
    for pid, split in enumerate(part.clients):
        data = client_data(part, pid)
        labels = set(data.y_train.tolist())
        assert len(labels) == 2 and labels >= set(data.y_test.tolist())
        assert data.x_train.max() <= 1.0 and data.x_train.dtype == np.float32  # pixels only scaled
        np.testing.assert_array_equal(part.dataset.y_train[split.train_idx], data.y_train)


def test_a_path_dataset_can_be_rotated_when_it_holds_images(whole_digits_npz, tmp_path):
    path, _ = whole_digits_npz
    part = build_partition(
        ScenarioConfig(
            dataset=f"npz:{path}", scenario="rotation", num_clients=4, samples_per_client=30, angles=(0.0, 90.0)
        )
    )
    rotated = next(c for c in part.clients if c.rotation == 90.0)
    data = client_data(part, rotated.partition_id)
    raw = part.dataset.x_train[rotated.train_idx].astype(np.float32) / 255
    np.testing.assert_allclose(data.x_train, np.rot90(raw, 1, axes=(-2, -1)))
    flat = tmp_path / "flat.npz"
    np.savez(flat, x=np.zeros((40, 5), np.float32), y=np.arange(40) % 2)
    with pytest.raises(ValueError, match="must hold images"):
        ScenarioConfig(dataset=f"npz:{flat}", scenario="rotation", num_clients=2, samples_per_client=5)


@pytest.mark.parametrize(
    "name, message",
    [
        ("parquet:/data/x", "'dataset' parameter of scenario 'label-groups' must be one of"),
        ("npz:/no/such/file.npz", "must be an existing folder or .npz file"),
    ],
)
def test_bad_path_datasets_are_named_errors(name, message):
    with pytest.raises(ValueError, match=message):
        ScenarioConfig(dataset=name)


def test_a_path_dataset_with_float_labels_is_refused(tmp_path):
    np.savez(tmp_path / "r.npz", x=np.zeros((10, 3), np.float32), y=np.linspace(0, 1, 10))
    with pytest.raises(ValueError, match="integer class labels"):
        ScenarioConfig(dataset=f"npz:{tmp_path / 'r.npz'}")
