from collections.abc import Sequence

import pytest

from server.federation_size import (
    FederationTooSmall,
    check_federation,
    is_simulation,
    local_superlink_pid,
    required_nodes,
)


class Nodes:
    """A grid whose node count follows ``counts`` (one entry per poll, the last one kept)."""

    def __init__(self, counts: Sequence[int]) -> None:
        self.counts = list(counts)
        self.polls = 0

    def get_node_ids(self) -> list[int]:
        count = self.counts[min(self.polls, len(self.counts) - 1)]
        self.polls += 1
        return list(range(1, count + 1))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def check(counts: Sequence[int], num_clients: int, min_nodes: int = 0, *, simulation: bool, wait: float = 60.0):
    clock = Clock()
    nodes = check_federation(
        Nodes(counts),  # type: ignore[arg-type]
        num_clients,
        min_nodes,
        wait,
        simulation=simulation,
        clock=clock,
        sleep=clock.sleep,
    )
    return nodes, clock.now


def test_flowers_default_two_node_simulation_stops_within_seconds_naming_the_command_that_sizes_it():
    with pytest.raises(
        FederationTooSmall, match=r'flwr run \. --stream --federation-config "num-supernodes=100 '
    ) as err:
        check([0, 0, 2], 100, simulation=True)
    assert "has 2 SuperNodes" in str(err.value) and "umbel run" in str(err.value)
    assert "min-nodes=2" in str(err.value) and "num-clients=2" in str(err.value)


def test_a_simulation_decides_once_its_count_holds_still_not_after_node_wait_timeout():
    clock = Clock()
    with pytest.raises(FederationTooSmall):
        check_federation(
            Nodes([2]),  # type: ignore[arg-type]
            100,
            0,
            300.0,
            simulation=True,
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.now < 5


def test_a_simulation_of_the_right_size_goes_on_with_every_client():
    assert check([3, 10], 10, simulation=True)[0] == 10


def test_fewer_nodes_are_allowed_only_when_min_nodes_says_so():
    assert check([2], 100, min_nodes=2, simulation=True)[0] == 2
    with pytest.raises(FederationTooSmall, match=r"\(min-nodes = 3\)"):
        check([2], 100, min_nodes=3, simulation=True)


def test_a_deployment_waits_for_late_supernodes_up_to_node_wait_timeout():
    nodes, waited = check([0] * 20 + [3] * 20 + [5], 5, simulation=False, wait=60.0)
    assert nodes == 5 and 7 < waited < 60


def test_a_deployment_short_of_nodes_stops_at_node_wait_timeout_naming_min_nodes():
    with pytest.raises(FederationTooSmall, match=r"3 of 5 SuperNodes connected within node-wait-timeout 30 s") as err:
        check([3], 5, simulation=False, wait=30.0)
    assert "min-nodes=3" in str(err.value) and "num-partitions=5" in str(err.value)


def test_a_deployment_goes_on_with_min_nodes_after_the_wait():
    nodes, waited = check([3], 5, min_nodes=3, simulation=False, wait=30.0)
    assert nodes == 3 and waited >= 30


def test_min_nodes_above_num_clients_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"The 'min-nodes' parameter .* \[0, num-clients = 4\]\. Got 5 instead\."):
        required_nodes(4, 5)


def test_no_simulation_and_no_superlink_outside_flower():
    assert not is_simulation(Nodes([1]))  # type: ignore[arg-type]
    assert local_superlink_pid() is None
