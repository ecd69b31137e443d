"""Heterogeneity scenarios: how a dataset is split into clients, with each client's true group.

Every scenario is deterministic for ``seed`` (one ``numpy.random.default_rng(seed)``, which also
seeds flwr-datasets' partitioners in label-skew and dirichlet), gives clients disjoint train
indices and disjoint test indices, and draws test data only from the dataset's official test set.
See docs/running.md (Scenarios) and the papers cited per builder.

Test split of the label-based scenarios (label-groups, label-skew, label-skew-dirichlet,
dirichlet): a client receives, for each class c it holds, ``round(test_fraction * n_c)`` test
samples (at least 1), where ``n_c`` is its train count of c. When the clients together ask for
more test samples of a class than the test set has, every client's demand for that class is
scaled down proportionally, keeping at least 1 per holder while the pool allows. The IID
scenarios (rotation, label-swap, attack) give each client ``round(test_fraction *
samples_per_client)`` IID test samples, capped at ``n_test // num_clients``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.config import TrainingParams, params_from_run_config
from common.data import (
    DATASETS,
    Dataset,
    DatasetInfo,
    check_dataset,
    dataset_info,
    load_dataset,
    to_float,
)
from common.params import check_field, declared_in, param
from common.validation import (
    check_float,
    check_int,
    check_str,
    parse_float_list,
)

SCENARIOS: tuple[str, ...] = (
    "label-groups",
    "label-skew",
    "label-skew-dirichlet",
    "dirichlet",
    "rotation",
    "label-swap",
    "attack",
    "linear-regression",
)
_IID = ("rotation", "label-swap", "attack")
_MIN_TRAIN = 10  # NIID-bench's minimum client size for Dirichlet partitions
_MAX_DRAWS = 100
_PARTITIONER_DRAWS = 11  # DirichletPartitioner's own limit (flwr-datasets 0.6)
_NOISE_STD = 0.2  # CFL-GP Sec. 5.1: n ~ N(0, 0.2^2)
AUTO_SAMPLES_PER_LABEL = 50
"""label-groups' ``samples-per-label`` when it is 0 (CFLGT Sec. V-A), if every label has that many."""
_LOG = logging.getLogger("flwr")  # Flower's console logger, by its name: common stays free of Flower
GROUP_DRAWS = ("fill", "paper")
"""label-groups' ``group-draw``: ``paper`` is CFLGT's independent draw per client (groups may stay
empty); ``fill`` (modified, the default) moves clients of the largest groups into the empty ones."""
SAMPLE_DRAWS = ("disjoint", "with-replacement")
"""label-groups' ``sample-draw``: ``disjoint`` (the default) never gives a sample to two clients;
``with-replacement`` is a scaling stress test, not a benchmark of accuracy: each client draws its
samples with replacement from its group's own pool, so that 10,000+ clients each have enough data."""
STRESS_TEST = "with-replacement"
"""The ``sample-draw`` that marks a run as a scaling stress test (in its name and summary)."""


def _half_up(x: np.ndarray | float) -> np.ndarray:
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5).astype(np.int64)


@dataclass(frozen=True)
class ScenarioConfig:
    """Validated scenario parameters (hashable; field ``a_b`` is run-config key ``a-b``).

    Raises
    ------
    ValueError
        On construction, if any field is out of range or the fields do not fit together.
    """

    scenario: str = param(
        "label-groups", "how the data is split among clients (docs/running.md, Scenarios)", choices=SCENARIOS
    )
    dataset: str = param(
        "fashion-mnist",
        "the data set; digits is scikit-learn's (fast tests); or the user's "
        "whole data set as hf-disk:PATH, npz:PATH or imagefolder:PATH, cut by the scenario (docs/own-data.md)",
        choices=DATASETS,
        checked=False,
    )
    num_clients: int = param(100, "clients (= simulated SuperNodes); >= 1", checked=False)
    seed: int = declared_in(TrainingParams, "seed")
    groups: int = param(
        5, "label-groups, label-skew-dirichlet, label-swap: number of true groups", low=1, checked=False
    )
    labels_per_group: int = param(2, "label-groups: labels in each group's combination", low=1, checked=False)
    samples_per_label: int = param(
        0,
        "label-groups: samples a client takes of each of its labels; 0 = automatic: 50, or the most "
        "every holder of a label can take when the data set has fewer",
        low=0,
    )
    samples_per_client: int = param(
        600, "rotation, label-swap, attack, linear-regression: train samples per client", low=1
    )
    label_fraction: float = param(
        0.2,
        "label-skew, label-skew-dirichlet: share of the labels a client (group) holds, in (0, 1]",
        low=0.0,
        high=1.0,
        closed=(False, True),
    )
    dirichlet_alpha: float = param(
        0.5, "dirichlet: concentration of the per-client class proportions; > 0", low=0.0, closed=(False, True)
    )
    quantity_alpha: float = param(
        1.0,
        "label-skew-dirichlet: concentration of each label's split among its holders; > 0",
        low=0.0,
        closed=(False, True),
    )
    angles: tuple[float, ...] = param(
        (0.0, 90.0, 180.0, 270.0),
        "rotation: comma-separated angles in degrees, one group per angle",
        checked=False,
    )
    attackers: int = param(0, "attack: clients that send minus their update; >= 0", low=0, checked=False)
    regression_phi: float = param(
        20.0,
        "linear-regression: the groups' angles are (-phi, 0, phi) degrees",
        low=0.0,
        high=90.0,
        closed=(True, False),
    )
    test_fraction: float = param(
        0.2,
        "local test split size relative to the train split (from the test set); "
        "own data: the share of a client's samples held out for local test",
        low=0.0,
        high=1.0,
        closed=(False, True),
    )
    group_draw: str = param(
        "fill",
        "label-groups: fill (modified) puts a client in every group when num-clients allows it; paper: "
        "CFLGT's independent draw per client, which can leave groups empty",
        choices=GROUP_DRAWS,
    )
    sample_draw: str = param(
        "disjoint",
        "label-groups: disjoint gives every sample to at most one client; with-replacement, a scaling stress "
        "test (not a benchmark of accuracy, and so labelled in the run's name and summary), lets each client "
        "draw samples-per-label (0: 50) samples of each label with replacement from its group's own pool",
        choices=SAMPLE_DRAWS,
    )

    def __post_init__(self) -> None:
        scenario = check_field(self, "scenario", "ScenarioConfig")
        owner = f"scenario '{scenario}'"
        dataset = check_dataset(self.dataset, owner)
        if scenario == "linear-regression" and dataset != "regression":
            raise ValueError(
                f"The 'dataset' parameter of {owner} must be 'regression' (the scenario "
                f"generates its own data). Got {dataset!r} instead."
            )
        if scenario != "linear-regression" and dataset == "regression":
            images = ", ".join(repr(d) for d in DATASETS if d != "regression")
            raise ValueError(
                f"The 'dataset' parameter of {owner} must be one of {{{images}}}; the "
                "'regression' data exist only in scenario 'linear-regression'. "
                "Got 'regression' instead."
            )
        info = dataset_info(dataset)
        if scenario == "rotation" and len(info.input_shape) != 3:
            raise ValueError(
                f"The 'dataset' parameter of {owner} must hold images (C, H, W) to rotate. "
                f"Got {dataset!r} with samples of shape {info.input_shape} instead."
            )
        classes = info.num_classes
        put = functools.partial(object.__setattr__, self)
        n = check_int(self.num_clients, "num-clients", owner, low=3 if dataset == "regression" else 1)
        put("num_clients", n)
        check_field(self, "seed", owner)
        put(
            "labels_per_group",
            check_int(
                self.labels_per_group,
                "labels-per-group",
                owner,
                low=1,
                high=classes if scenario == "label-groups" else None,
            ),
        )
        for name in ("label_fraction", "test_fraction"):
            check_field(self, name, owner)
        put("groups", check_int(self.groups, "groups", owner, low=1, high=self._max_groups(n)))
        check_field(self, "group_draw", owner)
        check_field(self, "sample_draw", owner)
        if self.sample_draw != SAMPLE_DRAWS[0] and scenario != "label-groups":
            raise ValueError(
                f"The 'sample-draw' parameter of {owner} must be {SAMPLE_DRAWS[0]!r} "
                f"({self.sample_draw!r} exists for scenario 'label-groups' only). Got {self.sample_draw!r} instead."
            )
        for name in ("samples_per_label", "samples_per_client", "dirichlet_alpha", "quantity_alpha"):
            check_field(self, name, owner)
        angles = _parse_angles(self.angles, owner)
        if scenario == "rotation" and len(angles) > n:
            raise ValueError(
                f"The 'angles' parameter of {owner} must list at most num-clients={n} angles "
                f"(one group of clients per angle). Got {len(angles)} angles instead."
            )
        put("angles", angles)
        put("attackers", check_int(self.attackers, "attackers", owner, low=0, high=n))
        check_field(self, "regression_phi", owner)

    def _max_groups(self, num_clients: int) -> int | None:
        classes = dataset_info(self.dataset).num_classes
        if self.scenario == "label-groups":
            return math.comb(classes, self.labels_per_group)
        if self.scenario == "label-skew-dirichlet":
            return min(math.comb(classes, self.label_count), num_clients)
        if self.scenario == "label-swap":
            return min(classes // 2, num_clients)
        return None

    @property
    def label_count(self) -> int:
        """Labels per client in label-skew(-dirichlet): ``round(label_fraction * C)``, >= 1."""
        classes = dataset_info(self.dataset).num_classes
        return max(1, int(_half_up(float(self.label_fraction) * classes)))

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> ScenarioConfig:
        """Build from Flower run-config (kebab-case keys; missing keys take the defaults)."""
        return params_from_run_config(cls, rc)


def _parse_angles(value: Any, owner: str) -> tuple[float, ...]:
    if isinstance(value, (list, tuple)):
        if not value:
            return parse_float_list("", "angles", owner)
        return tuple(check_float(v, "angles", owner) for v in value)
    return parse_float_list(value, "angles", owner)


@dataclass(frozen=True, eq=False)
class ClientSplit:
    """One client's share of a dataset.

    Attributes
    ----------
    partition_id : int
    train_idx : ndarray of shape (n_train,), int64
        Indices into ``Dataset.x_train``.
    test_idx : ndarray of shape (n_test,), int64
        Indices into ``Dataset.x_test``.
    group : int
        True group id, -1 when the scenario has none.
    rotation : float
        Degrees (counter-clockwise) applied to the client's images.
    label_map : ndarray of shape (C,), int64, or None
        Permutation applied to the labels.
    attacker : bool
    """

    partition_id: int
    train_idx: np.ndarray
    test_idx: np.ndarray
    group: int
    rotation: float = 0.0
    label_map: np.ndarray | None = None
    attacker: bool = False


@dataclass(frozen=True, eq=False)
class Partition:
    """A dataset split into clients; ``num_groups`` is 0 when there are no true groups."""

    config: ScenarioConfig
    dataset: Dataset
    clients: tuple[ClientSplit, ...]
    num_groups: int

    def true_groups(self) -> np.ndarray:
        """Return the true group of every client, shape (N,), int64 (-1: no group)."""
        return np.array([c.group for c in self.clients], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ClientData:
    """Model-ready arrays of one client.

    Attributes
    ----------
    x_train, x_test : ndarray of shape (n, *input_shape), float32
    y_train, y_test : ndarray of shape (n,)
        int64 labels (label map applied) or float32 regression targets.
    group : int
    attacker : bool
    x_val, y_val : ndarray or None
        A validation split held out of the client's own data (``val-fraction``); scenarios have none.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    group: int
    attacker: bool
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None


def build_partition(config: ScenarioConfig, data_dir: str = "") -> Partition:
    """Split the scenario's dataset into clients (cached per process on the arguments).

    Raises
    ------
    ValueError
        If the data cannot satisfy the configuration (e.g. more samples of a label are asked
        for than exist); the message names the parameter, what exists and what was asked.
    DataUnavailableError
        If the dataset's files are missing.
    """
    if not isinstance(config, ScenarioConfig):
        raise ValueError(f"The 'config' parameter of build_partition must be a ScenarioConfig. Got {config!r} instead.")
    check_str(data_dir, "data-dir", "build_partition")
    return _build(config, data_dir)


@functools.lru_cache(maxsize=16)
def _build(cfg: ScenarioConfig, data_dir: str) -> Partition:
    rng = np.random.default_rng(cfg.seed)
    if cfg.scenario == "linear-regression":
        dataset, train, test, groups = linear_regression(cfg, rng)
        return _assemble(cfg, dataset, train, test, groups, 3)
    dataset = load_dataset(cfg.dataset, data_dir, cfg.seed)
    y, classes = dataset.y_train, dataset.info.num_classes
    if cfg.scenario in _IID:
        train = iid_train(cfg, len(y), rng)
        test = iid_test(cfg, len(dataset.y_test), rng)
        num_groups = len(cfg.angles) if cfg.scenario == "rotation" else cfg.groups
        if cfg.scenario == "attack":
            groups = np.zeros(cfg.num_clients, dtype=np.int64)
            groups[rng.choice(cfg.num_clients, cfg.attackers, replace=False)] = 1
            num_groups = 2 if cfg.attackers else 1
        else:
            groups = rng.permutation(np.arange(cfg.num_clients) % num_groups)
        return _assemble(cfg, dataset, train, test, groups, num_groups)
    if cfg.sample_draw == STRESS_TEST:
        train, test, groups = label_groups_with_replacement(cfg, y, dataset.y_test, classes, rng)
        return _assemble(cfg, dataset, train, test, groups, int(groups.max()) + 1)
    builder = {
        "label-groups": label_groups,
        "label-skew": label_skew,
        "label-skew-dirichlet": label_skew_dirichlet,
        "dirichlet": dirichlet,
    }[cfg.scenario]
    train, groups, num_groups = builder(cfg, y, classes, rng)
    counts = np.stack([np.bincount(y[idx], minlength=classes) for idx in train])
    test = stratified_test(counts, dataset.y_test, cfg.test_fraction, rng)
    return _assemble(cfg, dataset, train, test, groups, num_groups)


build_partition.cache_clear = _build.cache_clear  # type: ignore[attr-defined]


def _assemble(
    cfg: ScenarioConfig,
    dataset: Dataset,
    train: list[np.ndarray],
    test: list[np.ndarray],
    groups: np.ndarray,
    num_groups: int,
) -> Partition:
    clients = []
    for i, (tr, te, g) in enumerate(zip(train, test, groups.tolist(), strict=True)):
        tr, te = np.sort(tr).astype(np.int64), np.sort(te).astype(np.int64)
        tr.setflags(write=False)
        te.setflags(write=False)
        rotation, label_map = 0.0, None
        if cfg.scenario == "rotation":
            rotation = cfg.angles[g]
        elif cfg.scenario == "label-swap":
            label_map = np.arange(dataset.info.num_classes, dtype=np.int64)
            label_map[[2 * g, 2 * g + 1]] = [2 * g + 1, 2 * g]
            label_map.setflags(write=False)
        attacker = cfg.scenario == "attack" and g == 1
        clients.append(ClientSplit(i, tr, te, int(g), rotation, label_map, attacker))
    return Partition(cfg, dataset, tuple(clients), num_groups)


def label_groups(
    cfg: ScenarioConfig, y: np.ndarray, classes: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """CFLGT Sec. V-A: G random L-label combinations; each client picks one at random.

    Each client takes ``samples_per_label`` train samples of each of its labels, never reusing
    a sample; 0 (automatic) takes :data:`AUTO_SAMPLES_PER_LABEL`, or fewer when some label
    has fewer than that for each of its holders: the most every holder of every label can
    take. Returns per-client train indices, groups of shape (N,) and G.
    """
    label_sets, groups = _label_group_draw(cfg, classes, rng)
    pools = [rng.permutation(np.flatnonzero(y == c)) for c in range(classes)]
    holders = [[i for i, g in enumerate(groups) if c in label_sets[g]] for c in range(classes)]
    n = cfg.samples_per_label or automatic_samples_per_label(cfg, pools, holders)
    for c in range(classes):
        if len(holders[c]) * n > len(pools[c]):
            raise ValueError(
                f"The 'samples-per-label' parameter of scenario 'label-groups' asks for more "
                f"samples than exist: label {c} of {cfg.dataset} has {len(pools[c])} train "
                f"samples, but {len(holders[c])} clients hold it and ask for {n} each "
                f"({len(holders[c]) * n} in all). Lower 'samples-per-label' or 'num-clients'."
            )
    train: list[list[np.ndarray]] = [[] for _ in range(cfg.num_clients)]
    for c in range(classes):
        for k, i in enumerate(holders[c]):
            train[i].append(pools[c][k * n : (k + 1) * n])
    return [np.concatenate(parts) for parts in train], groups, len(label_sets)


def _label_group_draw(
    cfg: ScenarioConfig, classes: int, rng: np.random.Generator
) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """label-groups' populated groups' label sets and each client's group, shape (N,)."""
    combos = list(itertools.combinations(range(classes), cfg.labels_per_group))
    label_sets = [combos[i] for i in rng.choice(len(combos), cfg.groups, replace=False)]
    groups = populated_groups(rng.integers(cfg.groups, size=cfg.num_clients), cfg.groups, cfg.group_draw, rng)
    return _drop_empty(label_sets, groups)


def label_groups_with_replacement(
    cfg: ScenarioConfig, y: np.ndarray, y_test: np.ndarray, classes: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """label-groups with ``sample-draw with-replacement``: a scaling stress test, not the paper's split.

    The groups and their label sets are drawn as in :func:`label_groups`. Each label's train
    samples (and test samples) are split into disjoint shares, one per group that holds the label,
    and each client draws ``samples_per_label`` train indices of each of its labels (0: 50) and
    ``round(test_fraction * samples_per_label)`` (>= 1) test indices, with replacement, from its
    group's shares. Clients of a group may share samples; two groups never do.

    Returns
    -------
    train, test : lists of N int64 arrays
        Indices into the train and the test set.
    groups : ndarray of shape (N,), int64
    """
    label_sets, groups = _label_group_draw(cfg, classes, rng)
    per_label = cfg.samples_per_label or AUTO_SAMPLES_PER_LABEL
    sizes = {"train": per_label, "test": max(1, int(_half_up(cfg.test_fraction * per_label)))}
    drawn: dict[str, list[list[np.ndarray]]] = {}
    for split, labels in (("train", y), ("test", y_test)):
        parts: list[list[np.ndarray]] = [[] for _ in range(cfg.num_clients)]
        for c in range(classes):
            holding = [g for g, labels_of in enumerate(label_sets) if c in labels_of]
            if not holding:
                continue
            pool = rng.permutation(np.flatnonzero(labels == c))
            if len(pool) < len(holding):
                raise ValueError(
                    f"The 'groups' parameter of scenario 'label-groups' asks for more groups holding "
                    f"label {c} ({len(holding)}) than {cfg.dataset} has {split} samples of it "
                    f"({len(pool)}). Got {cfg.groups} instead."
                )
            for g, share in zip(holding, np.array_split(pool, len(holding)), strict=True):
                members = np.flatnonzero(groups == g)
                picks = share[rng.integers(len(share), size=(len(members), sizes[split]))]
                for i, row in zip(members.tolist(), picks, strict=True):
                    parts[i].append(row)
        drawn[split] = parts
    train, test = ([np.concatenate(p).astype(np.int64) for p in drawn[s]] for s in ("train", "test"))
    return train, test, groups


def populated_groups(groups: np.ndarray, num_groups: int, draw: str, rng: np.random.Generator) -> np.ndarray:
    """Every group populated where the clients allow it (``draw`` "fill"), or the draw as it is ("paper").

    "fill" moves one client at a time, chosen with ``rng`` from a largest group, into each empty
    group while some group has two or more (with fewer clients than groups, every client ends
    alone); a draw with no empty group is returned unchanged (and ``rng`` untouched). Groups
    still empty are logged as a warning.
    """
    groups = np.array(groups, dtype=np.int64)
    counts = np.bincount(groups, minlength=num_groups)
    if draw == "fill":
        for g in np.flatnonzero(counts == 0):
            largest = int(np.argmax(counts))
            if counts[largest] < 2:
                break
            moved = int(rng.choice(np.flatnonzero(groups == largest)))
            groups[moved] = g
            counts[largest] -= 1
            counts[g] += 1
    empty = int(np.count_nonzero(counts == 0))
    if empty:
        why = (
            "group-draw paper draws each client's group independently (CFLGT Sec. V-A)"
            if draw == "paper" and len(groups) >= num_groups
            else f"there are fewer clients ({len(groups)}) than groups"
        )
        _LOG.warning(
            "label-groups: %d of the %d groups got no client (%s); the federation has %d groups",
            empty,
            num_groups,
            why,
            num_groups - empty,
        )
    return groups


def _drop_empty(label_sets: list[tuple[int, ...]], groups: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The populated groups' label sets and the groups renumbered ``0..G'-1`` in their order."""
    used, renumbered = np.unique(groups, return_inverse=True)
    return [label_sets[g] for g in used.tolist()], renumbered.astype(np.int64).ravel()


def automatic_samples_per_label(cfg: ScenarioConfig, pools: list[np.ndarray], holders: list[list[int]]) -> int:
    """:data:`AUTO_SAMPLES_PER_LABEL`, or the most samples of each label that all its holders can take.

    Raises
    ------
    ValueError
        If some label has fewer train samples than holders.
    """
    fits = {c: len(pools[c]) // len(held) for c, held in enumerate(holders) if held}
    n = min(AUTO_SAMPLES_PER_LABEL, *fits.values())
    if n == 0:
        c = min(fits, key=fits.__getitem__)
        raise ValueError(
            f"The 'num-clients' parameter of scenario 'label-groups' is too large: label {c} of "
            f"{cfg.dataset} has {len(pools[c])} train samples, but {len(holders[c])} clients hold it "
            f"(at least one each). Got {cfg.num_clients} instead."
        )
    if n < AUTO_SAMPLES_PER_LABEL:
        c = min(fits, key=fits.__getitem__)
        _LOG.info(
            "samples-per-label 0 (automatic): %d, as label %d of %s has %d train samples for %d clients",
            n,
            c,
            cfg.dataset,
            len(pools[c]),
            len(holders[c]),
        )
    return n


def label_skew(
    cfg: ScenarioConfig, y: np.ndarray, classes: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """NIID-bench ``#C=k`` (FedClust Sec. 5.1), k = round(label_fraction * C).

    flwr-datasets' ``PathologicalPartitioner`` in NIID-bench's ``"first-deterministic"`` mode:
    client i owns label ``i % C`` and k-1 other distinct random labels; each label's train
    samples, shuffled, are split equally among its owners. Group = index of the distinct label
    set, in order of first appearance.
    """
    from flwr_datasets.partitioner import PathologicalPartitioner

    partitioner = PathologicalPartitioner(
        num_partitions=cfg.num_clients,
        partition_by="label",
        num_classes_per_partition=cfg.label_count,
        class_assignment_mode="first-deterministic",
        shuffle=False,
        seed=_partitioner_seed(rng),
    )
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Classes: .* will NOT be used")  # fewer clients than labels
            train = _partition_shuffled(partitioner, y, rng)
    except ValueError as exc:
        raise ValueError(
            f"The 'num-clients' parameter of scenario 'label-skew' is too large for {cfg.dataset}: {exc} "
            f"Got {cfg.num_clients} instead."
        ) from exc
    label_sets = [frozenset(np.unique(y[idx]).tolist()) for idx in train]
    ids: dict[frozenset, int] = {}
    groups = np.array([ids.setdefault(s, len(ids)) for s in label_sets], dtype=np.int64)
    return train, groups, len(ids)


def _partitioner_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**32))


def _partition_shuffled(partitioner: Any, y: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Run a flwr-datasets partitioner over ``y`` in a seeded random order.

    The partitioners split each label's samples in data set order, where NIID-bench shuffles
    them first: the partitioner sees the labels permuted, and its rows map back through the
    permutation. Returns each partition's indices into ``y``.
    """
    import datasets

    order = rng.permutation(len(y))
    partitioner.dataset = datasets.Dataset.from_dict({"label": y[order], "row": order})
    return [np.asarray(partitioner.load_partition(i)["row"], dtype=np.int64) for i in range(partitioner.num_partitions)]


def label_skew_dirichlet(
    cfg: ScenarioConfig, y: np.ndarray, classes: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """FLAG Sec. 5: groups share a random label set; Dirichlet quantity shift inside a label.

    ``groups`` groups of clients (sizes differ by at most one, members random) each get a
    distinct random set of ``round(label_fraction * C)`` labels. All train samples of a label
    are divided among the clients holding it (from any group) with proportions
    ``~ Dir(quantity_alpha)``. The paper does not say how empty clients are avoided: every
    holder first receives ``ceil(10 / k)`` samples of each of its labels (fewer if the label
    is too small), and only the rest follows the Dirichlet proportions.
    """
    k = cfg.label_count
    combos = list(itertools.combinations(range(classes), k))
    label_sets = [combos[i] for i in rng.choice(len(combos), cfg.groups, replace=False)]
    groups = rng.permutation(np.arange(cfg.num_clients) % cfg.groups)
    train: list[list[np.ndarray]] = [[] for _ in range(cfg.num_clients)]
    for c in range(classes):
        owners = np.flatnonzero([c in label_sets[g] for g in groups])
        if len(owners) == 0:
            continue
        pool = rng.permutation(np.flatnonzero(y == c))
        _check_owners(cfg, c, len(owners), len(pool))
        floor = min(math.ceil(_MIN_TRAIN / k), len(pool) // len(owners))
        rest = len(pool) - floor * len(owners)
        cuts = np.cumsum(rng.dirichlet(np.full(len(owners), cfg.quantity_alpha))) * rest
        extra = np.diff(np.concatenate([[0], cuts.astype(np.int64)[:-1], [rest]]))
        for i, part in zip(owners, np.split(pool, np.cumsum(floor + extra)[:-1]), strict=True):
            train[i].append(part)
    return [np.concatenate(parts) for parts in train], groups, cfg.groups


def dirichlet(
    cfg: ScenarioConfig, y: np.ndarray, classes: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """NIID-bench ``Dir(alpha)``: each class is spread over all clients by Dirichlet proportions.

    flwr-datasets' ``DirichletPartitioner`` with NIID-bench's balancing (``self_balancing``:
    clients above the mean size get no more of later classes) over each class's shuffled
    samples. The draw is repeated until every client holds at least ``min(10, n / (2N))``
    samples: the partitioner draws up to 11 times, with fresh seeds until at least 100 draws
    were made. No true groups: every group is -1.
    """
    from flwr_datasets.partitioner import DirichletPartitioner

    n, num = len(y), cfg.num_clients
    if n < num:
        raise ValueError(
            f"The 'num-clients' parameter of scenario 'dirichlet' must be at most the "
            f"{n} train samples of {cfg.dataset}. Got {num} instead."
        )
    need = max(1, min(_MIN_TRAIN, n // (2 * num)))
    tries = math.ceil(_MAX_DRAWS / _PARTITIONER_DRAWS)
    for _ in range(tries):
        partitioner = DirichletPartitioner(
            num_partitions=num,
            partition_by="label",
            alpha=float(cfg.dirichlet_alpha),
            min_partition_size=need,
            self_balancing=True,
            shuffle=False,
            seed=_partitioner_seed(rng),
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The specified min_partition_size")
            try:
                train = _partition_shuffled(partitioner, y, rng)
            except ValueError as exc:
                if "max number of attempts" not in str(exc):
                    raise
                continue
        if np.array_equal(np.sort(np.concatenate(train)), np.arange(n)):
            return train, np.full(num, -1, dtype=np.int64), 0
    raise ValueError(
        f"The 'dirichlet-alpha' parameter of scenario 'dirichlet' is too small for {num} "
        f"clients on {cfg.dataset}: after {tries * _PARTITIONER_DRAWS} draws some client still held "
        f"fewer than {need} train samples. Got {cfg.dirichlet_alpha} instead; raise it or lower "
        "'num-clients'."
    )


def _check_owners(cfg: ScenarioConfig, label: int, owners: int, available: int) -> None:
    if owners > available:
        raise ValueError(
            f"The 'num-clients' parameter of scenario '{cfg.scenario}' is too large: label "
            f"{label} of {cfg.dataset} has {available} train samples but {owners} clients "
            "must share it (at least one each). Lower 'num-clients'."
        )


def iid_train(cfg: ScenarioConfig, n_train: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Draw ``samples_per_client`` IID train indices per client, without replacement."""
    need = cfg.num_clients * cfg.samples_per_client
    if need > n_train:
        raise ValueError(
            f"The 'samples-per-client' parameter of scenario '{cfg.scenario}' asks for more "
            f"samples than exist: {cfg.num_clients} clients x {cfg.samples_per_client} = {need} "
            f"train samples, but {cfg.dataset} has {n_train}. Lower 'samples-per-client' or "
            "'num-clients'."
        )
    return list(rng.permutation(n_train)[:need].reshape(cfg.num_clients, -1))


def iid_test(cfg: ScenarioConfig, n_test: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Draw ``round(test_fraction * samples_per_client)`` IID test indices per client (>= 1).

    Capped at ``n_test // num_clients`` so that clients' test sets stay disjoint.
    """
    cap = n_test // cfg.num_clients
    if cap == 0:
        raise ValueError(
            f"The 'num-clients' parameter of scenario '{cfg.scenario}' must be at most the "
            f"{n_test} test samples of {cfg.dataset}. Got {cfg.num_clients} instead."
        )
    per = min(cap, max(1, int(_half_up(cfg.test_fraction * cfg.samples_per_client))))
    return list(rng.permutation(n_test)[: per * cfg.num_clients].reshape(cfg.num_clients, -1))


def stratified_test(
    counts: np.ndarray, y_test: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Draw disjoint test indices with each client's train class proportions.

    Parameters
    ----------
    counts : ndarray of shape (N, C), int
        Train samples of each class held by each client.
    y_test : ndarray of shape (n_test,), int
    test_fraction : float
    rng : numpy.random.Generator

    Returns
    -------
    list of N int64 arrays
        Demand per class is ``round(test_fraction * count)``, at least 1 for held classes,
        scaled down proportionally when a class's test pool is too small (see module doc).
    """
    demand = np.where(counts > 0, np.maximum(_half_up(test_fraction * counts), 1), 0)
    out: list[list[np.ndarray]] = [[] for _ in range(len(counts))]
    for c in range(counts.shape[1]):
        pool = rng.permutation(np.flatnonzero(y_test == c))
        want = demand[:, c]
        if want.sum() > len(pool):
            want = _shrink(want, len(pool), rng)
        for i, part in enumerate(np.split(pool[: want.sum()], np.cumsum(want)[:-1])):
            out[i].append(part)
    return [np.concatenate(parts).astype(np.int64) for parts in out]


def _shrink(want: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    holders = np.flatnonzero(want > 0)
    out = np.zeros_like(want)
    if len(holders) > cap:
        out[rng.choice(holders, cap, replace=False)] = 1
        return out
    out[holders] = 1
    extra = want[holders] - 1
    if extra.sum() > 0:
        out[holders] += extra * (cap - len(holders)) // extra.sum()
    return out


def linear_regression(
    cfg: ScenarioConfig, rng: np.random.Generator
) -> tuple[Dataset, list[np.ndarray], list[np.ndarray], np.ndarray]:
    """CFL-GP Sec. 5.1 / App. F.4: three groups with angles (-phi, 0, phi).

    For group k, ``x ~ U(0, cos(phi_k))`` and ``y = x tan(phi_k) + n`` with
    ``n ~ N(0, 0.2^2)``. Clients are split into the groups as equally as possible at random;
    each gets ``samples_per_client`` train and ``round(test_fraction * samples_per_client)``
    (>= 1) test pairs. Returns the generated dataset (x of shape (n, 1), y of shape (n,),
    float32), per-client train and test indices, and groups of shape (N,).
    """
    num = cfg.num_clients
    groups = rng.permutation(np.arange(num) % 3)
    phis = np.deg2rad(np.array([-cfg.regression_phi, 0.0, cfg.regression_phi]))[groups]
    n_tr = cfg.samples_per_client
    n_te = max(1, int(_half_up(cfg.test_fraction * n_tr)))

    def draw(per: int) -> tuple[np.ndarray, np.ndarray]:
        phi = np.repeat(phis, per)
        x = rng.uniform(0.0, 1.0, size=phi.size) * np.cos(phi)
        y = x * np.tan(phi) + rng.normal(0.0, _NOISE_STD, size=phi.size)
        return x.astype(np.float32)[:, None], y.astype(np.float32)

    (x_train, y_train), (x_test, y_test) = draw(n_tr), draw(n_te)
    for a in (x_train, y_train, x_test, y_test):
        a.setflags(write=False)
    dataset = Dataset(dataset_info("regression"), x_train, y_train, x_test, y_test)
    train = [np.arange(i * n_tr, (i + 1) * n_tr) for i in range(num)]
    test = [np.arange(i * n_te, (i + 1) * n_te) for i in range(num)]
    return dataset, train, test, groups


def rotate_images(x: np.ndarray, angle: float) -> np.ndarray:
    """Rotate images counter-clockwise by ``angle`` degrees.

    Parameters
    ----------
    x : ndarray of shape (n, C, H, W)
    angle : float

    Returns
    -------
    ndarray of the same shape and dtype: exact ``np.rot90`` for multiples of 90 degrees,
    otherwise bilinear ``scipy.ndimage.rotate`` (reshape=False) with zero (black) fill.
    """
    angle = float(angle) % 360.0
    quarter = angle / 90.0
    if math.isclose(quarter, round(quarter), abs_tol=1e-9):
        return np.ascontiguousarray(np.rot90(x, int(round(quarter)) % 4, axes=(-2, -1)))
    from scipy.ndimage import rotate

    out = rotate(x.astype(np.float32), angle, axes=(x.ndim - 1, x.ndim - 2), reshape=False, order=1, cval=0.0)
    if x.dtype == np.uint8:
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return out.astype(x.dtype)


def _prepare(info: DatasetInfo, x: np.ndarray, angle: float) -> np.ndarray:
    return to_float(info, rotate_images(x, angle) if angle else x)


def client_data(partition: Partition, partition_id: int) -> ClientData:
    """Return the model-ready data of client ``partition_id``.

    Images are rotated by the client's angle (raw pixels, then :func:`to_float`); labels go
    through the client's label map.

    Raises
    ------
    ValueError
        If ``partition_id`` is not in ``[0, N - 1]``.
    """
    pid = check_int(partition_id, "partition-id", "client_data", low=0, high=len(partition.clients) - 1)
    split, ds = partition.clients[pid], partition.dataset
    y_train, y_test = ds.y_train[split.train_idx], ds.y_test[split.test_idx]
    if split.label_map is not None:
        y_train, y_test = split.label_map[y_train], split.label_map[y_test]
    dtype = np.float32 if ds.info.task == "regression" else np.int64
    return ClientData(
        x_train=_prepare(ds.info, ds.x_train[split.train_idx], split.rotation),
        y_train=y_train.astype(dtype),
        x_test=_prepare(ds.info, ds.x_test[split.test_idx], split.rotation),
        y_test=y_test.astype(dtype),
        group=split.group,
        attacker=split.attacker,
    )
