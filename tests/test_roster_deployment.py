"""The impostor drill over loopback with TLS and SuperNode authentication (issue 33): a registered
node holding another key claims partition 0; with the roster ``umbel deploy register`` wrote, it
is refused by key and the genuine node trains as client 0. Uses ``tests/test_deployment.py``'s
deployment (4 SuperNodes, keys ``supernode-0..3`` and ``dup``), one 1-round run."""

from __future__ import annotations

import pytest

from tests.test_deployment import DUPLICATE, NUM_NODES, Deployment, _metrics, secure  # noqa: F401 - the fixture


@pytest.mark.slow
def test_a_registered_impostor_is_refused_by_the_roster_over_tls_and_auth(secure):  # noqa: F811 - the fixture
    dep: Deployment = secure
    roster = dep.keys / "roster.json"
    assert roster.is_file()  # written by `umbel deploy register`
    dep.start_node(0, DUPLICATE, dep.keys / DUPLICATE)
    try:
        run_name = "roster-impostor"
        proc = dep.submit(run_name, rounds=1, **{"eval-every": 1, "roster-path": str(roster)})
        folder = dep.finish(run_name, proc)
    finally:
        dep.stop_gracefully(DUPLICATE)
    out = dep.log(run_name).read_text()
    assert "it claims client 0, but the roster binds client 0 to key SHA256:" in out, out[-4000:]
    lines = _metrics(folder)
    assert lines[-1]["train-replies"] == NUM_NODES and lines[-1]["eval-clients"] == NUM_NODES, lines
    assert f"{NUM_NODES} clients identified" in out
