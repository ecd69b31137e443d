"""Server scaling: time and peak memory of every algorithm's server-side clustering step.

Each algorithm's step is fed synthetic client signals of the real sizes (the parameter count
and final-layer size of the DNN or LeNet-5 on Fashion-MNIST shapes, 784-dimensional data
subspaces) with planted groups, drawn from a seeded ``numpy.random.Generator``, and calls the
same ``common.clustering`` / ``common.aggregation`` functions the strategy calls inside its
``clustering_timer``. Every (variant, N) runs in a fresh subprocess:

- seconds: wall time of the step (a first pass without tracing), and its CPU time (all threads
  of the process: on a shared machine the wall time grows with the load, the CPU time less);
- peak MB: ``tracemalloc`` peak of the step (a second pass; numpy registers its buffers),
  without the signals themselves (what clients sent is input, not the step's memory);
- RSS MB: the process's peak RSS (``VmHWM``, reset when the step starts) minus its RSS then
  (first pass; for the round-by-round variants it also holds later rounds' received signals);
- ARI of the step's labels against the planted groups (a sanity check that it did real work).

The growth exponent ``b`` of ``seconds ~ N^b`` (and of memory) is the least-squares slope on
log-log over the sizes measured. Variants whose input alone would not fit (``--max-gb``) are
listed with the reason instead of run. Writes scaling.md, scaling.csv and scaling.json.

Example::

    nice -n 19 python -m benchmarks.scaling --sizes 100,1000,10000 --model dnn
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import threading
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.records import (
    RECORDS_DIR,
    Record,
    current_command,
    load_average,
    merge_record,
    read_record,
    write_record,
)
from benchmarks.report import SCALING, add_record_flag, save_tables, tables_from_markdown
from common.clustering.hierarchical import AUTO_MAX_CLUSTERS
from common.clustering.sampled import SAMPLE_ABOVE
from common.clustering.trajectories import AP_MAX_POINTS
from strategies import CFLGP, CFLGT, CFLSattler, FLAG, FLHC, FLIC, FeSEM, FedAvg, FedClust, FedMedian, IFCA, PACFL
from strategies.pacfl import PACFLParams

ROOT = Path(__file__).resolve().parent.parent

FEATURES = 784
NUM_CLASSES = 10
GROUPS = 5
FRACTION = 0.2  # run-config default: the share of clients that train (and report) per round
COMPRESSION = 64.0
SUBSPACE_VECTORS = 3  # PACFL's p and FLAG's flag-vectors default
CLASSES_PER_CLIENT = 2
SEED = 0
REPLY_CAP = 4_000
"""The aggregating steps' cohort: ``min(FRACTION N, REPLY_CAP)`` replies, all held at once (20,000
DNN replies at 100,000 clients are 12.7 GB, more than this shared box spares)."""


def cohort(n: int) -> int:
    """Replies one aggregating round holds: ``FRACTION`` of ``n``, at most ``REPLY_CAP``."""
    return min(max(1, math.ceil(FRACTION * n)), REPLY_CAP)


@dataclass(frozen=True)
class Sizes:
    """The model's float parameter count, its final layer's input size and the class count."""

    params: int
    head_in: int
    classes: int = NUM_CLASSES

    @property
    def head(self) -> int:
        """Entries of the final layer: weight and bias."""
        return self.classes * self.head_in + self.classes


def model_sizes(model: str) -> tuple[Sizes, list[tuple[str, tuple[int, ...]]]]:
    """Sizes and float array shapes of ``model`` built by common.models on Fashion-MNIST shapes."""
    from common.models import build_model

    net = build_model(model, (1, 28, 28), NUM_CLASSES)
    shapes = [(k, tuple(v.shape)) for k, v in net.state_dict().items() if v.is_floating_point()]
    return Sizes(sum(math.prod(s) for _, s in shapes), net.head.in_features), shapes


# ------------------------------------------------------------------ measuring
class Meter:
    """Sums the wall time of measured blocks; with ``trace``, keeps the tracemalloc peak above inputs."""

    def __init__(self, trace: bool) -> None:
        self.trace, self.seconds, self.cpu_seconds, self.peak = trace, 0.0, 0.0, 0
        self.rss_base: int | None = None
        self.rss_peak = 0
        self.skipped = (0.0, 0.0)  # wall and CPU seconds of drawing lazy input inside a measured block

    @contextmanager
    def measure(self, exclude: int | None = None) -> Iterator[None]:
        """Time the block (wall and CPU); ``exclude`` bytes of traced input are not the step's memory.

        ``exclude`` None: everything traced when the block starts is input (one-shot steps).
        The first block also resets the peak RSS and takes the RSS baseline (inputs made so far
        are in it).
        """
        if self.rss_base is None:
            reset_peak_rss()
            self.rss_base = _status_bytes("VmRSS")
        if self.trace:
            if exclude is None:
                exclude = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        start, cpu = time.perf_counter(), time.process_time()
        self.skipped = (0.0, 0.0)
        yield
        self.seconds += time.perf_counter() - start - self.skipped[0]
        self.cpu_seconds += time.process_time() - cpu - self.skipped[1]
        self.rss_peak = max(self.rss_peak, peak_rss_bytes())
        if self.trace:
            self.peak = max(self.peak, tracemalloc.get_traced_memory()[1] - exclude)

    @property
    def rss_increase(self) -> int:
        """Peak RSS during the measured blocks minus the RSS when the first began, in bytes."""
        return 0 if self.rss_base is None else max(0, self.rss_peak - self.rss_base)


def _status_bytes(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (peak RSS) of this process from /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> None:
    """Restart the kernel's peak-RSS count (``VmHWM``) at the current RSS (Linux >= 4.0).

    ``getrusage``'s ``ru_maxrss`` cannot be reset (and a subprocess inherits its parent's value
    through fork + exec), so it is read only as a fallback where this fails.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_bytes() -> int:
    """Peak RSS since the last :func:`reset_peak_rss` (``VmHWM``; ``ru_maxrss`` as fallback)."""
    try:
        return _status_bytes("VmHWM")
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ------------------------------------------------------------------ planted signals
def planted(n: int, groups: int, rng: np.random.Generator) -> np.ndarray:
    """Balanced group labels ``(n,)`` in random order."""
    return rng.permutation(np.arange(n) % groups)


def vectors(
    truth: np.ndarray, dim: int, rng: np.random.Generator, noise: float = 0.5, centers: np.ndarray | None = None
) -> np.ndarray:
    """``(n, dim)`` float32 rows: their group's Gaussian centre plus Gaussian noise."""
    if centers is None:
        centers = rng.standard_normal((int(truth.max()) + 1, dim), dtype=np.float32)
    out = rng.standard_normal((len(truth), dim), dtype=np.float32)
    out *= np.float32(noise)
    for lo in range(0, len(truth), 1024):  # not centers[truth] whole: a second (n, dim) array
        out[lo : lo + 1024] += centers[truth[lo : lo + 1024]]
    return out


class LazyRows(Sequence[np.ndarray]):
    """``(n, dim)`` float32 rows drawn when read, never held: group centre plus Gaussian-like noise.

    Row ``i``'s noise is row ``i mod B`` of a seeded bank of ``B`` standard normal rows, rolled by
    ``i // B`` (fresh normals for 100,000 x 159,010 entries take longer than the step measured).
    The time spent drawing rows inside a measured block is not the step's (``Meter.skipped``):
    a server holds what clients sent.
    """

    BANK = 1024

    def __init__(self, truth: np.ndarray, dim: int, rng: np.random.Generator, meter: Meter, noise: float = 1.0) -> None:
        self.truth, self.meter, self.noise = truth, meter, np.float32(noise)
        self.centers = rng.standard_normal((int(truth.max()) + 1, dim), dtype=np.float32)
        self.bank = rng.standard_normal((min(self.BANK, len(truth)), dim), dtype=np.float32)
        self.clients = np.arange(len(truth))

    def subset(self, index: Sequence[int] | np.ndarray) -> LazyRows:
        """The rows at ``index`` (client positions), as another lazy sequence."""
        out = object.__new__(LazyRows)
        out.__dict__.update(self.__dict__)
        out.clients = self.clients[np.asarray(index, dtype=np.int64)]
        return out

    def __len__(self) -> int:
        return len(self.clients)

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` of this sequence (a new array)."""
        client, b = int(self.clients[i]), len(self.bank)
        out = np.roll(self.bank[client % b], client // b)
        out *= self.noise
        out += self.centers[self.truth[client]]
        return out

    def __getitem__(self, i):  # type: ignore[override]
        start, cpu = time.perf_counter(), time.process_time()
        out = [self.row(j) for j in range(len(self))[i]] if isinstance(i, slice) else self.row(int(i))
        wall, used = self.meter.skipped
        self.meter.skipped = (wall + time.perf_counter() - start, used + time.process_time() - cpu)
        return out


def class_bases(
    truth: np.ndarray,
    rng: np.random.Generator,
    vectors_per_class: int = SUBSPACE_VECTORS,
    noise: float = 0.05,
    dtype: type = np.float64,
) -> list[dict[int, np.ndarray]]:
    """Per client ``{class: (784, p) orthonormal basis}`` for its group's classes.

    Group g holds classes ``2g, 2g + 1`` (mod C); each class has its own true subspace, and a
    client's basis is that subspace plus noise, orthonormalised (as truncated SVD returns), in
    ``dtype`` (float32: as ``ClassSubspaces`` carries them).
    """
    true = [np.linalg.qr(rng.standard_normal((FEATURES, vectors_per_class)))[0] for _ in range(NUM_CLASSES)]
    out = []
    for g in truth:
        held = [(CLASSES_PER_CLIENT * int(g) + i) % NUM_CLASSES for i in range(CLASSES_PER_CLIENT)]
        out.append(
            {c: np.linalg.qr(true[c] + noise * rng.standard_normal(true[c].shape))[0].astype(dtype) for c in held}
        )
    return out


def batches(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Disjoint per-round samples of ``FRACTION`` of the clients, covering all ``n``."""
    order = rng.permutation(n)
    size = max(1, math.ceil(FRACTION * n))
    return [np.sort(order[i : i + size]) for i in range(0, n, size)]


# ------------------------------------------------------------------ the steps
@dataclass(frozen=True)
class Variant:
    """One row family of the table."""

    name: str
    algorithm: str
    signal: Callable[[Sizes], str]
    input_bytes: Callable[[int, Sizes], int]
    run: Callable[[int, Sizes, list, Meter, np.random.Generator], tuple[np.ndarray | None, np.ndarray | None]]
    groups: int = GROUPS
    note: str = ""


def _fedavg(n, sizes, shapes, meter, rng):
    from common.aggregation import weighted_average

    m = cohort(n)
    models = [{k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes} for _ in range(m)]
    weights = rng.integers(100, 1000, size=m)
    with meter.measure(exclude=sum(a.nbytes for mod in models for a in mod.values())):
        weighted_average(models, weights)
    return None, None


def _fedmedian(n, sizes, shapes, meter, rng):
    from common.aggregation import coordinate_median

    m = cohort(n)
    models = [{k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes} for _ in range(m)]
    with meter.measure(exclude=sum(a.nbytes for mod in models for a in mod.values())):
        coordinate_median(models)
    return None, None


def _ifca(n, sizes, shapes, meter, rng, k: int = 8):
    from common.aggregation import weighted_average

    m = cohort(n)
    truth = planted(m, GROUPS, rng)
    models = [{name: rng.standard_normal(s, dtype=np.float32) for name, s in shapes} for _ in range(m)]
    weights = rng.integers(100, 1000, size=m)
    with meter.measure(exclude=sum(a.nbytes for mod in models for a in mod.values())):
        chosen = truth % k  # the reported cluster-id of each reply
        members: dict[int, list[int]] = {}
        for i, c in enumerate(chosen):
            members.setdefault(int(c), []).append(i)
        for _, rows in sorted(members.items()):
            weighted_average([models[i] for i in rows], weights[rows])
        labels = np.asarray(chosen)
    return labels, truth


def _fesem(n, sizes, shapes, meter, rng):
    from common.clustering.fesem import nearest_centres, update_centres

    m = cohort(n)
    truth = planted(m, GROUPS, rng)
    centres = rng.standard_normal((GROUPS, sizes.params), dtype=np.float32)
    points = vectors(truth, sizes.params, rng, noise=0.1, centers=centres)
    weights = rng.integers(100, 1000, size=m)
    with meter.measure(exclude=points.nbytes):
        labels = nearest_centres(points, centres)  # one round's replies, each to its nearest centre
        update_centres(points, labels, weights, centres)
    return labels, truth


def _cflgt(n, sizes, shapes, meter, rng):
    from common.clustering.trajectories import cluster_trajectories

    truth = planted(n, GROUPS, rng)
    centers = rng.uniform(0.0, 4.0, size=(GROUPS, sizes.classes, 2))
    points = centers[truth] + 0.1 * rng.standard_normal((n, sizes.classes, 2))
    with meter.measure():
        labels = cluster_trajectories(points, damping=0.5, preference="median", seed=SEED).result.labels
    return labels, truth


def _fedclust(n, sizes, shapes, meter, rng, sample_above: int = SAMPLE_ABOVE):
    from common.clustering.oneshot import Cut, fedclust_clusters

    truth = planted(n, GROUPS, rng)
    heads = vectors(truth, sizes.head, rng, noise=0.3)
    with meter.measure():
        labels = fedclust_clusters(heads, Cut(threshold=1.0, num_clusters=GROUPS), sample_above, SEED).labels
    return labels, truth


def _pacfl(n, sizes, shapes, meter, rng, measure: str = PACFLParams().pacfl_measure):
    from common.clustering.oneshot import Cut, pacfl_clusters

    truth = planted(n, GROUPS, rng)
    # float32, as the clients send them; the step converts a chunk at a time (strategies.pacfl)
    bases = class_bases(truth, rng, dtype=np.float32)
    with meter.measure():
        cut = Cut(threshold=30.0, num_clusters=GROUPS)
        labels = pacfl_clusters(bases, cut, measure, np.random.default_rng(SEED)).labels
    return labels, truth


def _pacfl_variant(name: str, measure: str, what: str) -> Variant:
    """PACFL's step with ``measure`` (``client_distances``) on the class bases of ``class_bases``."""
    return Variant(
        name,
        PACFL.name,
        lambda s: f"basis {FEATURES}x{SUBSPACE_VECTORS * CLASSES_PER_CLIENT} f32",
        lambda n, s: n * FEATURES * SUBSPACE_VECTORS * CLASSES_PER_CLIENT * F32 + 4 * _pairs(n, 1) ** 2 * 8,
        lambda n, s, sh, m, r: _pacfl(n, s, sh, m, r, measure),
        note=f"client_distances ({measure}: {what}) + cut_tree; above 2,000: sampled_clusters",
    )


def _flhc(n, sizes, shapes, meter, rng, sample_above: int = SAMPLE_ABOVE):
    from common.clustering.oneshot import Cut, flhc_clusters

    truth = planted(n, GROUPS, rng)
    updates = LazyRows(truth, sizes.params, rng, meter)
    with meter.measure():
        cut = Cut(threshold=1.0, num_clusters=GROUPS)
        labels = flhc_clusters(updates, cut, "euclidean", SEED, sample_above).labels
    return labels, truth


def _stored(n, sizes, meter, rng, sketch: int, updates: LazyRows, after: Callable | None = None):
    """FLIC's per-round storage of the sampled clients' updates (``StoredUpdates.remember``), ``CHUNK``
    replies at a time (``FLIC.after_train``); ``after`` gets the round's rows as a lazy sequence.
    """
    from common.clustering.similarity import update_similarity
    from common.clustering.blocks import CHUNK

    similarity = update_similarity(n, sizes.params, sketch, SEED)
    for rows in batches(n, rng):
        with meter.measure(exclude=0):
            for lo in range(0, len(rows), CHUNK):
                similarity.update(rows[lo : lo + CHUNK].tolist(), updates.subset(rows[lo : lo + CHUNK])[:])
            if after is not None:
                after(updates.subset(rows))
    return similarity


def _flic(n, sizes, shapes, meter, rng, sketch: int = 0, sample_above: int = SAMPLE_ABOVE):
    from common.clustering.sampled import sampled_flic

    truth = planted(n, GROUPS, rng)
    similarity = _stored(n, sizes, meter, rng, sketch, LazyRows(truth, sizes.params, rng, meter))
    with meter.measure(exclude=0):
        labels, _, _, _ = sampled_flic(similarity, similarity.pids, 1.0, SEED, sample_above)
    return labels, truth[np.asarray(similarity.pids)]


def _sattler(n, sizes, shapes, meter, rng, sketch: int = 0, sample_above: int = SAMPLE_ABOVE):
    """CFLSattler's server work, by the functions the strategy calls: five rounds of ``FRACTION`` of the
    clients, each round's updates stored with their cluster's running norms (``scan_round``, as
    ``after_train``), the criterion, then the split of the one cluster (``sattler_split``, as
    ``_try_split``: exact, or above ``sample_above`` the sample asked first and the rest
    ``QUERY_BATCH`` at a time). Requests cost nothing here: the rows are drawn when read."""
    from common.clustering.bipartition import NormSums, scan_round, should_split
    from common.clustering.sampled import kept_clients, kept_store, sattler_split, scan_sketch
    from common.clustering.similarity import update_similarity
    from strategies.cfl_sattler import QUERY_BATCH, SPLIT_SAMPLE, CFLSattlerParams

    truth = planted(n, 2, rng)
    # every update received (each round's, then the split's fresh ones): drawn when read, not timed
    fresh = LazyRows(truth, sizes.params, rng, meter)
    similarity = update_similarity(n, sizes.params, sketch, SEED)

    kept = kept_clients(range(n), SEED, sample_above, SPLIT_SAMPLE)
    store = kept_store(similarity.keep, kept)  # CFLSattler._store

    sums: dict[int, NormSums] = {}
    for rows in batches(n, rng):
        with meter.measure(exclude=0):
            stored = scan_sketch(similarity, kept)
            sums = scan_round(
                rows.tolist(), fresh.subset(rows), np.zeros(len(rows), dtype=np.int64), store, sketch=stored
            )
    p = CFLSattlerParams()
    labels = np.zeros(n, dtype=np.int64)
    with meter.measure(exclude=0):
        should_split(
            sums[0].ratio(),
            sums[0].norms()[2],
            n,
            p.split_after + 1,
            eps1=p.eps1,
            eps2=p.eps2,
            split_after=p.split_after,
        )
        split = sattler_split(
            range(n),
            lambda ids: (ids, fresh.subset(ids)),
            store=store,
            sketch_dim=sketch,
            seed=SEED,
            test=p.separation,
            sample_above=sample_above,
            sample_size=SPLIT_SAMPLE,
            batch=QUERY_BATCH,
        )
    if split is not None and split.kept:
        labels[np.asarray(split.halves[1], dtype=np.int64)] = 1
    return labels, truth


def _flag(n, sizes, shapes, meter, rng, sample_above: int = SAMPLE_ABOVE):
    from common.clustering.flag import flag_labels, flag_proximity, sweep_cuts, threshold_grid
    from common.clustering.hierarchical import linkage_tree
    from common.clustering.oneshot import Cut, cut_distances
    from common.clustering.similarity import AUTO_SKETCH_DIM, auto_sketch_dim

    truth = planted(n, GROUPS, rng)
    bases = class_bases(truth, rng, dtype=np.float32)
    counts = np.zeros((n, sizes.classes))
    for i, b in enumerate(bases):
        counts[i, sorted(b)] = rng.integers(50, 500, size=len(b))
    # what the step gets: FLAG.collect count-sketches each batch of updates as it arrives when all N would
    # not fit (auto_sketch_dim), so Gaussian rows of the sketch's size stand for the sketched updates
    dim = AUTO_SKETCH_DIM if auto_sketch_dim(n, sizes.params) else sizes.params
    updates = list(vectors(truth, dim, rng, noise=1.0))
    cut = Cut(threshold=1.0, num_clusters=GROUPS)
    weights = {"beta": 0.5, "delta": 0.5, "seed": SEED}
    with meter.measure():  # FLAG._proximity, choose_alpha's sweep and cluster_signals' cut
        a, _, _, sample = flag_proximity(bases, counts, updates, sizes.classes, sample_above=sample_above, **weights)
        tree = linkage_tree(a, "average")
        sweep_cuts(a, threshold_grid(0.1), "average", tree=tree)
        labels = flag_labels(sample, cut_distances(a, cut, tree)[0], bases, counts, updates, sizes.classes, **weights)
    return labels, truth


def _cflgp(n, sizes, shapes, meter, rng, ratio: float = 0.0, sample_above: int = SAMPLE_ABOVE):
    from common.clustering import compression, spectral
    from common.clustering.sampled import sampled_cflgp

    k = GROUPS
    size = compression.compressed_size(sizes.params, ratio or compression.automatic_ratio(n, k, sizes.params))
    truth = planted(n, GROUPS, rng)
    centers = rng.standard_normal((GROUPS, k, size), dtype=np.float32)
    blocks = {p: centers[truth[p]] + rng.standard_normal((k, size), dtype=np.float32) for p in range(n)}
    counts = {p: np.ones(k, dtype=np.int64) for p in range(n)}
    fresh = vectors(truth, size, rng, noise=1.0, centers=centers[:, 0])
    previous = rng.integers(0, k, size=n)
    with meter.measure(exclude=fresh.nbytes):
        for p in range(n):
            blocks[p][0] = spectral.update_block(blocks[p][0], fresh[p], int(counts[p][0]))
            counts[p][0] += 1
        pids = sorted(blocks)
        stacked = np.stack([blocks[p] for p in pids])
        labels, _, _, _ = sampled_cflgp(
            stacked,
            np.stack([counts[p] for p in pids]),
            previous,
            impute_seed=SEED,
            seed=SEED,
            sample_above=sample_above,
            overwrite_blocks=True,
        )
    return labels, truth


def _cflgp_estimate(n, sizes, shapes, meter, rng, sample_above: int = SAMPLE_ABOVE):
    """App. G's K estimate on the profile of ``max-clusters`` models, k up to ``cfl-gp-auto-max-clusters``
    (the strategy's ``_estimate_k``)."""
    from common.clustering import compression, spectral
    from common.clustering.sampled import sampled_estimate
    from strategies.cfl_gp import CFLGPParams

    params = CFLGPParams()
    k = params.max_clusters
    size = compression.compressed_size(sizes.params, compression.automatic_ratio(n, k, sizes.params))
    truth = planted(n, GROUPS, rng)
    centers = rng.standard_normal((GROUPS, k, size), dtype=np.float32)
    blocks = rng.standard_normal((n, k, size), dtype=np.float32)
    for lo in range(0, n, 1024):  # not centers[truth] whole: a second (n, k, size) array
        blocks[lo : lo + 1024] += centers[truth[lo : lo + 1024]]
    with meter.measure():
        g = spectral.completed_profile(
            blocks, np.ones((n, k)), np.zeros(n, dtype=np.int64), SEED, overwrite_blocks=True
        )
        estimate = sampled_estimate(g, params.estimate_limit(n, size), SEED, sample_above)
    return estimate.labels, truth


def _fmt(x: int) -> str:
    return f"{x:,}"


F32 = 4


def _pairs(n: int, sample_above: int = SAMPLE_ABOVE) -> int:
    """Clients whose pairwise matrices a step holds: all ``n``, or the sample above ``sample_above``."""
    from common.clustering.sampled import use_sample
    from common.clustering.subspaces import SAMPLE_SIZE

    return SAMPLE_SIZE if use_sample(n, sample_above) else n


def _update_bytes(n: int, s: Sizes, sample_above: int = SAMPLE_ABOVE) -> int:
    """The updates' float64 copy or sketch (all N, or the sample), plus N x N (or S x S) matrices.

    The updates themselves are drawn when read (``LazyRows``), a bank of 1,024 rows.
    """
    from common.clustering.similarity import AUTO_SKETCH_DIM, auto_sketch_dim

    m = _pairs(n, sample_above)
    kept = AUTO_SKETCH_DIM * F32 if auto_sketch_dim(m, s.params) else s.params * 8
    return (LazyRows.BANK + m) * s.params * F32 + m * kept + 4 * m * m * 8


def _flag_bytes(n: int, s: Sizes, sample_above: int = SAMPLE_ABOVE) -> int:
    """The float32 class bases and (sketched) updates of all N, and FLAG's matrices (N x N, or the sample's)."""
    from common.clustering.similarity import AUTO_SKETCH_DIM, auto_sketch_dim

    dim = AUTO_SKETCH_DIM if auto_sketch_dim(n, s.params) else s.params
    m = _pairs(n, sample_above)
    return n * (CLASSES_PER_CLIENT * FEATURES * SUBSPACE_VECTORS + dim) * F32 + 5 * m * m * 8


def _auto_size(n: int, s: Sizes) -> int:
    from common.clustering import compression

    return compression.compressed_size(s.params, compression.automatic_ratio(n, GROUPS, s.params))


def _stored_bytes(n: int, s: Sizes, sample_above: int = SAMPLE_ABOVE) -> int:
    """The bank of rows, the stored (full or sketched) updates (with growth), S (dense up to
    ``SAMPLE_ABOVE``) and the split's matrices (all N, or the sample)."""
    from common.clustering.sampled import use_sample
    from common.clustering.similarity import auto_sketch_dim

    kept = auto_sketch_dim(n, s.params) or s.params
    dense = 0 if use_sample(n, SAMPLE_ABOVE) else n
    m = _pairs(n, sample_above)
    return LazyRows.BANK * s.params * F32 + 3 * n * kept * F32 + 2 * dense * dense * 4 + 3 * m * m * 8


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant(
            FedAvg.name,
            FedAvg.name,
            lambda s: f"model {_fmt(s.params)} f32 (x min({FRACTION:g} N, {REPLY_CAP:,}) replies)",
            lambda n, s: 2 * cohort(n) * s.params * F32,
            lambda n, s, sh, m, r: _fedavg(n, s, sh, m, r),
            note="weighted_average of one round's replies",
        ),
        Variant(
            FedMedian.name,
            FedMedian.name,
            lambda s: f"model {_fmt(s.params)} f32 (x min({FRACTION:g} N, {REPLY_CAP:,}) replies)",
            lambda n, s: 3 * cohort(n) * s.params * F32,
            lambda n, s, sh, m, r: _fedmedian(n, s, sh, m, r),
            note="coordinate_median of one round's replies (FedProx and Local: FedAvg's step or none)",
        ),
        Variant(
            IFCA.name,
            IFCA.name,
            lambda s: f"model {_fmt(s.params)} f32 + cluster-id (x min({FRACTION:g} N, {REPLY_CAP:,}))",
            lambda n, s: 2 * cohort(n) * s.params * F32,
            lambda n, s, sh, m, r: _ifca(n, s, sh, m, r),
            note="per-cluster weighted_average, K = 8",
        ),
        Variant(
            FeSEM.name,
            FeSEM.name,
            lambda s: f"model {_fmt(s.params)} f32 (x min({FRACTION:g} N, {REPLY_CAP:,}) replies)",
            lambda n, s: cohort(n) * s.params * F32,
            lambda n, s, sh, m, r: _fesem(n, s, sh, m, r),
            note=f"nearest of K = {GROUPS} centres (L2) and the weighted-mean update, one round's replies",
        ),
        Variant(
            CFLGT.name,
            CFLGT.name,
            lambda s: f"trajectory {s.classes}x2 f64",
            lambda n, s: 6 * min(n, AP_MAX_POINTS) ** 2 * 8,
            _cflgt,
            note=f"cluster_trajectories: trajectory_distances + affinity_propagation (sampled above {AP_MAX_POINTS:,})",
        ),
        Variant(
            FedClust.name,
            FedClust.name,
            lambda s: f"head {_fmt(s.head)} f32",
            lambda n, s: n * s.head * 8 + 4 * _pairs(n) ** 2 * 8,
            _fedclust,
            note=f"pairwise_distances + cut_tree; above {SAMPLE_ABOVE:,}: sampled_cut",
        ),
        Variant(
            "fedclust-sampled",
            FedClust.name,
            lambda s: f"head {_fmt(s.head)} f32",
            lambda n, s: n * s.head * 8 + 4 * _pairs(n, 1) ** 2 * 8,
            lambda n, s, sh, m, r: _fedclust(n, s, sh, m, r, sample_above=1),
            note="sampled_cut at every N (fedclust-sample-above 1)",
        ),
        Variant(
            FLHC.name,
            FLHC.name,
            lambda s: f"update {_fmt(s.params)} f32",
            _update_bytes,
            _flhc,
            note=f"sketch_rows (auto CountSketch) + pairwise_distances + cut_tree; above {SAMPLE_ABOVE:,}: sampled_cut",
        ),
        Variant(
            "flhc-sampled",
            FLHC.name,
            lambda s: f"update {_fmt(s.params)} f32",
            lambda n, s: _update_bytes(n, s, 1),
            lambda n, s, sh, m, r: _flhc(n, s, sh, m, r, sample_above=1),
            note="sampled_cut at every N (flhc-sample-above 1)",
        ),
        Variant(
            FLAG.name,
            FLAG.name,
            lambda s: (
                f"{CLASSES_PER_CLIENT} bases {FEATURES}x{SUBSPACE_VECTORS} f32 + update {_fmt(s.params)} "
                "f32 (sketched on arrival)"
            ),
            lambda n, s: _flag_bytes(n, s),
            _flag,
            note=f"data_similarity + gradient_angles + proximity + sweep_cuts + cut; above {SAMPLE_ABOVE:,}: "
            "flag_sample + flag_place",
        ),
        Variant(
            "flag-sampled",
            FLAG.name,
            lambda s: (
                f"{CLASSES_PER_CLIENT} bases {FEATURES}x{SUBSPACE_VECTORS} f32 + update {_fmt(s.params)} "
                "f32 (sketched on arrival)"
            ),
            lambda n, s: _flag_bytes(n, s, 1),
            lambda n, s, sh, m, r: _flag(n, s, sh, m, r, sample_above=1),
            note="flag_sample + flag_place at every N (flag-sample-above 1)",
        ),
        Variant(
            FLIC.name,
            FLIC.name,
            lambda s: f"update {_fmt(s.params)} f32",
            _stored_bytes,
            _flic,
            note=f"update_similarity + update per round + flic_clusters; above {SAMPLE_ABOVE:,}: sampled_flic",
        ),
        Variant(
            "flic-sampled",
            FLIC.name,
            lambda s: f"update {_fmt(s.params)} f32",
            lambda n, s: _stored_bytes(n, s, 1),
            lambda n, s, sh, m, r: _flic(n, s, sh, m, r, sample_above=1),
            note="sampled_flic at every N (flic-sample-above 1)",
        ),
        Variant(
            CFLSattler.name,
            CFLSattler.name,
            lambda s: f"update {_fmt(s.params)} f32",
            _stored_bytes,
            _sattler,
            groups=2,
            note=f"scan_round per round + sattler_split of all N; above {SAMPLE_ABOVE:,}: its sample + join_halves",
        ),
        Variant(
            "cfl-sattler-sampled",
            CFLSattler.name,
            lambda s: f"update {_fmt(s.params)} f32",
            lambda n, s: _stored_bytes(n, s, 1),
            lambda n, s, sh, m, r: _sattler(n, s, sh, m, r, sample_above=1),
            groups=2,
            note="sattler_split's sample + join_halves at every N (cfl-sattler-sample-above 1)",
        ),
        Variant(
            CFLGP.name,
            CFLGP.name,
            lambda s: f"profile {GROUPS}x{_fmt(s.params)} f32 / automatic ratio",
            lambda n, s: 3 * n * GROUPS * _auto_size(n, s) * F32,
            _cflgp,
            note=f"update_block + spectral_clustering, K = 5, compression-ratio 0 (automatic); above {SAMPLE_ABOVE:,}: "
            "sampled_cflgp",
        ),
        Variant(
            "cfl-gp-sampled",
            CFLGP.name,
            lambda s: f"profile {GROUPS}x{_fmt(s.params)} f32 / automatic ratio",
            lambda n, s: 3 * n * GROUPS * _auto_size(n, s) * F32,
            lambda n, s, sh, m, r: _cflgp(n, s, sh, m, r, sample_above=1),
            note="sampled_cflgp at every N (cfl-gp-sample-above 1)",
        ),
        Variant(
            "cfl-gp-estimate",
            CFLGP.name,
            lambda s: "profile 8 blocks / automatic ratio",
            lambda n, s: 3 * n * 8 * _auto_size(n, s) * F32,
            _cflgp_estimate,
            note=f"estimate_num_clusters (App. G on max-clusters 8 models, k up to half the clients, at most "
            f"{AUTO_MAX_CLUSTERS} and the blocks the profile budget holds); above {SAMPLE_ABOVE:,}: k-means and "
            "silhouettes on the sample (sampled_estimate)",
        ),
        Variant(
            "cfl-gp-estimate-sampled",
            CFLGP.name,
            lambda s: "profile 8 blocks / automatic ratio",
            lambda n, s: 3 * n * 8 * _auto_size(n, s) * F32,
            lambda n, s, sh, m, r: _cflgp_estimate(n, s, sh, m, r, sample_above=1),
            note="k-means and silhouettes on the sample at every N (cfl-gp-sample-above 1)",
        ),
        Variant(
            "cfl-gp-c1",
            CFLGP.name,
            lambda s: f"profile {GROUPS}x{_fmt(s.params)} f32",
            lambda n, s: 3 * n * GROUPS * s.params * F32,
            lambda n, s, sh, m, r: _cflgp(n, s, sh, m, r, 1.0),
            note="compression-ratio 1 (the paper's profile)",
        ),
        Variant(
            f"cfl-gp-c{COMPRESSION:g}",
            CFLGP.name,
            lambda s: f"profile {GROUPS}x{_fmt(math.ceil(s.params / COMPRESSION))} f32",
            lambda n, s: 3 * n * GROUPS * math.ceil(s.params / COMPRESSION) * F32 + 2 * n * n * 8,
            lambda n, s, sh, m, r: _cflgp(n, s, sh, m, r, COMPRESSION),
            note=f"compression-ratio {COMPRESSION:g}",
        ),
        _pacfl_variant(PACFL.name, PACFLParams().pacfl_measure, "the default"),
        _pacfl_variant("pacfl-stacked-mean", "mean", "the stacked bases' mean principal angle, the former default"),
        _pacfl_variant("pacfl-reference", "reference", "block-wise column cosines"),
    ]
}


# ------------------------------------------------------------------ one measurement (subprocess)
def measure(variant: str, n: int, sizes: Sizes, shapes: list, trace_limit: float = 60.0) -> dict[str, Any]:
    """Run ``variant`` at ``n`` clients: a timed pass, then a traced pass if the first took <= trace_limit s."""
    from sklearn.metrics import adjusted_rand_score

    spec = VARIANTS[variant]
    meter = Meter(trace=False)
    labels, truth = spec.run(n, sizes, shapes, meter, np.random.default_rng(SEED))
    rss_mb = meter.rss_increase / 2**20
    out: dict[str, Any] = {
        "variant": variant,
        "algorithm": spec.algorithm,
        "n": n,
        "seconds": meter.seconds,
        "cpu_seconds": meter.cpu_seconds,
        "rss_mb": rss_mb,
        "peak_mb": None,
        "ari": None,
        "clusters": None,
    }
    if labels is not None:
        out["ari"] = float(adjusted_rand_score(truth, labels))
        out["clusters"] = len(np.unique(labels))
    del labels, truth
    if meter.seconds <= trace_limit:
        traced = Meter(trace=True)
        tracemalloc.start()
        spec.run(n, sizes, shapes, traced, np.random.default_rng(SEED))
        tracemalloc.stop()
        out["peak_mb"] = traced.peak / 2**20
    return out


def run_worker(
    variant: str, n: int, model: str, shapes: list, timeout: float, trace_limit: float, cores: Sequence[int] = ()
) -> dict[str, Any]:
    """``measure`` in a fresh interpreter (its own RSS and allocator state; no torch imported there).

    ``cores``: pin the interpreter to these CPUs, with as many BLAS / OpenMP threads.
    """
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.scaling",
        "--worker",
        variant,
        "--n",
        str(n),
        "--model",
        model,
        "--trace-limit",
        str(trace_limit),
        "--shapes",
        json.dumps(shapes),
    ]
    try:
        env = None
        if cores:
            threads = str(len(cores))
            env = {
                **os.environ,
                **dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), threads),
            }
            cmd = ["taskset", "-c", ",".join(str(c) for c in cores), *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"variant": variant, "n": n, "status": f"timed out after {timeout:g} s"}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"variant": variant, "n": n, "status": f"failed (exit {proc.returncode}): {proc.stderr[-300:]}"}
    return {**json.loads(lines[-1]), "status": "ok"}


class Budget:
    """Runs jobs in threads, each on a free slot of CPUs, while their estimated GB fit ``memory_gb``."""

    def __init__(self, memory_gb: float, slots: list[range]) -> None:
        self.free_gb, self.slots, self.running = memory_gb, list(slots), 0
        self.threads: list[threading.Thread] = []
        self.cond = threading.Condition()

    def start(self, key: int, gb: float, job: Callable[[list[int]], dict], results: dict) -> None:
        """Wait for a slot and ``gb`` (at least the whole budget when ``gb`` exceeds it), then run ``job`` on it."""
        with self.cond:
            self.cond.wait_for(lambda: self.slots and (self.free_gb >= gb or self.running == 0))
            cores, self.free_gb, self.running = self.slots.pop(0), self.free_gb - gb, self.running + 1

        def run() -> None:
            try:
                results[key] = job(list(cores))
                print(json.dumps(results[key]), flush=True)
            finally:
                with self.cond:
                    self.slots.append(cores)
                    self.free_gb, self.running = self.free_gb + gb, self.running - 1
                    self.cond.notify_all()

        thread = threading.Thread(target=run)
        self.threads.append(thread)
        thread.start()

    def join(self) -> None:
        """Wait for every job."""
        for t in self.threads:
            t.join()


# ------------------------------------------------------------------ table
def growth_exponent(sizes: list[float], values: list[float]) -> float | None:
    """Least-squares slope ``b`` of ``log(value) = a + b log(N)``; None with fewer than 2 positive points
    or fewer than 2 distinct sizes among them (repeated runs of one size give no slope)."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(sizes, values, strict=True) if v and v > 0]
    if len(pts) < 2 or len({x for x, _ in pts}) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each variant's time and memory exponents (over its successful sizes) to its rows."""
    for variant in dict.fromkeys(r["variant"] for r in rows):
        ok = [r for r in rows if r["variant"] == variant and r.get("status") == "ok"]
        ns = [r["n"] for r in ok]
        b_time = growth_exponent(ns, [r["seconds"] for r in ok])
        b_mem = growth_exponent(ns, [r["rss_mb"] for r in ok])  # RSS: measured for every size
        for r in rows:
            if r["variant"] == variant:
                r["time_exponent"], r["memory_exponent"] = b_time, b_mem
    return rows


def _num(x: float | None, fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def markdown(rows: list[dict[str, Any]], model: str, sizes: Sizes) -> str:
    """``scaling.md``: the table of every (variant, N) and the growth exponents."""
    head = (
        f"Server clustering step, {model} (params {_fmt(sizes.params)}, head {_fmt(sizes.head)}), "
        f"{GROUPS} planted groups, seed {SEED}.\n\n"
        "| algorithm | variant | signal per client | N | seconds | CPU s | peak MB (tracemalloc) | RSS MB | ARI "
        "| time exp. | memory exp. |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        spec = VARIANTS[r["variant"]]
        if r.get("status") != "ok":
            lines.append(
                f"| {spec.algorithm} | {r['variant']} | {spec.signal(sizes)} | {_fmt(r['n'])} | "
                f"{r['status']} | | | | | {_num(r.get('time_exponent'), '.2f')} | "
                f"{_num(r.get('memory_exponent'), '.2f')} |"
            )
            continue
        lines.append(
            f"| {spec.algorithm} | {r['variant']} | {spec.signal(sizes)} | {_fmt(r['n'])} | "
            f"{r['seconds']:.3f} | {_num(r.get('cpu_seconds'), '.3f')} | {_num(r['peak_mb'], '.1f')} | "
            f"{r['rss_mb']:.1f} | "
            f"{_num(r['ari'], '.3f')} | {_num(r['time_exponent'], '.2f')} | "
            f"{_num(r['memory_exponent'], '.2f')} |"
        )
    return head + "\n".join(lines) + "\n"


def write(rows: list[dict[str, Any]], out: Path, model: str, sizes: Sizes) -> None:
    """Write ``scaling.md``, ``scaling.csv`` and ``scaling.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for r in rows:
        r["signal"] = VARIANTS[r["variant"]].signal(sizes)
        r["step"] = VARIANTS[r["variant"]].note
    (out / "scaling.json").write_text(
        json.dumps({"model": model, "params": sizes.params, "head": sizes.head, "rows": rows}, indent=1)
    )
    keys = [
        "algorithm",
        "variant",
        "signal",
        "n",
        "status",
        "seconds",
        "cpu_seconds",
        "peak_mb",
        "rss_mb",
        "ari",
        "clusters",
        "time_exponent",
        "memory_exponent",
        "step",
    ]
    with open(out / "scaling.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "algorithm": VARIANTS[r["variant"]].algorithm} for r in rows)
    (out / "scaling.md").write_text(markdown(rows, model, sizes))


def main(argv: list[str] | None = None) -> int:
    """The command line: measure every variant at every size in fresh subprocesses."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="comma-separated client counts N")
    parser.add_argument("--model", default="dnn", choices=("dnn", "lenet5"))
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "scaling")
    parser.add_argument("--only", default="", help="comma-separated algorithms or variants (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per (variant, N) subprocess")
    parser.add_argument(
        "--trace-limit",
        type=float,
        default=120.0,
        help="skip the traced pass when the timed pass took longer (seconds)",
    )
    parser.add_argument(
        "--max-gb", type=float, default=12.0, help="do not run a (variant, N) whose estimated memory exceeds this"
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=0,
        help="run this many steps at once, each pinned to its own --cores-per-step CPUs (0: one at a time, unpinned)",
    )
    parser.add_argument("--cores-per-step", type=int, default=2, help="CPUs of each step with --parallel")
    parser.add_argument("--first-core", type=int, default=0, help="with --parallel: the slots' CPUs start here")
    parser.add_argument(
        "--memory-gb", type=float, default=100.0, help="with --parallel: estimated GB of the steps running at once"
    )
    add_record_flag(parser)
    parser.add_argument("--record-name", default="", help="the record's name (default: scaling-<sizes>)")
    parser.add_argument("--record-title", default="", help="added to the record's table title")
    parser.add_argument("--record-notes", default="", help="Markdown under the record's table")
    parser.add_argument("--record-load", default="", help="with --rows: the load average while the rows were measured")
    parser.add_argument(
        "--rows",
        type=Path,
        default=None,
        help="measure nothing: table (and record) the JSON rows a run printed, of the variants and sizes asked",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --record: replace only these rows (same variant and N) in the existing record, keeping its others",
    )
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        shapes = [(k, tuple(s)) for k, s in json.loads(args.shapes)]
        head = dict(shapes)["head.weight"]
        sizes = Sizes(sum(math.prod(s) for _, s in shapes), head[1], head[0])
        print(json.dumps(measure(args.worker, args.n, sizes, shapes, args.trace_limit)))
        return 0
    sizes, shapes = model_sizes(args.model)
    try:
        ns = sorted(int(x) for x in args.sizes.split(",") if x.strip())
    except ValueError:
        parser.error(f"--sizes must be comma-separated ints. Got {args.sizes!r} instead.")
    wanted = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [w for w in wanted if w not in VARIANTS and w not in {v.algorithm for v in VARIANTS.values()}]
    if unknown:
        parser.error(f"--only must name algorithms or variants from {sorted(VARIANTS)}. Got {unknown} instead.")
    # a variant's name selects that variant; an algorithm's (not also a variant's) all of its variants
    variants = [
        v
        for v in VARIANTS.values()
        if not wanted or v.name in wanted or (v.algorithm in wanted and v.algorithm not in VARIANTS)
    ]
    load_before = load_average()
    if args.rows is not None:
        names = {v.name for v in variants}
        printed = [json.loads(x) for x in args.rows.read_text().splitlines() if x.startswith("{")]
        return report(args, [r for r in printed if r["variant"] in names and r["n"] in ns], ns, sizes, load_before)
    jobs = [(v, n) for v in variants for n in ns]
    results: dict[int, dict[str, Any]] = {}
    if args.parallel > 0:
        budget = Budget(
            args.memory_gb,
            [
                range(args.first_core + i * args.cores_per_step, args.first_core + (i + 1) * args.cores_per_step)
                for i in range(args.parallel)
            ],
        )
    for i, (v, n) in enumerate(jobs):
        need = v.input_bytes(n, sizes) / 2**30
        if need > args.max_gb:
            results[i] = {"variant": v.name, "n": n, "status": f"not run: needs ~{need:.0f} GB"}
            print(json.dumps(results[i]), flush=True)
        elif args.parallel <= 0:
            results[i] = run_worker(v.name, n, args.model, shapes, args.timeout, args.trace_limit)
            print(json.dumps(results[i]), flush=True)
        else:
            budget.start(
                i,
                need,
                lambda cores, v=v, n=n: run_worker(
                    v.name, n, args.model, shapes, args.timeout, args.trace_limit, cores
                ),
                results,
            )
    if args.parallel > 0:
        budget.join()
    return report(args, [results[i] for i in range(len(jobs))], ns, sizes, load_before)


def report(args: argparse.Namespace, rows: list[dict[str, Any]], ns: list[int], sizes: Sizes, load_before: str) -> int:
    """Write the table files of ``rows`` and, with ``--record``, their record."""
    rows = summarise(rows)
    write(rows, args.out, args.model, sizes)
    print(markdown(rows, args.model, sizes))
    if args.record:
        at = ", ".join(f"{n:,}" for n in ns)
        title = f"Each strategy's server clustering step at {at} clients{args.record_title}"
        text = markdown(rows, args.model, sizes) + (f"\n{args.record_notes}\n" if args.record_notes else "")
        tables = tables_from_markdown(title, text)
        name = args.record_name or "scaling-" + "-".join(str(n) for n in ns)
        if args.merge:
            load = args.record_load or load_average()
            new = Record(name, SCALING, current_command(), tables, load=load)
            record = merge_record(read_record(RECORDS_DIR / f"{name}.json"), new, key=lambda row: (row[1], row[3]))
            print(f"wrote {write_record(record)}")
        elif args.record_load:
            record = Record(name, SCALING, current_command(), tables, load=args.record_load)
            print(f"wrote {write_record(record)}")
        else:
            print(f"wrote {save_tables(name, SCALING, tables, load_before)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
