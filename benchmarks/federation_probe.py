"""How far a run with N simulated clients gets within a time and a memory limit: the first wall.

Runs ``umbel run`` (FedAvg, or ``--strategy``; label-groups with ``sample-draw with-replacement``, one
round, every client evaluated, no final models; ``umbel run`` flags after the probe's own override
these) and every 5 s samples the RSS of each process under it
(``federation_scale.PROCESS_KINDS``); stops it at ``--limit`` seconds or when the processes
together pass ``--max-mb`` (the box is shared). Reports when Flower's simulation process and
Ray started, how many clients were identified by when, and the memory then. ``--from-runs``
rebuilds the record (``federation-probe``) from runs already there; ``--merge`` keeps the record's
rows of other runs and replaces those of the same name. A run that finishes adds its
identity, slowest round and whole-run seconds, its simulation process's CPU seconds and its ARI.

Example::

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.federation_probe --clients 100000 --limit 540 --max-mb 7500
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks.federation_scale import PROCESS_KINDS
from benchmarks.records import (
    RECORDS_DIR,
    Record,
    Table,
    current_command,
    load_average,
    merge_record,
    read_record,
    write_record,
)
from benchmarks.report import LARGE
from benchmarks.runs import ROOT
from strategies import FedAvg

SIMULATION = "simulation (ServerApp, LinkState, Ray driver)"
RAY = "Ray's own (raylet, GCS, agents)"
IDENTIFIED = re.compile(r"(\d+) of (\d+) clients identified \((\d+) s\)")


def probe(
    clients: int,
    limit: float,
    max_mb: float,
    folder: Path,
    name: str,
    strategy: str = FedAvg.name,
    extra: Sequence[str] = (),
) -> str:
    """Run and sample until done or a limit; write ``<name>.samples.jsonl``; say why it ended.

    ``extra`` (``umbel run`` flags) come last and so override the probe's own.
    """
    cmd = [sys.executable, "-m", "server.cli", "run", "--strategy", strategy, "--num-clients", str(clients)]
    cmd += ["--scenario", "label-groups", "--groups", "5", "--samples-per-label", "0"]
    cmd += ["--sample-draw", "with-replacement", "--fraction", str(min(1.0, 10 / clients)), "--rounds", "1"]
    cmd += ["--eval-every", "1", "--local-epochs", "1", "--save-models", "false", "--identity-timeout", "20000"]
    cmd += ["--round-timeout", "20000", "--node-wait-timeout", "3000", "--results-dir", str(folder), "--run-name", name]
    cmd += list(extra)
    folder.mkdir(parents=True, exist_ok=True)
    start, why = time.time(), "finished"
    with (folder / f"{name}.log").open("w") as log, (folder / f"{name}.samples.jsonl").open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            time.sleep(5)
            kinds: dict[str, float] = {}
            total = 0.0
            for p in [root, *root.children(recursive=True)]:
                try:
                    line, rss = " ".join(p.cmdline()), p.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                kind = next((k for key, k in PROCESS_KINDS if key in line), "other")
                kinds[kind] = max(kinds.get(kind, 0.0), rss)
                total += rss
            seconds = round(time.time() - start)
            out.write(json.dumps({"s": seconds, "total-mb": round(total), **{k: round(v) for k, v in kinds.items()}}))
            out.write("\n")
            out.flush()
            if total > max_mb or seconds > limit:
                why = f"stopped at {total:.0f} MB" if total > max_mb else f"stopped at {seconds} s"
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return why


def summary(samples: Path, log: Path) -> dict[str, Any]:
    """When the simulation and Ray started, the last identity progress, and the memory at its peak."""
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    sim = next((r["s"] for r in rows if SIMULATION in r), None)
    ray = next((r["s"] for r in rows if RAY in r), None)
    progress = [tuple(map(int, m.groups())) for m in IDENTIFIED.finditer(log.read_text(errors="replace"))]
    first = next(((n, s) for n, _, s in progress if n > 0), None)
    last = progress[-1] if progress else (0, 0, 0)
    rate = (last[0] - first[0]) / (last[2] - first[1]) if first and last[2] > first[1] else None
    end = max(rows, key=lambda r: r["total-mb"]) if rows else {}
    run = samples.with_name(samples.name.removesuffix(".samples.jsonl"))
    done = finished(run)
    return {
        **done,
        "sim": sim,
        "ray": ray,
        "identified": f"{last[0]:,} of {last[1]:,} after {last[2]} s" if progress else "",
        "rate": None if rate is None else round(rate),
        "seconds": rows[-1]["s"] if rows else None,
        "total-mb": end.get("total-mb"),
        "sim-mb": end.get(SIMULATION),
        "actor-mb": end.get("Ray actor (ClientApp)"),
    }


def finished(run: Path) -> dict[str, Any]:
    """A finished run's identity, slowest round and whole-run seconds, its final ARI, and the simulation
    process's CPU seconds (empty where the run did not finish)."""
    if not (run / "summary.json").exists():
        return {}
    summary = json.loads((run / "summary.json").read_text())
    resources = json.loads((run / "resources.json").read_text())
    rounds = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "identity": resources.get("identity-seconds"),
        "slowest-round": max((float(r["round-seconds"]) for r in rounds), default=None),
        "wall": summary.get("wall-seconds"),
        "ari": summary.get("final-ari"),
        "cpu": resources.get("cpu-seconds"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Probe (or read probes already there) and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100000)
    parser.add_argument("--limit", type=float, default=540.0, help="seconds before the run is stopped")
    parser.add_argument("--max-mb", type=float, default=7500.0, help="the run's processes together, MB")
    parser.add_argument("--name", default="probe", help="a row of the table")
    parser.add_argument("--from-runs", default="", help="NAME=FOLDER/RUN;...: probes already there")
    parser.add_argument("--load", default="", help="the load average while they ran, in words")
    parser.add_argument("--notes", default="")
    parser.add_argument("--results-dir", default="results/bench")
    parser.add_argument("--strategy", default=FedAvg.name, help="the algorithm run (umbel run --strategy)")
    parser.add_argument("--record", default="federation-probe", help="the record's name (docs/results/data)")
    parser.add_argument(
        "--merge", action="store_true", help="keep the record's rows of other runs; replace those of the same name"
    )
    args, extra = parser.parse_known_args(argv)
    folder = (ROOT / args.results_dir / "federation-probe").resolve()
    loads = [args.load] if args.load else []
    if args.from_runs:
        runs = {k: Path(v) for k, _, v in (item.partition("=") for item in args.from_runs.split(";"))}
        ends = dict.fromkeys(runs, "see the notes")
    else:
        before = load_average()
        run = folder / f"{args.name}-{args.clients}"
        extra = [a for a in extra if a != "--"]
        ends = {args.name: probe(args.clients, args.limit, args.max_mb, folder, run.name, args.strategy, extra)}
        runs = {args.name: run}
        loads.append(f"{before} -> {load_average()}")
    rows = []
    for name, run in runs.items():
        got = summary(run.with_name(run.name + ".samples.jsonl"), run.with_name(run.name + ".log"))
        rows.append([name, got["sim"], got["ray"], got["identified"], got["rate"], got["seconds"], got["total-mb"]])
        rows[-1] += [got["sim-mb"], got["actor-mb"], ends[name]]
        rows[-1] += [got.get(k) for k in ("identity", "slowest-round", "wall", "cpu", "ari")]
        print(rows[-1], flush=True)
    table = Table(
        f"{args.clients:,} simulated clients end to end: how far each run gets",
        [
            "run",
            "simulation process up, s",
            "Ray up, s",
            "clients identified (identity phase s)",
            "clients identified a second",
            "stopped at s",
            "all its processes MB, at their peak",
            "simulation process MB, then",
            "one Ray actor MB, then",
            "end",
            "finished: identity s",
            "slowest round s",
            "run s",
            "simulation process CPU s",
            "final ARI",
        ],
        rows,
        notes=args.notes,
    )
    record = Record(args.record, LARGE, current_command(), [table], load="; ".join(loads))
    if args.merge:
        record = merge_record(read_record(RECORDS_DIR / f"{args.record}.json"), record, key=lambda row: row[0])
    print(write_record(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
