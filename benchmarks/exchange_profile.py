"""Where an exchange with every simulated client spends the simulation process's time (py-spy).

One FedAvg run of ``--clients`` simulated clients (10 train a round, all evaluate, the start-up
identity query to all, and the final models sent to all) with py-spy sampling its
``flwr-simulation`` process (the ServerApp thread, the LinkState, Flower's simulation engine and
Ray's driver) and every process under it. The samples are sorted into the kinds of work below
by the first kind whose frame is on the stack; the table gives each kind's share of the
process's busy samples, the identity phase and the round, for each run named on the command line.
Written as the ``exchange-profile`` record (``benchmarks.records``).

Example::

    python -m benchmarks.exchange_profile --clients 10000 --name after
    python -m benchmarks.exchange_profile --from-runs before=results/bench/exchange-profile/before
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

from benchmarks.exchange import outcome
from benchmarks.records import Record, Table, current_command, load_average, write_record
from benchmarks.report import LARGE
from benchmarks.runs import ROOT, run_cli
from strategies import FedAvg

KINDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("get_message_res",), "ServerApp's pulls (LinkState get_message_res)"),
    (("add_messages_to_queue",), "node polls (LinkState get_message_ins)"),
    (("put_message_into_state",), "replies stored (LinkState store_message_res)"),
    (("fleet/vce/vce_api.py", "server/raybatch.py"), "Flower's engine: Ray actor calls, (de)serialisation"),
    (("server_th_with_start_checks",), "umbel's server side (strategy, guard, records)"),
)
"""Texts of frames on a sampled stack -> the kind of work (the first kind with one of them; the rest is
'other'). The engine's worker is Flower's, or umbel's batching one (``server.raybatch``)."""
OTHER = "other (start-up, Ray's driver threads, logging)"
WAITING: tuple[str, ...] = (
    "Condition.wait (threading.py",
    "_log_uploader (flwr/supercore/logger.py:454)",
    "monitor (flwr/supercore/app_utils.py:54)",
    "Worker.get_objects (ray/_private/worker.py",
    "InMemoryGrid.send_and_receive (flwr/superlink/grid/inmemory_grid.py:177)",
    "send (strategies/federation.py:209)",
    "_main_loop (flwr/simulation/run_simulation.py:319)",
)
"""Innermost frames of a thread that waits (py-spy's ``--nonblocking`` samples it as busy): a lock,
queue or event wait, a sleep in Flower's log uploader, parent monitor or pull loop or umbel's, Ray's
wait for an actor's result, the main thread's wait for the engine's threads (Flower 1.42's lines)."""
RATE = 20
"""py-spy samples a second."""
RECORD = "exchange-profile"
"""The record's name, unless ``--record`` names another."""
TITLE = "Where an exchange with every simulated client spends the simulation process's time"
"""The table's title, unless ``--title`` gives another."""


OWNERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("umbel's code", ("strategies/", "server/", "common/", "client/", "benchmarks/")),
    ("Flower's code", ("flwr/",)),
    ("Ray's code", ("ray/",)),
)
"""Whose code a frame runs, by the start of its file's path as py-spy prints it (relative to ``sys.path``)."""
NO_OWNER = "no owner (Python's start-up, frames of no package above)"


def _simulation_samples(raw: Path) -> Iterator[tuple[list[str], int, bool]]:
    """Each stack of the simulation process in py-spy's ``raw`` output: its frames, its count, and
    whether its thread was waiting (:data:`WAITING`); child processes' stacks are left out."""
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if len(frames) > 1 and frames[1].startswith("process "):
            continue  # a child process (Ray's raylet, GCS, actors): reported apart
        yield frames, int(n), any(key in frames[-1] for key in WAITING)


def shares(raw: Path) -> tuple[dict[str, float], int, float]:
    """Each kind's share of the simulation process's busy samples in py-spy's ``raw`` output, their count,
    and the share of all its samples in which a thread was waiting (:data:`WAITING`, left out of the rest)."""
    counts: Counter[str] = Counter()
    waiting = 0
    for frames, n, waits in _simulation_samples(raw):
        if waits:
            waiting += n
            continue
        stack = ";".join(frames)
        counts[next((kind for keys, kind in KINDS if any(key in stack for key in keys)), OTHER)] += n
    total = sum(counts.values())
    waited = waiting / (total + waiting) if total + waiting else 0.0
    return {kind: counts[kind] / total for _, kind in (*KINDS, ("", OTHER))} if total else {}, total, waited


def owner(frame: str) -> str | None:
    """Whose code ``frame`` (py-spy's ``function (path:line)``) runs (:data:`OWNERS`); None for any other
    file (the standard library, numpy, torch, a native frame)."""
    path = frame.rpartition(" (")[2].rpartition(":")[0]
    return next((name for name, starts in OWNERS if path.startswith(starts)), None)


def owner_shares(raw: Path) -> dict[str, float]:
    """Each owner's share of the simulation process's busy samples: the innermost frame of umbel's,
    Flower's or Ray's code on the stack (a standard-library or numpy frame counts for its caller)."""
    counts: Counter[str] = Counter()
    for frames, n, waits in _simulation_samples(raw):
        if not waits:
            counts[next((o for o in map(owner, reversed(frames)) if o is not None), NO_OWNER)] += n
    total = sum(counts.values())
    return {name: counts[name] / total for name, _ in (*OWNERS, (NO_OWNER, ()))} if total else {}


IDENTIFIED = "clients identified (of"
"""The ServerApp's log line that ends the identity phase (``strategies.federation.discover_clients``)."""


ACTOR = "ray::ClientAppActor"
"""How a Ray actor running the ClientApp names itself (its command line)."""


def actors_cpu(proc: psutil.Process, seen: dict[int, float]) -> float:
    """CPU seconds (user + system) of every ClientApp actor under ``proc`` so far; ``seen`` keeps each
    actor's last reading, so that an actor gone still counts."""
    for child in proc.children(recursive=True):
        try:
            if ACTOR in " ".join(child.cmdline()):
                times = child.cpu_times()
                seen[child.pid] = times.user + times.system
        except psutil.Error:
            continue
    return sum(seen.values())


def phase_cpu(proc: psutil.Process, log: Path, metrics: Path, out: Path) -> None:
    """Write to ``out`` the CPU seconds (user + system) of ``proc`` and of its ClientApp actors when the
    identity phase ends (its log line in ``log``) and when round 1 ends (its line in ``metrics``), and
    their last readings; every 0.5 s.
    """
    got: dict[str, float] = {}
    actors: dict[int, float] = {}
    while True:
        try:
            times = proc.cpu_times()
            if proc.status() == psutil.STATUS_ZOMBIE:
                break
            got["actors-last"] = actors_cpu(proc, actors)
        except psutil.Error:
            break
        got["last"] = times.user + times.system
        if "identity" not in got and log.exists() and IDENTIFIED in log.read_text(errors="replace"):
            got["identity"], got["actors-identity"] = got["last"], got["actors-last"]
        if "round" not in got and metrics.exists() and metrics.read_text().strip():
            got["round"], got["actors-round"] = got["last"], got["actors-last"]
        out.write_text(json.dumps(got))
        time.sleep(0.5)


def phases(run: Path, prefix: str = "") -> tuple[float | None, float | None]:
    """CPU seconds in the identity phase and in round 1 (None where not sampled): the simulation
    process's, or with ``prefix`` ``"actors-"`` its ClientApp actors' together."""
    file = run.with_name(run.name + ".cpu.json")
    if not file.exists():
        return None, None
    got = json.loads(file.read_text())
    identity, end = got.get(prefix + "identity"), got.get(prefix + "round")
    return identity, (end - identity if identity is not None and end is not None else None)


def profile(clients: int, folder: Path, name: str, extra: Sequence[str], app_root: Path = ROOT) -> Path:
    """Run FedAvg with ``clients`` clients under py-spy; the run's folder (``<name>.raw`` beside it).

    ``app_root`` is the umbel tree that runs (default this one; a checkout of another commit for a
    before-and-after). The simulation process's CPU seconds per phase go to ``<name>.cpu.json``.
    """
    spy = shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    raw = folder / f"{name}.raw"
    home = app_root / ".flwr" / name / "bin" / "flwr-simulation"

    def attach() -> None:
        while True:
            for proc in psutil.process_iter(["cmdline"]):
                if str(home) in " ".join(proc.info["cmdline"] or ()):
                    cpu = (proc, folder / f"{name}.log", folder / name / "metrics.jsonl", folder / f"{name}.cpu.json")
                    threading.Thread(target=phase_cpu, args=cpu, daemon=True).start()
                    cmd = [spy, "record", "-p", str(proc.pid), "--subprocesses", "--nonblocking"]
                    subprocess.run([*cmd, "--rate", str(RATE), "--format", "raw", "-o", str(raw)], check=False)
                    return
            time.sleep(0.5)

    threading.Thread(target=attach, daemon=True).start()
    args = ["--strategy", FedAvg.name, "--num-clients", str(clients), "--scenario", "label-groups", "--groups", "5"]
    args += ["--samples-per-label", "0", "--fraction", str(min(1.0, 10 / clients)), "--rounds", "1"]
    args += ["--eval-every", "1", "--local-epochs", "1", "--identity-timeout", "3000", "--round-timeout", "3000"]
    run = run_cli([*args, *extra], name, folder, app_root=app_root)
    for _ in range(60):  # py-spy writes its file once the process is gone
        if raw.exists():
            break
        time.sleep(1)
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Profile one run (or read runs already there) and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10000)
    parser.add_argument("--name", default="indexed", help="the run's name (a row of the table)")
    parser.add_argument("--from-runs", default="", help="NAME=FOLDER,...: runs already profiled (FOLDER.raw beside)")
    parser.add_argument("--load", default="", help="the load average while they ran, in words")
    parser.add_argument("--results-dir", default="results/bench")
    parser.add_argument("--notes", default="", help="what differs between the runs")
    parser.add_argument("--app-root", default=str(ROOT), help="the umbel tree to run (e.g. a checkout of main)")
    parser.add_argument("--record", default=RECORD, help="the record's name (docs/results/data/<record>.json)")
    parser.add_argument("--title", default=TITLE, help="the table's title")
    args, extra = parser.parse_known_args(argv)
    folder = (ROOT / args.results_dir / "exchange-profile").resolve()
    loads = [args.load] if args.load else []
    if args.from_runs:
        runs = {k: Path(v).resolve() for k, _, v in (item.partition("=") for item in args.from_runs.split(","))}
    else:
        before = load_average()
        app_root = Path(args.app_root).resolve()
        runs = {args.name: profile(args.clients, folder, args.name, [a for a in extra if a != "--"], app_root)}
        loads.append(f"{before} -> {load_average()}")
    rows = []
    first: tuple[float, float, float] | None = None
    for name, run in runs.items():
        got, total, waited = shares(run.with_name(run.name + ".raw"))
        owned = owner_shares(run.with_name(run.name + ".raw"))
        figures = outcome(run)
        resources = json.loads((run / "resources.json").read_text())
        identity_cpu, round_cpu = phases(run)
        round_actors = phases(run, "actors-")[1]
        first = first or (figures["identity"], figures["round"], resources["cpu-seconds"])
        rows.append(
            [
                name,
                round(figures["identity"], 1),
                None if identity_cpu is None else round(identity_cpu, 1),
                round(figures["round"], 1),
                None if round_cpu is None else round(round_cpu, 1),
                None if round_actors is None else round(round_actors, 1),
                round(resources["cpu-seconds"]),
                " / ".join(
                    f"{now / then:.2f}"
                    for now, then in zip(
                        (figures["identity"], figures["round"], resources["cpu-seconds"]), first, strict=True
                    )
                ),
                round(total / RATE),
                round(100 * waited, 1),
                *(round(100 * got.get(kind, 0.0), 1) for _, kind in (*KINDS, ("", OTHER))),
                *(round(100 * owned.get(name, 0.0), 1) for name, _ in (*OWNERS, (NO_OWNER, ()))),
            ]
        )
        print(rows[-1], flush=True)
    table = Table(
        args.title,
        [
            "run",
            "identity s",
            "identity, simulation process CPU s",
            "round s (10 train, all evaluate)",
            "round, simulation process CPU s",
            "round, ClientApp actors CPU s",
            "simulation process CPU s, whole run",
            "identity / round / CPU, against the first run",
            "busy thread-seconds sampled",
            "% of samples waiting (left out)",
            *(f"% {kind}" for _, kind in (*KINDS, ("", OTHER))),
            *(f"% in {name}" for name, _ in (*OWNERS, (NO_OWNER, ()))),
        ],
        rows,
        notes=(
            f"FedAvg, {args.clients:,} clients, Fashion-MNIST label-groups, 1 round: the identity query, 10 clients "
            "train, every client evaluates, the final models go to every client. py-spy (20 samples a second, "
            "--nonblocking) on the flwr-simulation process; a share is that kind's part of the samples in which one "
            "of its threads was busy; samples of a thread waiting (a lock, queue or event, a sleep, Ray's wait for "
            "an actor) are left out: py-spy's --nonblocking mode counts them as busy. The Ray actors running the "
            "ClientApp are other processes, not counted. The '% in' columns split the same samples by whose code "
            "runs: the innermost frame of umbel's, Flower's or Ray's code on the stack (a standard-library, numpy "
            "or torch frame counts for its caller; Ray's code includes its cloudpickle and its native actor call). "
            + args.notes
        ),
    )
    record = Record(
        name=args.record,
        section=LARGE,
        command=current_command(),
        tables=[table],
        load="; ".join(loads),
    )
    print(write_record(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
