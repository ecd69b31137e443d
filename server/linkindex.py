"""An in-memory LinkState that finds a node's messages by node, for Flower's simulation.

Flower's ``InMemoryLinkState.get_message_ins(node_id)`` walks every stored instruction message
(and checks each one's TTL) to find the few addressed to ``node_id``. Its simulation engine asks
that for every node every 0.1 s, so one exchange with N simulated clients costs on the order of
N^2 message checks a poll: at 10,000 clients, about half of the simulation process's time.

``IndexedInMemoryLinkState`` keeps, per destination node, the ids of its undelivered
instructions in arrival order, and ``get_message_ins`` checks only those: the same messages in
the same order, each delivered once, expired ones (TTL) deleted when their node asks, deleted
ones gone. ``get_message_res`` (the ServerApp's pull, every 0.1-0.2 s with every message still
awaiting a reply) runs Flower's checks only on the messages for which it can return something: those
with a reply, and those unknown, of another run, expired or addressed to an offline node (Flower's
error replies), found by set operations; the rest would return nothing. The simulation's nodes
share one federation (Flower's ``NoOpFederationManager``), so Flower's federation check never
drops a message there. Everything
else is Flower's own class. It is installed in the ``flwr-simulation``
process by ``python -m server.linkindex`` (which ``umbel run`` puts on ``PATH`` as
``flwr-simulation``) and only for the Flower versions in ``SUPPORTED``, whose
``InMemoryLinkState`` it was checked against; with any other version Flower's own state runs,
and a warning says so. With it, the same launcher makes Flower's engine sweep only the nodes with
a message waiting (:func:`sweep_waiting_nodes`), registers every node's Context with one shared
run config (:func:`register_contexts`), has each Ray actor load umbel's ClientApp and the data as
the engine starts (:func:`warm_up`), sends large arrays to the actors once per content
(:mod:`server.raytransport`) and quick messages several to an actor call (:mod:`server.raybatch`).
"""

from __future__ import annotations

import functools
import heapq
import math
import os
import stat
import sys
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

from . import raybatch, raytransport
from .raybatch import umbel_client_app

SUPPORTED: tuple[str, ...] = ("1.41", "1.42")
"""Flower ``major.minor`` versions whose ``InMemoryLinkState`` this subclass was tested against."""
SIMULATION_COMMAND = "flwr-simulation"
"""The command Flower's SuperExec starts for a simulation run (found on ``PATH``)."""
DISABLE_ENV = "UMBEL_FLOWER_LINKSTATE"
"""Set to ``flower`` to run Flower's own in-memory state in simulations."""
NODE_WRITERS: tuple[str, ...] = (
    "create_node",
    "delete_node",
    "activate_node",
    "deactivate_node",
    "acknowledge_node_heartbeat",
    "_check_and_tag_offline_nodes",
)
"""The methods of Flower's ``InMemoryLinkState`` (in ``SUPPORTED``) that change a node's status or ``online_until``."""


def flower_version() -> str:
    """The installed Flower's version string."""
    from importlib.metadata import version

    return version("flwr")


def is_supported(version: str) -> bool:
    """Whether Flower ``version`` is one whose in-memory LinkState the index was tested against."""
    return ".".join(version.split(".")[:2]) in SUPPORTED


def indexed_state_class() -> type:
    """``IndexedInMemoryLinkState``, built on the installed Flower's ``InMemoryLinkState``."""
    from flwr.app import Message
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.supercore.constant import NodeStatus
    from flwr.supercore.date import now

    class IndexedInMemoryLinkState(InMemoryLinkState):
        """Flower's in-memory LinkState with each node's undelivered instructions indexed by node."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # node id -> ids of its undelivered instruction messages (a dict: an ordered set)
            self.pending_by_node: dict[int, dict[str, None]] = {}
            # message id -> (expiry timestamp, run id, destination node), read once when stored
            self.facts: dict[str, tuple[float, int, int]] = {}
            # the stored instructions by run, and those past their expiry (found by the heap of expiries)
            self.ids_of_run: dict[int, set[str]] = {}
            self.expiries: list[tuple[float, str]] = []
            self.expired: set[str] = set()
            # bumped by every Flower method that changes a node; the offline nodes then, and until when
            self.node_version = 0
            self.offline_cache: tuple[int, float, frozenset[int]] = (-1, 0.0, frozenset())

        def store_message_ins(self, message: Message) -> str | None:
            with self.lock:
                message_id = super().store_message_ins(message)
                if message_id is not None:
                    stored = self.message_ins_store.get(message_id)
                    if stored is not None:
                        meta = stored.metadata
                        self.facts[message_id] = (meta.created_at + meta.ttl, meta.run_id, meta.dst_node_id)
                        self.ids_of_run.setdefault(meta.run_id, set()).add(message_id)
                        heapq.heappush(self.expiries, (meta.created_at + meta.ttl, message_id))
                        if meta.delivered_at == "":
                            self.pending_by_node.setdefault(meta.dst_node_id, {})[message_id] = None
                return message_id

        def get_message_ins(self, node_id: int, limit: int | None, *, run_id: int | None = None) -> list[Message]:
            if limit is not None and limit < 1:
                raise AssertionError("`limit` must be >= 1")
            if node_id not in self.pending_by_node:  # most polls: Flower's engine asks every node every 0.1 s
                return []
            found: list[Message] = []
            with self.lock:
                pending = self.pending_by_node.get(node_id, {})
                for message_id in list(pending):
                    self._check_stored_messages({message_id})
                    message = self.message_ins_store.get(message_id)
                    if message is None or message.metadata.delivered_at != "":
                        pending.pop(message_id, None)
                        continue
                    if run_id is not None and message.metadata.run_id != run_id:
                        continue
                    found.append(message)
                    if limit and len(found) == limit:
                        break
                if found:
                    delivered_at = now().isoformat()
                    for message in found:
                        message.metadata.delivered_at = delivered_at
                        pending.pop(message.metadata.message_id, None)
                if not pending:
                    self.pending_by_node.pop(node_id, None)
            return found

        def nodes_waiting(self) -> list[int]:
            """The nodes with undelivered instructions, in the order their first one arrived."""
            with self.lock:
                return list(self.pending_by_node)

        def get_message_res(self, message_ids: set[str], run_id: int) -> list[Message]:
            with self.lock:
                return super().get_message_res(due, run_id) if (due := self.answerable(message_ids, run_id)) else []

        def answerable(self, message_ids: set[str], run_id: int) -> set[str]:
            """The ids in ``message_ids`` for which Flower's ``get_message_res`` returns (or raises) anything.

            Those unknown, with a reply, of another run, expired, or addressed to an offline node;
            set operations but for the last check.
            """
            current = now().timestamp()
            while self.expiries and self.expiries[0][0] <= current:
                message_id = heapq.heappop(self.expiries)[1]
                if message_id in self.facts:
                    self.expired.add(message_id)
            asked = message_ids if isinstance(message_ids, set) else set(message_ids)
            known = asked & self.facts.keys()
            due = asked - known
            due |= known & self.message_ins_id_to_message_res_id.keys()
            due |= known & self.expired
            due |= known - self.ids_of_run.get(run_id, set())
            rest = known - due
            if not rest:
                return due
            offline = self.offline_nodes(current)
            if offline:
                due |= {m for m in rest if self.facts[m][2] in offline}
            return due

        def offline_nodes(self, current: float) -> frozenset[int]:
            """The nodes Flower's ``get_message_res`` treats as offline (unregistered or past ``online_until``).

            One scan of the nodes, kept until a node changes (``node_version``) or the soonest
            ``online_until`` passes: in a simulation no node ever goes offline, so one scan a run.
            """
            version, until, offline = self.offline_cache
            if version == self.node_version and current < until:
                return offline
            gone, until, found = NodeStatus.UNREGISTERED, math.inf, set()
            for node_id, node in self.nodes.items():
                if node.status == gone or node.online_until is None or node.online_until < current:
                    found.add(node_id)
                elif node.online_until < until:
                    until = node.online_until
            self.offline_cache = (self.node_version, until, frozenset(found))
            return self.offline_cache[2]

        def delete_messages(self, message_ins_ids: set[str]) -> None:
            with self.lock:
                for message_id in message_ins_ids:
                    facts = self.facts.pop(message_id, None)
                    self.expired.discard(message_id)
                    if facts is not None:
                        self.ids_of_run.get(facts[1], set()).discard(message_id)
                    if facts is not None and (pending := self.pending_by_node.get(facts[2])) is not None:
                        pending.pop(message_id, None)
                        if not pending:
                            del self.pending_by_node[facts[2]]
                super().delete_messages(message_ins_ids)

    def counting(method: Any) -> Any:
        def changes_a_node(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            finally:
                self.node_version += 1

        return changes_a_node

    for name in NODE_WRITERS:
        setattr(IndexedInMemoryLinkState, name, counting(getattr(InMemoryLinkState, name)))
    return IndexedInMemoryLinkState


def _enabled() -> bool:
    """Whether umbel's changes to Flower's simulation apply: a version in ``SUPPORTED`` and no opt-out."""
    return os.environ.get(DISABLE_ENV, "").lower() != "flower" and is_supported(flower_version())


def install() -> bool:
    """Make Flower's LinkState factory build ``IndexedInMemoryLinkState`` in this process.

    Returns False (and logs why) where the Flower version is not in ``SUPPORTED`` or
    ``UMBEL_FLOWER_LINKSTATE=flower`` asks for Flower's own state.
    """
    from flwr.common import log
    from flwr.server.superlink.linkstate import linkstate_factory

    version = flower_version()
    if os.environ.get(DISABLE_ENV, "").lower() == "flower":
        return False
    if not is_supported(version):
        log(
            WARNING,
            "umbel's indexed LinkState supports Flower %s; Flower %s is installed, so Flower's own "
            "in-memory LinkState runs (exchanges with many simulated clients are slower).",
            " and ".join(SUPPORTED),
            version,
        )
        return False
    # the factory builds whatever class its module's name ``InMemoryLinkState`` holds
    vars(linkstate_factory)["InMemoryLinkState"] = indexed_state_class()
    log(INFO, "umbel: indexed in-memory LinkState installed (Flower %s)", version)
    return True


def install_client_loader() -> bool:
    """Hand Flower's Ray backend :func:`umbel_client_app` as the ClientApp loader, when the run's app is umbel's.

    Flower's loader is a closure holding the ClientApp, which Ray's cloudpickle pickles by value for
    every message (walking the loaded modules each time); a module-level function is pickled by its
    name. For umbel's app it also sends the warm-up calls, sets the calls per actor and installs
    :func:`server.raytransport.install` and :func:`server.raybatch.install`. Only for the Flower
    versions in ``SUPPORTED`` and unless ``UMBEL_FLOWER_LINKSTATE=flower``; any other app keeps
    Flower's loader, worker and Ray's pickling.
    """
    if not _enabled():
        return False
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

    flowers_build = RayBackend.build

    def build(self: Any, app_fn: Any) -> None:
        flowers_build(self, app_fn)
        if app_fn() is umbel_client_app():
            self.app_fn = umbel_client_app
            warm_up(self.pool, WARM_CONTEXT.get("context"))
            pipeline(self.pool, calls_per_actor())
            raytransport.install()
            raybatch.install()

    RayBackend.build = build  # type: ignore[method-assign]
    return True


WARM_CONTEXT: dict[str, Any] = {}
"""The first simulated node's Context (``"context"``), kept by :func:`register_contexts` for :func:`warm_up`."""


def warming_app() -> Any:
    """A stand-in for the ClientApp that only loads what umbel's ClientApp needs: its modules and the data.

    Flower's actor calls ``app(message=..., context=...)``; this one answers nothing (None).
    """

    def load(message: Any, context: Any) -> None:
        from client.task import task_from_context

        umbel_client_app()
        _ = task_from_context(context.run_config, context.node_config).data

    return load


def warm_up(pool: Any, context: Any) -> int:
    """Have each Ray actor of ``pool`` import umbel's ClientApp and read the run's data now; the calls sent.

    Flower's engine starts the actors as the ServerApp starts, but an actor imports the ClientApp
    (torch) and reads the data set only when the first message reaches it, after the ServerApp's own
    start-up: the identity phase waited for both. One call per actor with ``context`` (a node's) is
    queued first; its reply is never read (an error there comes again with the first real message).
    Nothing is sent without a context.
    """
    if context is None:
        return 0
    actors = list(dict.fromkeys(pool.pool))
    for actor in actors:
        actor.run.remote(warming_app, None, "warm-up", context)
    return len(actors)


CALLS_PER_ACTOR = 1
"""ClientApp calls each Ray actor holds at once in umbel's simulations (1: Flower's engine). Two were
faster at 10,000 clients on a quiet 2-core box (identity 25.2 s and an evaluate-all round 35.7 s, against
32.1 s and 57.0 s; docs/RESULTS.md, record exchange-round-quiet), but a call queued behind a client that
sleeps to its deadline then misses its own: a slow client would cost a healthy one its round."""
CALLS_PER_ACTOR_ENV = "UMBEL_CALLS_PER_ACTOR"
"""Set to an int >= 1 to change :data:`CALLS_PER_ACTOR` (1: Flower's engine, one call per actor)."""


def calls_per_actor() -> int:
    """:data:`CALLS_PER_ACTOR`, or the int >= 1 in :data:`CALLS_PER_ACTOR_ENV`.

    Raises
    ------
    ValueError
        If the environment holds anything but an int >= 1.
    """
    text = os.environ.get(CALLS_PER_ACTOR_ENV, "")
    if not text:
        return CALLS_PER_ACTOR
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"The '{CALLS_PER_ACTOR_ENV}' environment variable must be an int >= 1. Got {text!r} instead.")
    return int(text)


def pipeline(pool: Any, calls: int) -> None:
    """Let Flower's engine keep ``calls`` ClientApp calls queued at each Ray actor of ``pool``.

    Flower's engine runs one worker thread per actor; each sends a message to an idle actor and
    waits for the reply, so an actor idles while the simulation process reads its reply and
    sends it the next message. Each actor is listed ``calls`` times in the idle pool (and the
    engine starts as many threads), so that the next call is already queued at the actor, which
    runs its calls one after the other as before (Ray's default, one call at a time per actor).
    Flower's ``terminate_all_actors`` then stops each actor once.
    """
    actors = list(dict.fromkeys(pool.pool))
    pool.pool = [actor for _ in range(calls) for actor in actors]
    pool.num_actors = len(pool.pool)
    flowers_terminate = pool.terminate_all_actors

    def terminate_all_actors() -> None:
        pool.pool = list(dict.fromkeys(pool.pool))
        flowers_terminate()

    pool.terminate_all_actors = terminate_all_actors


def install_config_cache() -> bool:
    """Make Flower's ``get_project_config`` parse an app's ``pyproject.toml`` once per version of the file.

    Flower's simulation registers every simulated node's context by reading and validating the
    app's ``pyproject.toml`` again (100,000 parses for 100,000 nodes before any message moves);
    each call now gets a deep copy of the first parse of the file as it is (path and modification
    time), and a missing or invalid file still raises Flower's error. Only for the Flower versions
    in ``SUPPORTED`` and unless ``UMBEL_FLOWER_LINKSTATE=flower``.
    """
    if not _enabled():
        return False
    import copy

    from flwr.common import config

    flowers = config.get_project_config
    parsed: dict[tuple[str, int], dict[str, Any]] = {}

    def get_project_config(project_dir: str | Path) -> dict[str, Any]:
        try:
            toml = (Path(project_dir) / "pyproject.toml").resolve()
            key = (str(toml), toml.stat().st_mtime_ns)
        except OSError:
            return flowers(project_dir)
        if key not in parsed:
            parsed[key] = flowers(project_dir)
        return copy.deepcopy(parsed[key])

    config.get_project_config = get_project_config
    return True


ENGINE_SWEEP_SECONDS = 0.1
"""Flower's engine: the seconds between two sweeps over the nodes (Flower's own interval)."""


def sweep_waiting_nodes(state: Any, queue: Any, nodes_mapping: dict[int, int], f_stop: Any) -> None:
    """Flower's ``add_messages_to_queue``, asking only the nodes that have messages waiting.

    Flower's engine asks each of its N nodes for one message every 0.1 s; here a sweep asks only
    the nodes the indexed state's ``nodes_waiting()`` names (one message each, as Flower's), so
    an idle sweep costs nothing, not N calls.
    """
    while not f_stop.is_set():
        for node_id in state.nodes_waiting():
            if node_id in nodes_mapping:
                for message in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(message)
        f_stop.wait(ENGINE_SWEEP_SECONDS)


def install_engine_sweep() -> bool:
    """Make Flower's simulation engine use :func:`sweep_waiting_nodes` on the indexed state.

    Any other state keeps Flower's sweep. Only for the Flower versions in ``SUPPORTED`` and unless
    ``UMBEL_FLOWER_LINKSTATE=flower``.
    """
    if not _enabled():
        return False
    from flwr.server.superlink.fleet.vce import vce_api

    flowers = vce_api.add_messages_to_queue

    def add_messages_to_queue(state: Any, queue: Any, nodes_mapping: dict[int, int], f_stop: Any) -> None:
        sweep = sweep_waiting_nodes if hasattr(state, "nodes_waiting") else flowers
        sweep(state, queue, nodes_mapping, f_stop)

    vce_api.add_messages_to_queue = add_messages_to_queue
    return True


def register_contexts(nodes_mapping: dict[int, int], run: Any, app_dir: str | None = None) -> dict[int, Any]:
    """Flower's ``_register_node_info_stores`` with one run config shared by every node's Context.

    Flower reads and fuses the app's run config again for every node (a deep copy of the parsed
    ``pyproject.toml`` and of the overrides) and gives each Context its own copy: 200 s and a
    dict per node at 100,000 nodes. Here the first node's registration is Flower's own, and every
    other node's Context gets that node's own config and state but the first one's run config:
    the same values, one dict, which nothing in this process changes (the ClientApp changes only
    its own unpickled copy, and Flower's ``update_context`` refuses a changed one); each store is a
    :func:`shared_config_store_class`, which keeps that dict when the engine stores a returned Context.
    """
    from flwr.app import Context, RecordDict
    from flwr.common.constant import NUM_PARTITIONS_KEY, PARTITION_ID_KEY
    from flwr.compat.client.run_info_store import RunInfo

    store_class = shared_config_store_class()
    stores: dict[int, Any] = {}
    num_partitions = len(set(nodes_mapping.values()))
    first: Any = None
    for node_id, partition_id in nodes_mapping.items():
        store = store_class(
            node_id=node_id, node_config={PARTITION_ID_KEY: partition_id, NUM_PARTITIONS_KEY: num_partitions}
        )
        if first is None:
            store.register_context(run_id=run.run_id, run=run, app_dir=app_dir)
            first = store.run_infos[run.run_id]
            WARM_CONTEXT["context"] = first.context
        else:
            context = Context(
                run_id=run.run_id,
                node_id=node_id,
                node_config=store.node_config,
                state=RecordDict(),
                run_config=first.context.run_config,
            )
            store.run_infos[run.run_id] = RunInfo(context=context, initial_run_config=first.initial_run_config)
        stores[node_id] = store
    return stores


@functools.cache
def shared_config_store_class() -> type:
    """``SharedConfigRunInfoStore``: Flower's ``DeprecatedRunInfoStore`` that keeps the shared run config.

    Flower's engine stores the Context each ClientApp call returns, unpickled with its own copy of
    the run config: after an exchange with every client, a dict per node again (about 1 GB at
    100,000 nodes). Its ``update_context`` is Flower's (which refuses a changed run config), then
    puts back the run config the node's Context held: the same values, the one shared dict.
    """
    from flwr.app import Context
    from flwr.compat.client.run_info_store import DeprecatedRunInfoStore

    class SharedConfigRunInfoStore(DeprecatedRunInfoStore):
        def update_context(self, run_id: int, context: Context) -> None:
            shared = self.run_infos[run_id].context.run_config
            super().update_context(run_id, context)
            context.run_config = shared

    return SharedConfigRunInfoStore


def install_context_registry() -> bool:
    """Make Flower's simulation register every node's Context with :func:`register_contexts`.

    Only for the Flower versions in ``SUPPORTED`` and unless ``UMBEL_FLOWER_LINKSTATE=flower``.
    """
    if not _enabled():
        return False
    from flwr.server.superlink.fleet.vce import vce_api

    vce_api._register_node_info_stores = register_contexts
    return True


def write_launcher(folder: Path) -> Path:
    """Write an executable ``flwr-simulation`` into ``folder`` that runs this module's ``main``.

    Put ``folder`` first on the ``PATH`` of ``flwr run`` so that the SuperExec it starts finds it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SIMULATION_COMMAND
    # The SuperExec starts it from elsewhere: it imports this very package, not whatever ``server``
    # the environment has (an editable install can point at a checkout that has since moved).
    root = Path(__file__).resolve().parents[1]
    lines = [f"#!{sys.executable}", "import sys", f"sys.path.insert(0, {str(root)!r})"]
    path.write_text("\n".join([*lines, "from server.linkindex import main", "main()", ""]))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def main() -> None:
    """``flwr-simulation`` with the indexed LinkState, the ClientApp loader, the config cache, the engine's
    sweep and the shared run config installed."""
    from flwr.simulation.app import flwr_simulation

    install()
    install_client_loader()
    install_config_cache()
    install_engine_sweep()
    install_context_registry()
    sys.argv[0] = SIMULATION_COMMAND  # Flower's exit handling recognises the simulation by argv[0]
    flwr_simulation()


if __name__ == "__main__":
    main()
