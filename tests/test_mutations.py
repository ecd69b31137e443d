"""Mutation check: each formula error below, injected into a copy of the project, fails its tests.

A test that passes whatever the code computes checks nothing. Every entry replaces one exact
text in one file of a temporary copy of the source tree (the text must occur once, so a
refactoring that removes it fails here loudly instead of silently testing nothing) and runs
the named tests on the copy in a child process (forked from one process that imported torch,
Flower and scikit-learn once: ``tests.helpers.forked_pytest``); they must fail (pytest exit code 1,
not a collection error). Add an entry with every fix of a formula.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = "tests/strategies/test_fidelity.py::"

# (name, file, original text, mutated text, tests that must fail)
MUTATIONS = [
    (
        "cflgt forces on the initial model",
        "strategies/cflgt.py",
        "self.reference = self.models[0].copy()",
        "self.reference = self.initial.copy()",
        [FIDELITY + "test_cflgt_forces_and_cluster_models_come_from_the_pretrained_model"],
    ),
    (
        "cflgt clusters start from the initial model",
        "strategies/cflgt.py",
        "self.set_clusters([self.reference.copy() for",
        "self.set_clusters([self.initial.copy() for",
        [FIDELITY + "test_cflgt_forces_and_cluster_models_come_from_the_pretrained_model"],
    ),
    (
        "forces on the test split",
        "client/signals/forces.py",
        "        task.data.x_train,\n        task.data.y_train,\n        task.info.num_classes,",
        "        task.data.x_test,\n        task.data.y_test,\n        task.info.num_classes,",
        [FIDELITY + "test_forces_bases_and_holdout_accuracy_read_the_train_split"],
    ),
    (
        "flag bases on the test split",
        "client/signals/subspaces.py",
        "class_bases(task.data.x_train, task.data.y_train,",
        "class_bases(task.data.x_test, task.data.y_test,",
        [FIDELITY + "test_forces_bases_and_holdout_accuracy_read_the_train_split"],
    ),
    (
        "flag sweep accuracy on the test split",
        "client/signals/flag.py",
        "_, accuracy = evaluate(model, x[val], y[val],",
        "_, accuracy = evaluate(model, task.data.x_test, task.data.y_test,",
        [FIDELITY + "test_forces_bases_and_holdout_accuracy_read_the_train_split"],
    ),
    (
        "flag gradient-epochs ignored",
        "strategies/flag.py",
        "config={keys.LOCAL_EPOCHS: p.gradient_epochs},",
        "config={},",
        [FIDELITY + "test_flag_update_trains_gradient_epochs_not_local_epochs"],
    ),
    (
        "fedclust newcomers from the cluster model",
        "strategies/fedclust.py",
        "models=[self.initial_model],\n            config={keys.CLUSTER_EPOCHS",
        "models=[self.models[0]],\n            config={keys.CLUSTER_EPOCHS",
        [FIDELITY + "test_fedclust_newcomers_train_the_initial_model"],
    ),
    (
        "fedclust squared euclidean",
        "common/clustering/oneshot.py",
        "distances = pairwise_distances(final_layers)",
        'distances = pairwise_distances(final_layers, "sqeuclidean")',
        [FIDELITY + "test_fedclust_distance_is_plain_euclidean_and_cuts_by_it"],
    ),
    (
        "pacfl measure ignored",
        "common/clustering/oneshot.py",
        "distances = client_distances(bases, measure)",
        'distances = client_distances(bases, "smallest")',
        [FIDELITY + "test_pacfl_measures_differ_on_subspaces_that_are_not_axis_aligned"],
    ),
    (
        "cfl-gp one coordinate subset for every model",
        "strategies/cfl_gp.py",
        "compression.block_seed(self.training.seed, k),",
        "compression.block_seed(self.training.seed, 0),",
        [FIDELITY + "test_cflgp_server_blocks_are_the_clients_compressed_profiles_per_model"],
    ),
    (
        "cfl-gp blocks not averaged",
        "strategies/cfl_gp.py",
        "spectral.update_block(blocks[k], signal.vector, int(counts[k]))",
        "spectral.update_block(blocks[k], signal.vector, 0)",
        [FIDELITY + "test_cflgp_server_blocks_are_the_clients_compressed_profiles_per_model"],
    ),
    (
        "fedprox mu doubled",
        "common/training.py",
        "objective = loss + 0.5 * proximal_mu * gap",
        "objective = loss + proximal_mu * gap",
        [FIDELITY + "test_fedprox_step_adds_mu_times_the_distance_to_the_start"],
    ),
    (
        "sattler keeps splits that do not separate",
        "common/clustering/sampled.py",
        'kept = split.intra > split.cross or test == "off"',
        'kept = split.intra > split.cross - 2.0 or test == "off"',
        [FIDELITY + "test_sattler_keeps_a_split_of_opposed_groups_and_refuses_one_of_unrelated_updates"],
    ),
    (
        "sattler separation swapped",
        "common/clustering/bipartition.py",
        "return cross, float(min(inside)) if inside else 1.0",
        "return float(min(inside)) if inside else 1.0, cross",
        [
            FIDELITY + "test_sattler_keeps_a_split_of_opposed_groups_and_refuses_one_of_unrelated_updates",
            (
                "tests/common/test_clustering_louvain_bipartition.py::"
                "test_nearest_separation_keeps_a_split_of_four_groups_that_the_strict_test_refuses"
            ),
        ],
    ),
    (
        "flic plateau against the first round only",
        "common/clustering/flic.py",
        "early = loss[:window].mean() - loss[window : 2 * window].mean()",
        "early = loss[0] - loss[1]",
        [
            "tests/common/test_clustering_flic.py::test_loss_plateau_fires_where_the_recent_fall_drops_below_tol_of_the_early_one"
        ],
    ),
    (
        "flag elbow to the far end of a plateau",
        "common/clustering/flag.py",
        "        return int(order[plateau])\n",
        "        return int(order[-1] if y[-1] >= y.max() else order[plateau])\n",
        [
            "tests/common/test_clustering_flag.py::test_elbow_takes_the_fewest_clusters_on_a_tied_plateau",
            "tests/common/test_clustering_flag.py::test_elbow_is_not_pushed_to_the_end_by_noise_on_the_plateau",
        ],
    ),
    (
        "cfl-gp estimate on the uncentred profile",
        "common/clustering/spectral.py",
        "g = g - g.mean(axis=1, keepdims=True, dtype=np.float64).astype(g.dtype)",
        "g = g",
        ["tests/common/test_spectral.py::test_estimate_num_clusters_sees_past_a_direction_every_client_shares"],
    ),
    (
        "cfl-gp unanswered blocks not completed",
        "common/clustering/spectral.py",
        "b[band, k] = (rows @ coef[:, band]).T",
        "b[band, k] = b[band, k]",
        ["tests/common/test_spectral.py::test_unanswered_blocks_are_imputed_not_left_at_zero"],
    ),
    (
        "one-shot cut falls back to average linkage",
        "common/clustering/oneshot.py",
        "num_clusters=cut.num_clusters, linkage=cut.linkage, tree=tree)",
        "num_clusters=cut.num_clusters, tree=tree)",
        [
            (
                "tests/common/test_clustering_oneshot.py::"
                "test_each_linkage_reaches_the_cut_by_count_threshold_and_automatic_cut"
            )
        ],
    ),
    (
        "flic newcomer degree counts self-similarity",
        "common/clustering/flic.py",
        "degrees = s.sum(axis=1) - np.diag(s)",
        "degrees = s.sum(axis=1)",
        ["tests/common/test_clustering_flic.py::test_join_by_modularity_ignores_the_diagonal"],
    ),
    (
        "affinity propagation not retried",
        "common/clustering/trajectories.py",
        "for floor, factor in retries",
        "for floor, factor in ()",
        [
            "tests/common/test_trajectories.py::test_affinity_propagation_retries_with_heavier_damping_when_it_does_not_converge"
        ],
    ),
    (
        "cflgt shares without the square root",
        "common/clustering/trajectories.py",
        "np.sign(points) * np.sqrt(np.abs(points) / np.where(totals > 0, totals, 1.0))",
        "np.sign(points) * (np.abs(points) / np.where(totals > 0, totals, 1.0))",
        ["tests/common/test_trajectories.py::test_share_points_on_hand_computed_forces"],
    ),
    (
        "cflgt midrange as the least pair similarity",
        "common/clustering/trajectories.py",
        "pref = (least + most) / 2",
        "pref = least",
        [
            "tests/common/test_trajectories.py::test_midrange_preference_is_halfway_between_the_least_and_the_most_similar_pair"
        ],
    ),
    (
        "cflgt newcomer's raw forces against the exemplars' shares",
        "strategies/cflgt.py",
        "trajectory_points(np.stack([got[p] for p in found]), self.compared),",
        "np.stack([got[p] for p in found]),",
        [
            "tests/strategies/test_mutants_cflgt.py::test_a_weak_newcomer_is_compared_in_the_same_points_as_the_exemplars"
        ],
    ),
    (
        "cfl-gp max-clusters projection on s",
        "common/clustering/spectral.py",
        "dims = min(k_max, *g.shape) if projection == MAX_CLUSTERS else s",
        "dims = s",
        [
            "tests/common/test_spectral.py::test_estimate_num_clusters_keeps_the_groups_a_far_group_hides_from_the_largest_gap"
        ],
    ),
    (
        "cfl-gp searches k only up to its models",
        "strategies/cfl_gp.py",
        "self.params.estimate_limit(len(pids), self.size, len(self.clients)),",
        "self.params.max_clusters,",
        [
            (
                "tests/strategies/test_mutants_cfl_gp.py::"
                "test_the_estimate_scores_k_past_the_models_up_to_half_the_clients_unless_given"
            )
        ],
    ),
    (
        "sampled estimate fits k-means on every client",
        "common/clustering/spectral.py",
        "found = kmeans_labels(features, k, seed, rows=scored)",
        "found = kmeans_labels(features, k, seed)",
        [
            "tests/common/test_mutants_spectral.py::test_estimate_num_clusters_fits_and_scores_only_the_clients_given",
            (
                "tests/common/test_clustering_scale_forms.py::"
                "test_sampled_estimate_scores_the_sampled_steps_sample_and_finds_the_exact_k"
            ),
        ],
    ),
    (
        "cfl-gp estimate searches one k past its patience",
        "common/clustering/spectral.py",
        "if misses >= ESTIMATE_PATIENCE:",
        "if misses > ESTIMATE_PATIENCE:",
        [
            "tests/common/test_mutants_spectral.py::test_estimate_num_clusters_stops_after_patience_ks_without_a_better_silhouette"
        ],
    ),
    (
        "k-means on rows refits the placed rows",
        "common/clustering/spectral.py",
        "fit = x if rows is None else x[rows]",
        "fit = x",
        [
            (
                "tests/common/test_spectral.py::"
                "test_kmeans_on_rows_fits_those_rows_and_places_every_other_by_the_nearest_fitted_mean"
            )
        ],
    ),
    # survivors of the mutmut run (docs/mutation.md)
    (
        "fl+hc sketches cityblock distances",
        "common/clustering/oneshot.py",
        'exact = metric == "cityblock"',
        'exact = metric != "cityblock"',
        [
            (
                "tests/common/test_clustering_oneshot.py::"
                "test_flhc_sketches_large_updates_with_its_seed_but_never_for_cityblock"
            )
        ],
    ),
    (
        "sattler ignores the sketch dimension",
        "common/clustering/bipartition.py",
        "rows = sketch_rows(updates, seed, sketch_dim=sketch_dim)",
        "rows = sketch_rows(updates, seed)",
        [
            (
                "tests/common/test_clustering_louvain_bipartition.py::"
                "test_sattler_bipartition_cuts_the_seeded_sketch_of_the_given_dimension"
            )
        ],
    ),
    (
        "flic plateau when the recent fall equals tol of the early one",
        "common/clustering/flic.py",
        "return bool(recent < tol * early) if early > 0 else True",
        "return bool(recent <= tol * early) if early > 0 else True",
        [
            (
                "tests/common/test_clustering_flic.py::"
                "test_loss_plateau_needs_the_recent_fall_strictly_below_tol_and_holds_when_the_early_one_is_zero"
            )
        ],
    ),
    (
        "flic newcomers penalised by every newcomer's links",
        "common/clustering/flic.py",
        "np.outer(links.sum(axis=1), sigma)",
        "np.outer(links.sum(axis=None), sigma)",
        [
            (
                "tests/common/test_clustering_flic.py::"
                "test_join_by_modularity_places_each_newcomer_as_if_alone_and_only_in_a_community"
            )
        ],
    ),
    (
        "cluster order not stable",
        "common/clustering/ordering.py",
        'np.argsort(labels, kind="stable")',
        "np.argsort(labels)",
        [
            (
                "tests/common/test_clustering_ordering.py::"
                "test_order_by_cluster_keeps_client_order_inside_a_cluster_beyond_a_short_array"
            )
        ],
    ),
    (
        "flag elbow's plateau misses a count exactly tol below the best",
        "common/clustering/flag.py",
        "plateau = int(np.argmax(y >= y.max() - tol))",
        "plateau = int(np.argmax(y > y.max() - tol))",
        [
            (
                "tests/common/test_clustering_flag.py::"
                "test_elbow_at_zero_tol_takes_the_first_best_and_reads_a_best_last_point_as_no_knee"
            )
        ],
    ),
    (
        "flic's loss plateau needs more than two windows",
        "common/clustering/flic.py",
        "if loss.size < 2 * window:",
        "if loss.size <= 2 * window:",
        ["tests/common/test_clustering_flic.py::test_loss_plateau_decides_at_exactly_two_windows"],
    ),
]

COPIED = ("client", "common", "server", "strategies", "tests", "benchmarks", "pyproject.toml")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the source tree (no caches, no results) to mutate."""
    root = tmp_path_factory.mktemp("mutant")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results"))
        elif src.exists():
            shutil.copy2(src, root / name)
    return root


@pytest.fixture(scope="module")
def pytest_in(tree) -> Iterator[Callable[[list[str], Path], int]]:
    """``pytest_in(args, log)`` runs pytest on ``tree`` in a child of one warm process (tests.helpers.forked_pytest)."""
    runner = subprocess.Popen(
        [sys.executable, "-I", str(ROOT / "tests" / "helpers" / "forked_pytest.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tree,
        text=True,
    )
    assert runner.stdin is not None and runner.stdout is not None

    def run(args: list[str], log: Path) -> int:
        runner.stdin.write(json.dumps({"cwd": str(tree), "args": args, "log": str(log)}) + "\n")
        runner.stdin.flush()
        ready, _, _ = select.select([runner.stdout], [], [], 600)
        assert ready, f"pytest {args} did not finish in 600 s"
        return int(json.loads(runner.stdout.readline())["rc"])

    try:
        yield run
    finally:
        runner.stdin.close()
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            runner.kill()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "path", "old", "new", "tests"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_mutation_is_caught(tree, pytest_in, tmp_path, name, path, old, new, tests):
    target = tree / path
    original = target.read_text()
    assert original.count(old) == 1, f"{name}: the text to mutate occurs {original.count(old)} times in {path}"
    target.write_text(original.replace(old, new))
    log = tmp_path / "pytest.log"
    try:
        rc = pytest_in(["-q", "-x", "-n", "0", "-p", "no:cacheprovider", *tests], log)
    finally:
        target.write_text(original)
    assert rc == 1, f"{name} was not caught (pytest exit {rc}):\n{log.read_text(errors='replace')[-2000:]}"


def test_the_warm_runner_imports_the_trees_own_modules(tree, pytest_in, tmp_path):
    """A child runs the copy's code, not a module imported before the fork nor the installed tree."""
    probe = tree / "tests" / "test_probe_tree.py"
    probe.write_text(
        "from pathlib import Path\nimport strategies\n\n"
        "def test_tree():\n    assert Path(strategies.__file__).resolve().parents[1] == Path.cwd().resolve()\n"
    )
    log = tmp_path / "pytest.log"
    try:
        assert pytest_in(["-q", "-n", "0", "-p", "no:cacheprovider", str(probe)], log) == 0, log.read_text()
        assert pytest_in(["-q", "-n", "0", "-p", "no:cacheprovider", str(probe) + "::absent"], log) == 4
    finally:
        probe.unlink()


def test_every_mutation_names_text_that_is_in_the_source_once():
    for name, path, old, new, tests in MUTATIONS:
        assert old != new and (ROOT / path).read_text().count(old) == 1, name
        for test in tests:
            file, _, function = test.partition("::")
            assert f"def {function}(" in (ROOT / file).read_text(), (name, test)
