"""server.linkindex: the indexed in-memory LinkState behaves as Flower's own, message for message."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from logging import WARNING
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message, Metadata, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.server.superlink.linkstate import linkstate_factory
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID, TaskType
from flwr.supercore.date import now
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.superlink.federation import NoOpFederationManager

from server import linkindex
from server.deploy import shared

INDEXED = linkindex.indexed_state_class()


def _state(cls, num_nodes):
    state = cls(NoOpFederationManager(), ObjectStoreFactory().store())
    nodes = []
    for _ in range(num_nodes):
        node = state.create_node("owner", "name", secrets.token_bytes(32), heartbeat_interval=1e9)
        state.acknowledge_node_heartbeat(node_id=node, heartbeat_interval=1e9)
        nodes.append(node)
    runs = [
        state.create_run(None, None, None, {}, NOOP_FEDERATION_ID, None, None, TaskType.SIMULATION.value)
        for _ in range(2)
    ]
    return state, nodes, runs


def _message(message_id, run_id, node_id, ttl=3600.0, age=0.0):
    metadata = Metadata(
        run_id=run_id,
        message_id=message_id,
        src_node_id=SUPERLINK_NODE_ID,
        dst_node_id=node_id,
        reply_to_message_id="",
        group_id="",
        created_at=now().timestamp() - age,
        ttl=ttl,
        message_type="query",
    )
    return Message(RecordDict(), metadata=metadata)


def _ids(messages):
    return [m.metadata.message_id for m in messages]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_indexed_state_answers_every_call_as_flowers_own(seed):
    # The same random stream of stores, polls (any node, limit, run filter), deletions and
    # expiries on both classes: every poll returns the same message ids in the same order.
    rng = np.random.default_rng(seed)
    flower, f_nodes, f_runs = _state(InMemoryLinkState, 6)
    indexed, i_nodes, i_runs = _state(INDEXED, 6)
    stored: list[str] = []
    delivered = 0
    for _ in range(400):
        op = rng.choice(["store", "store", "poll", "poll", "delete", "expire"])
        if op == "store":
            node, run = int(rng.integers(6)), int(rng.integers(2))
            message_id = uuid.UUID(int=int(rng.integers(2**62))).hex
            ttl = 3600.0 if rng.random() < 0.8 else 0.5
            for state, nodes, runs in ((flower, f_nodes, f_runs), (indexed, i_nodes, i_runs)):
                assert state.store_message_ins(_message(message_id, runs[run], nodes[node], ttl=ttl)) == message_id
            stored.append(message_id)
        elif op == "poll":
            node, limit = int(rng.integers(6)), [None, 1, 2][int(rng.integers(3))]
            run = int(rng.integers(3))
            f_run = None if run == 2 else f_runs[run]
            i_run = None if run == 2 else i_runs[run]
            got = indexed.get_message_ins(i_nodes[node], limit, run_id=i_run)
            assert _ids(got) == _ids(flower.get_message_ins(f_nodes[node], limit, run_id=f_run))
            assert all(m.metadata.dst_node_id == i_nodes[node] for m in got)
            delivered += len(got)
        elif op == "delete" and stored:
            victims = set(rng.choice(stored, size=min(3, len(stored)), replace=False).tolist())
            flower.delete_messages(victims)
            indexed.delete_messages(victims)
        elif op == "expire" and stored:
            victim = str(rng.choice(stored))
            for state in (flower, indexed):
                if victim in state.message_ins_store:
                    state.message_ins_store[victim].metadata.__dict__["_created_at"] -= 10_000.0
    assert delivered > 20
    for node in range(6):
        assert _ids(indexed.get_message_ins(i_nodes[node], None)) == _ids(flower.get_message_ins(f_nodes[node], None))
    assert sum(len(p) for p in indexed.pending_by_node.values()) == 0


def test_a_message_goes_once_to_its_own_node_and_expired_or_deleted_ones_never():
    state, (a, b), (run, _) = _state(INDEXED, 2)
    for message_id, node in (("m1", a), ("m2", b), ("m3", a)):
        state.store_message_ins(_message(message_id, run, node))
    assert _ids(state.get_message_ins(b, None)) == ["m2"]
    assert _ids(state.get_message_ins(a, 1)) == ["m1"]
    assert _ids(state.get_message_ins(a, None)) == ["m3"]
    assert state.get_message_ins(a, None) == [] and state.get_message_ins(b, None) == []
    state.store_message_ins(_message("old", run, a, ttl=60.0))
    state.message_ins_store["old"].metadata.__dict__["_created_at"] -= 120.0
    state.store_message_ins(_message("gone", run, a))
    state.delete_messages({"gone"})
    assert state.get_message_ins(a, None) == []
    assert "old" not in state.message_ins_store
    with pytest.raises(AssertionError, match="limit"):
        state.get_message_ins(a, 0)


def test_install_makes_the_factory_build_the_indexed_state(monkeypatch):
    monkeypatch.setattr(linkstate_factory, "InMemoryLinkState", InMemoryLinkState)
    monkeypatch.delenv(linkindex.DISABLE_ENV, raising=False)
    assert linkindex.install() is linkindex.is_supported(linkindex.flower_version())
    factory = linkstate_factory.LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
    assert type(factory.state()).__name__ == "IndexedInMemoryLinkState"


def test_other_flower_versions_and_the_opt_out_keep_flowers_own_state(monkeypatch, caplog):
    monkeypatch.setattr(linkstate_factory, "InMemoryLinkState", InMemoryLinkState)
    monkeypatch.setattr(linkindex, "flower_version", lambda: "9.1.0")
    with caplog.at_level(WARNING):
        assert linkindex.install() is False
    assert "Flower 9.1.0 is installed" in caplog.text
    assert linkstate_factory.InMemoryLinkState is InMemoryLinkState
    monkeypatch.setattr(linkindex, "flower_version", lambda: "1.41.0")
    monkeypatch.setenv(linkindex.DISABLE_ENV, "flower")
    assert linkindex.install() is False and linkstate_factory.InMemoryLinkState is InMemoryLinkState
    assert linkindex.is_supported("1.42.3") and not linkindex.is_supported("1.4.2")


def test_the_launcher_is_an_executable_flwr_simulation(tmp_path):
    path = linkindex.write_launcher(tmp_path / "bin")
    assert path.name == "flwr-simulation"
    done = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "--runtime-api-address" in done.stdout


def test_the_launcher_imports_the_umbel_that_wrote_it_from_any_folder(tmp_path):
    """Started by the SuperExec from another folder, with no umbel install on its path (``-S``: no
    site-packages ``.pth`` files, so no editable install; Flower reached through ``PYTHONPATH`` alone)."""
    import flwr

    path = linkindex.write_launcher(tmp_path / "bin")
    env = {**os.environ, "PYTHONPATH": str(Path(flwr.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-S", str(path), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "--runtime-api-address" in done.stdout, done.stderr[-2000:]


def test_the_simulation_path_finds_the_launcher_and_flowers_own_scripts_before_a_shim(tmp_path):
    """A version manager's shim (pyenv's) put first on ``PATH`` re-runs Flower with its interpreter's
    folder first, hiding the launcher: ``flwr`` must resolve to Flower's own script, not the shim."""
    import shutil

    shims = tmp_path / "shims"
    shims.mkdir()
    for name in ("flwr", "flower-superlink", linkindex.SIMULATION_COMMAND):
        shim = shims / name
        shim.write_text("#!/bin/sh\nexit 3\n")
        shim.chmod(0o755)
    launcher = linkindex.write_launcher(tmp_path / "bin")
    path = shared.launcher_path(launcher.parent, os.pathsep.join([str(shims), os.environ.get("PATH", "")]))
    scripts = shared.flower_scripts()
    assert scripts is not None and (scripts / "flwr").is_file()
    assert shutil.which(linkindex.SIMULATION_COMMAND, path=path) == str(launcher)
    assert shutil.which("flwr", path=path) == str(scripts / "flwr")
    assert shutil.which("flower-superlink", path=path) == str(scripts / "flower-superlink")


def _reply(state, message_id):
    ins = state.message_ins_store[message_id]
    reply = Message(RecordDict(), reply_to=ins)
    reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return reply


def _answers(messages):
    return sorted(
        (m.metadata.reply_to_message_id, m.error.code if m.has_error() else None, m.metadata.src_node_id > 0)
        for m in messages
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_the_servers_pull_returns_what_flowers_own_returns(seed):
    # Replies, expired messages, unknown ids and an offline node, pulled together as the
    # ServerApp does: the same replies and error replies, each once.
    rng = np.random.default_rng(seed)
    states = [_state(InMemoryLinkState, 5), _state(INDEXED, 5)]
    ids = [uuid.UUID(int=int(rng.integers(2**62))).hex for _ in range(60)]
    replied = set(rng.choice(ids, 25, replace=False).tolist())
    expired = set(rng.choice(sorted(set(ids) - replied), 8, replace=False).tolist())
    for state, nodes, runs in states:
        for k, message_id in enumerate(ids):
            ttl = 0.3 if message_id in expired else 3600.0
            state.store_message_ins(_message(message_id, runs[0], nodes[k % 5], ttl=ttl))
    for state, nodes, _ in states:
        for node in nodes:
            state.get_message_ins(node, None)
        for message_id in sorted(replied):
            assert state.store_message_res(_reply(state, message_id)) is not None
        state.nodes[nodes[4]].online_until = now().timestamp() - 1.0
    time.sleep(0.4)  # the short-lived messages expire unanswered
    asked = {*ids, "never-stored"}
    (flower, _, f_runs), (indexed, _, i_runs) = states
    first = indexed.get_message_res(set(asked), i_runs[0])
    assert _answers(first) == _answers(flower.get_message_res(set(asked), f_runs[0]))
    offline = {m for k, m in enumerate(ids) if k % 5 == 4}
    answered = {m.metadata.reply_to_message_id for m in first}
    assert replied | expired | offline | {"never-stored"} == answered
    assert sum(not m.has_error() for m in first) == len(replied - offline)  # an offline node's reply is an error
    again = indexed.get_message_res(set(asked), i_runs[0])
    assert _answers(again) == _answers(flower.get_message_res(set(asked), f_runs[0]))
    assert not any(not m.has_error() for m in again), "a reply was delivered twice"
    with pytest.raises(ValueError, match="invalid IDs"):
        indexed.get_message_res(set(ids), i_runs[1])


def test_the_ray_backend_gets_a_loader_pickled_by_name_for_umbels_client_app_only(monkeypatch):
    from flwr.server.superlink.fleet.vce.backend import raybackend
    from ray import cloudpickle

    from client.app import app as umbel_app

    monkeypatch.delenv(linkindex.DISABLE_ENV, raising=False)

    def flowers_build(self, app_fn):
        self.app_fn, self.pool = app_fn, _Pool(["a1", "a2"])

    monkeypatch.setattr(raybackend.RayBackend, "build", flowers_build)
    installed = []
    monkeypatch.setattr(linkindex.raytransport, "install", lambda: installed.append(True))
    batching = []
    monkeypatch.setattr(linkindex.raybatch, "install", lambda: batching.append(True))
    monkeypatch.setenv(linkindex.CALLS_PER_ACTOR_ENV, "2")
    assert linkindex.install_client_loader() is True
    backend = object.__new__(raybackend.RayBackend)

    def flowers_closure():
        return umbel_app

    backend.build(flowers_closure)
    assert backend.app_fn is linkindex.umbel_client_app and backend.app_fn() is umbel_app
    assert len(cloudpickle.dumps(backend.app_fn)) < 200 < len(cloudpickle.dumps(flowers_closure))
    assert backend.pool.num_actors == 4 == len(backend.pool.pool), "two calls for each of the two actors"
    assert installed == [True] == batching, "large arrays go by reference, quick messages in batches, to umbel's actors"
    other = object()
    backend.build(lambda: other)
    assert backend.app_fn() is other, "another ClientApp keeps Flower's loader"
    assert backend.pool.pool == ["a1", "a2"] and backend.pool.num_actors == 2, "and Flower's one call per actor"
    assert installed == [True] == batching, "and Ray's own pickling and Flower's worker"
    monkeypatch.setenv(linkindex.DISABLE_ENV, "flower")
    assert linkindex.install_client_loader() is False


def test_flowers_project_config_is_parsed_once_per_version_of_the_file(monkeypatch, tmp_path):
    from flwr.common import config

    monkeypatch.delenv(linkindex.DISABLE_ENV, raising=False)
    calls = []
    real = config.get_project_config
    monkeypatch.setattr(config, "get_project_config", lambda d: calls.append(d) or real(d))
    assert linkindex.install_config_cache() is True
    app = Path(__file__).resolve().parents[2]
    first = config.get_project_config(app)
    first["tool"]["flwr"]["app"]["config"]["rounds"] = -1  # a caller's change stays its own
    again = config.get_fused_config_from_dir(app, {"seed": 3})
    assert len(calls) == 1 and again["rounds"] == real(app)["tool"]["flwr"]["app"]["config"]["rounds"]
    assert again["seed"] == 3
    copy = tmp_path / "app"
    copy.mkdir()
    (copy / "pyproject.toml").write_text((app / "pyproject.toml").read_text())
    config.get_project_config(copy)
    os.utime(copy / "pyproject.toml", ns=(1, 1))
    config.get_project_config(copy)
    assert len(calls) == 3, "a changed file is parsed again"
    with pytest.raises(FileNotFoundError, match="Cannot find pyproject.toml"):
        config.get_project_config(tmp_path / "nowhere")


def test_a_node_that_goes_offline_between_two_pulls_gets_flowers_error_reply():
    # The offline nodes are kept between pulls: a node deactivated, or one whose heartbeat lapses,
    # after the first pull must still turn its messages into Flower's error replies at the next.
    states = [_state(InMemoryLinkState, 4), _state(INDEXED, 4)]
    for state, nodes, runs in states:
        state.acknowledge_node_heartbeat(node_id=nodes[3], heartbeat_interval=0.2)
        for k, node in enumerate(nodes):
            state.store_message_ins(_message(f"m{k}", runs[0], node))
    asked = {"m0", "m1", "m2", "m3"}
    (flower, f_nodes, f_runs), (indexed, i_nodes, i_runs) = states
    assert indexed.get_message_res(set(asked), i_runs[0]) == [] == flower.get_message_res(set(asked), f_runs[0])
    flower.deactivate_node(f_nodes[1])
    indexed.deactivate_node(i_nodes[1])
    got = indexed.get_message_res(set(asked), i_runs[0])
    assert _answers(got) == _answers(flower.get_message_res(set(asked), f_runs[0]))
    assert {m.metadata.reply_to_message_id for m in got} == {"m1"} and got[0].has_error()
    time.sleep(0.8)  # node 3's heartbeat (0.2 s, Flower's patience) lapses with no call to the state
    got = indexed.get_message_res({"m0", "m2", "m3"}, i_runs[0])
    assert _answers(got) == _answers(flower.get_message_res({"m0", "m2", "m3"}, f_runs[0]))
    assert {m.metadata.reply_to_message_id for m in got} == {"m3"}


def _sweep(sweep, state, mapping, seconds=0.5):
    import queue
    import threading

    out: queue.Queue = queue.Queue()
    stop = threading.Event()
    thread = threading.Thread(target=sweep, args=(state, out, mapping, stop))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return [out.get() for _ in range(out.qsize())]


def test_the_engines_sweep_asks_only_waiting_nodes_and_delivers_each_message_once_to_its_node():
    from flwr.server.superlink.fleet.vce import vce_api

    state, nodes, (run, _) = _state(INDEXED, 5)
    sent = {"a1": nodes[0], "a2": nodes[0], "c1": nodes[2], "e1": nodes[4]}
    for message_id, node in sent.items():
        state.store_message_ins(_message(message_id, run, node))
    assert set(state.nodes_waiting()) == {nodes[0], nodes[2], nodes[4]}
    asked: list[int] = []
    flowers_poll = state.get_message_ins
    state.get_message_ins = lambda node_id, limit, **kw: asked.append(node_id) or flowers_poll(node_id, limit, **kw)
    mapping = {node: k for k, node in enumerate(nodes[:4])}  # node 4 is not this engine's
    got = _sweep(linkindex.sweep_waiting_nodes, state, mapping)
    assert sorted((m.metadata.message_id, m.metadata.dst_node_id) for m in got) == [
        ("a1", nodes[0]),
        ("a2", nodes[0]),
        ("c1", nodes[2]),
    ]
    assert set(asked) == {nodes[0], nodes[2]} and asked.count(nodes[0]) >= 2, "one message a node a sweep"
    assert state.nodes_waiting() == [nodes[4]] and _sweep(linkindex.sweep_waiting_nodes, state, mapping) == []
    # Flower's own sweep over the same messages on its own state delivers the same
    flower, f_nodes, (f_run, _) = _state(InMemoryLinkState, 5)
    for message_id, node in sent.items():
        flower.store_message_ins(_message(message_id, f_run, f_nodes[nodes.index(node)]))
    f_mapping = {node: k for k, node in enumerate(f_nodes[:4])}
    assert sorted(_ids(_sweep(vce_api.add_messages_to_queue, flower, f_mapping))) == ["a1", "a2", "c1"]


def test_install_engine_sweep_keeps_flowers_sweep_for_any_other_state(monkeypatch):
    from flwr.server.superlink.fleet.vce import vce_api

    monkeypatch.delenv(linkindex.DISABLE_ENV, raising=False)
    calls = []
    monkeypatch.setattr(vce_api, "add_messages_to_queue", lambda *args: calls.append(args))
    monkeypatch.setattr(linkindex, "sweep_waiting_nodes", lambda *args: calls.append(("indexed", *args)))
    assert linkindex.install_engine_sweep() is True
    flower, _, _ = _state(InMemoryLinkState, 1)
    indexed, _, _ = _state(INDEXED, 1)
    vce_api.add_messages_to_queue(flower, None, {}, None)
    vce_api.add_messages_to_queue(indexed, None, {}, None)
    assert calls[0][0] is flower and calls[1][:2] == ("indexed", indexed)
    monkeypatch.setenv(linkindex.DISABLE_ENV, "flower")
    assert linkindex.install_engine_sweep() is False


def test_every_nodes_context_is_flowers_with_the_run_config_fused_once(monkeypatch):
    from flwr.common import config
    from flwr.compat.client import run_info_store
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.supercore.run import Run

    app = str(Path(__file__).resolve().parents[2])
    run = Run.create_empty(7)
    run.override_config = {"seed": 3, "num-clients": 5}
    mapping = {911: 0, 37: 1, 5005: 2, 12: 3, 64: 4}
    fused = []
    real = config.get_fused_config_from_dir
    monkeypatch.setattr(run_info_store, "get_fused_config_from_dir", lambda *a: fused.append(a) or real(*a))
    ours = linkindex.register_contexts(mapping, run, app_dir=app)
    assert len(fused) == 1
    flowers = vce_api._register_node_info_stores(mapping, run, app_dir=app)
    assert len(fused) == 1 + len(mapping) and list(ours) == list(flowers) == list(mapping)
    for node_id, store in ours.items():
        mine, theirs = store.retrieve_context(7), flowers[node_id].retrieve_context(7)
        assert (mine.run_id, mine.node_id, mine.node_config) == (theirs.run_id, theirs.node_id, theirs.node_config)
        assert mine.run_config == theirs.run_config and mine.run_config["seed"] == 3
        assert store.run_infos[7].initial_run_config == flowers[node_id].run_infos[7].initial_run_config
        assert mine.node_config["partition-id"] == mapping[node_id] and mine.node_config["num-partitions"] == 5
        assert len(mine.state) == 0
    contexts = [store.retrieve_context(7) for store in ours.values()]
    assert len({id(c.state) for c in contexts}) == len({id(c.node_config) for c in contexts}) == 5
    changed = contexts[1]
    changed_config = {**changed.run_config, "seed": 4}
    returned = type(changed)(7, changed.node_id, changed.node_config, changed.state, changed_config)
    with pytest.raises(ValueError, match="cannot be modified"):
        ours[changed.node_id].update_context(7, returned)
    assert contexts[2].run_config["seed"] == 3


def test_install_context_registry_replaces_flowers_registration_only_when_enabled(monkeypatch):
    from flwr.server.superlink.fleet.vce import vce_api

    flowers = vce_api._register_node_info_stores
    monkeypatch.setattr(vce_api, "_register_node_info_stores", flowers)
    monkeypatch.setenv(linkindex.DISABLE_ENV, "flower")
    assert linkindex.install_context_registry() is False and vce_api._register_node_info_stores is flowers
    monkeypatch.delenv(linkindex.DISABLE_ENV)
    assert linkindex.install_context_registry() is True
    assert vce_api._register_node_info_stores is linkindex.register_contexts


def test_a_context_the_engine_stores_back_keeps_the_one_shared_run_config():
    import pickle

    from flwr.app import ConfigRecord
    from flwr.supercore.run import Run

    run = Run.create_empty(7)
    run.override_config = {"seed": 3, "num-clients": 4}
    stores = linkindex.register_contexts({10: 0, 11: 1, 12: 2, 13: 3}, run, app_dir=str(Path(__file__).parents[2]))
    shared = stores[10].retrieve_context(7).run_config
    assert all(store.retrieve_context(7).run_config is shared for store in stores.values())
    # the ClientApp's reply: an unpickled copy of the Context, its state changed, its run config equal
    returned = pickle.loads(pickle.dumps(stores[12].retrieve_context(7)))
    returned.state["seen"] = ConfigRecord({"messages": 1})
    assert returned.run_config == shared and returned.run_config is not shared
    stores[12].update_context(7, returned)
    kept = stores[12].retrieve_context(7)
    assert kept is returned and "seen" in kept.state and kept.run_config is shared
    assert stores[13].retrieve_context(7).run_config is shared
    changed = pickle.loads(pickle.dumps(kept))
    changed.run_config["seed"] = 4
    with pytest.raises(ValueError, match="cannot be modified"):
        stores[11].update_context(7, changed)
    assert shared["seed"] == 3 and stores[11].retrieve_context(7).run_config is shared


class _Pool:
    """Flower's ``BasicActorPool`` as the engine uses it: idle actors popped and put back, each stopped once."""

    def __init__(self, actors):
        self.pool, self.num_actors, self.stopped = list(actors), len(actors), []

    def terminate_all_actors(self):
        self.stopped.extend(self.pool)


def test_each_actor_holds_the_calls_asked_for_and_is_stopped_once():
    pool = _Pool(["a1", "a2", "a3"])
    linkindex.pipeline(pool, 2)
    assert pool.num_actors == 6 and sorted(pool.pool) == ["a1", "a1", "a2", "a2", "a3", "a3"]
    popped = [pool.pool.pop() for _ in range(3)]  # Flower's engine pops an idle actor per message
    assert sorted(popped) == ["a1", "a2", "a3"], "every actor is busy before any gets a second call"
    pool.pool.extend(popped)
    pool.terminate_all_actors()
    assert sorted(pool.stopped) == ["a1", "a2", "a3"]
    one = _Pool(["a1", "a2"])
    linkindex.pipeline(one, 1)
    assert one.pool == ["a1", "a2"] and one.num_actors == 2


def test_the_calls_per_actor_come_from_the_environment_as_an_int_of_at_least_one(monkeypatch):
    monkeypatch.delenv(linkindex.CALLS_PER_ACTOR_ENV, raising=False)
    assert linkindex.calls_per_actor() == linkindex.CALLS_PER_ACTOR
    monkeypatch.setenv(linkindex.CALLS_PER_ACTOR_ENV, "1")
    assert linkindex.calls_per_actor() == 1
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv(linkindex.CALLS_PER_ACTOR_ENV, bad)
        wording = f"The 'UMBEL_CALLS_PER_ACTOR' environment variable must be an int >= 1. Got '{bad}' instead."
        with pytest.raises(ValueError, match=re.escape(wording)):
            linkindex.calls_per_actor()


class _Method:
    def __init__(self, calls):
        self.calls = calls

    def remote(self, *args):
        self.calls.append(args)


class _Actor:
    def __init__(self):
        self.calls = []
        self.run = _Method(self.calls)


def test_each_actor_is_sent_one_warm_up_call_that_loads_the_clients_modules_and_data():
    from flwr.app import Context

    from client import task
    from tests.helpers import small_run_config

    a1, a2 = _Actor(), _Actor()
    pool = _Pool([a1, a2])
    assert linkindex.warm_up(pool, None) == 0 and a1.calls == [] == a2.calls, "no context: nothing is sent"
    rc = small_run_config()
    context = Context(1, 7, {"partition-id": 2, "num-partitions": rc["num-clients"]}, RecordDict(), rc)
    assert linkindex.warm_up(pool, context) == 2
    assert a1.calls == a2.calls == [(linkindex.warming_app, None, "warm-up", context)]
    task.clear_caches()
    assert linkindex.warming_app()(message=None, context=context) is None
    loaded = task.task_from_context(rc, {"partition-id": 2, "num-partitions": rc["num-clients"]})
    assert loaded is task.task_from_context(rc, {"partition-id": 2, "num-partitions": rc["num-clients"]})
    assert "data" in vars(loaded), "the warm-up read the node's partition (a cached property)"


def test_registering_the_contexts_keeps_the_first_nodes_for_the_warm_up():
    from types import SimpleNamespace

    linkindex.WARM_CONTEXT.clear()
    app = Path(__file__).resolve().parents[2]
    run = SimpleNamespace(run_id=5, override_config={}, fab_id="", fab_version="", fab_hash="", flwr_aid="")
    stores = linkindex.register_contexts({11: 0, 12: 1}, run, str(app))
    assert linkindex.WARM_CONTEXT["context"] is stores[11].run_infos[5].context
