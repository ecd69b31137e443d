"""Whole federations of 1,000+ simulated clients: ``umbel run`` per algorithm, side by side.

Each algorithm runs once on a grouped Fashion-MNIST scenario (label-groups, 5 groups) with a
few per cent of the clients sampled per round, with its round-dependent keys set so that it
clusters within the rounds, and K and thresholds left at their defaults. ``--sample-draw
with-replacement`` gives each of 10,000+ clients enough data (a scaling stress test; the runs and
the record are named so). While a run goes, the RSS of each of its processes is sampled
(``process-memory.json``). Reads each run's ``summary.json`` (final ARI, clusters),
``resources.json`` (the server process's peak RSS and CPU seconds, the start-up identity
phase, the bytes of the strategy's state) and ``round-times.json``, and writes
``federation-scale.md`` and ``.json`` to ``<results-dir>/federation-scale/``.

Example::

    nice -n 10 python -m benchmarks.federation_scale --clients 1000 --rounds 10
    python -m benchmarks.federation_scale --clients 10000 --only cflgt --sample-draw with-replacement
    python -m benchmarks.federation_scale --clients 10000 --only flag --sample-draw with-replacement \
        --variant "sampled form above 5,000" -- --flag-sample-above 5000
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks.records import RECORDS_DIR, load_average, read_record
from benchmarks.report import LARGE, add_record_flag, save_tables, tables_from_markdown
from benchmarks.runs import ROOT, run_cli
from common.scenarios import SAMPLE_DRAWS, STRESS_TEST
from strategies import CFLGP, CFLGT, FLAG, FLIC, FedAvg, FedClust

# Each algorithm's own round keys, so that it clusters within a few rounds (FedAvg first: the
# reference); never K or a threshold: each finds the groups with its defaults.
ALGORITHMS: dict[str, list[str]] = {
    FedAvg.name: [],
    CFLGT.name: ["--cflgt-pretrain-rounds", "3"],
    FedClust.name: [],
    FLAG.name: ["--flag-gradient-epochs", "2"],
    FLIC.name: ["--flic-cluster-round", "3"],
    CFLGP.name: ["--cfl-gp-cluster-period", "3"],
}
PROCESS_KINDS: tuple[tuple[str, str], ...] = (
    ("ray::ClientAppActor", "Ray actor (ClientApp)"),
    ("flwr-simulation", "simulation (ServerApp, LinkState, Ray driver)"),
    ("flower-superlink", "SuperLink"),
    ("flower-superexec", "SuperExec"),
    ("server.cli", "umbel run"),
    ("flwr run", "flwr run"),
    ("ray::", "Ray's own (raylet, GCS, agents)"),
    ("/ray/", "Ray's own (raylet, GCS, agents)"),
)
"""Substring of a process's command line -> the kind its peak memory is reported under (first match)."""
MB = "peak-rss-mb"


class PeakMemory:
    """Samples, every ``interval`` s, the RSS of every process under the ``umbel run`` named ``run_name``.

    With ``max_mb``, the memory guard: once the processes' RSS together passes it, every process of
    the run is killed and ``stopped_at_mb`` holds the total that tripped it.
    """

    def __init__(self, run_name: str, interval: float = 2.0, max_mb: float | None = None) -> None:
        self.run_name, self.interval, self.max_mb = run_name, interval, max_mb
        self.peak_mb: dict[str, float] = {}
        self.count: dict[str, int] = {}
        self.peak_total_mb = 0.0
        self.stopped_at_mb: float | None = None
        self.stopped_largest: tuple[str, float] = ("", 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        marker = f"--run-name {self.run_name} "
        while not self._stop.wait(self.interval):
            roots = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ()) + " "]
            for root in roots[:1]:
                try:
                    tree = [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
                seen: dict[str, int] = {}
                now: dict[str, float] = {}
                total = 0.0
                for proc in tree:
                    try:
                        line, rss = " ".join(proc.cmdline()), proc.memory_info().rss / 2**20
                    except psutil.Error:
                        continue
                    kind = next((k for key, k in PROCESS_KINDS if key in line), "other")
                    seen[kind] = seen.get(kind, 0) + 1
                    now[kind] = max(now.get(kind, 0.0), rss)
                    self.peak_mb[kind] = max(self.peak_mb.get(kind, 0.0), rss)
                    total += rss
                for kind, n in seen.items():
                    self.count[kind] = max(self.count.get(kind, 0), n)
                self.peak_total_mb = max(self.peak_total_mb, total)
                if self.max_mb is not None and total > self.max_mb and self.stopped_at_mb is None:
                    self.stopped_at_mb = total
                    self.stopped_largest = max(now.items(), key=lambda item: item[1])
                    for proc in reversed(tree):
                        try:
                            proc.kill()
                        except psutil.Error:
                            continue

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind of process: the largest single process's peak RSS (MB) and how many ran at once."""
        return {k: {MB: round(v, 1), "processes": self.count[k]} for k, v in sorted(self.peak_mb.items())}


def read_outcome(folder: Path) -> dict[str, Any]:
    """One finished run's figures: final ARI and clusters, peak RSS, identity phase, round times.

    Training rounds are those whose phase is ``train`` without evaluation (after any clustering).
    ``round-times.json`` times rounds 2.. (the mean round); each kind of round is timed from
    ``metrics.jsonl``'s ``round-seconds`` where it has them (round 1 too: a one-shot strategy's
    clustering round), its server step (``clustering-seconds``, where not 0) in brackets.
    """
    summary = json.loads((folder / "summary.json").read_text())
    resources = json.loads((folder / "resources.json").read_text())
    times = json.loads((folder / "round-times.json").read_text())["round-seconds"]
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    plain = {m["round"] for m in metrics if m.get("phase", "train") == "train" and not m["eval-clients"]}
    train_only = [float(s) for r, s in times.items() if int(r) in plain]
    state = resources.get("state-bytes", {})
    kinds: dict[str, list[float]] = {}
    steps: dict[str, list[float]] = {}
    for m in metrics:
        seconds = m.get("round-seconds", times.get(str(m["round"])))
        if seconds is not None:
            kind = str(m.get("phase", "train")) + (" + evaluate" if m["eval-clients"] else "")
            kinds.setdefault(kind, []).append(float(seconds))
            if m.get("clustering-seconds"):
                steps.setdefault(kind, []).append(float(m["clustering-seconds"]))
    return {
        "round-seconds-by-kind": {
            k: f"{statistics.fmean(v):.1f}" + (f" (step {statistics.fmean(steps[k]):.1f})" if k in steps else "")
            for k, v in kinds.items()
        },
        "final-ari": metrics[-1]["ari"] if metrics else None,
        "clusters": metrics[-1]["num-clusters"] if metrics else None,
        "final-accuracy": summary.get("final-accuracy"),
        "clients-identified": resources.get("num-clients"),
        "peak-rss-mb": resources["peak-rss-mb"],
        "server-cpu-seconds": resources["cpu-seconds"],
        "identity-seconds": resources.get("identity-seconds"),
        "state-bytes": sum(state.values()),
        "state-bytes-by-attribute": state,
        "mean-round-seconds": statistics.fmean(float(s) for s in times.values()) if times else None,
        "mean-train-round-seconds": statistics.fmean(train_only) if train_only else None,
        "wall-seconds": summary.get("wall-seconds"),
        "processes": json.loads(memory.read_text()) if (memory := folder / "process-memory.json").exists() else {},
    }


def markdown(rows: dict[str, dict[str, Any]], clients: int, kept: Sequence[Sequence[Any]] = ()) -> str:
    """The results table; round times also as a multiple of FedAvg's.

    ``kept``: rows of an earlier record (cells as written), for algorithms not in ``rows``, first.
    """
    ref = rows.get(FedAvg.name, {}).get("mean-train-round-seconds")
    header = (
        f"| algorithm ({clients:,} clients) | completes | final ARI | clusters | server peak RSS MB | server CPU s "
        "| identity phase s | wall s | mean round s | training round s | / FedAvg | state bytes / client "
        "| round s by kind | peak RSS MB by process |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in kept if row[0] not in rows]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | no: {row['error']} |" + " |" * 12)
            continue
        train = row["mean-train-round-seconds"]
        ratio = f"{train / ref:.2f}" if train and ref else ""

        def fmt(value: Any, spec: str) -> str:
            return "" if value is None else format(value, spec)

        lines.append(
            f"| {name} | yes | {fmt(row['final-ari'], '.3f')} | {row['clusters']} | {row['peak-rss-mb']:.0f} "
            f"| {row['server-cpu-seconds']:.0f} | {fmt(row['identity-seconds'], '.0f')} "
            f"| {fmt(row['wall-seconds'], '.0f')} "
            f"| {fmt(row['mean-round-seconds'], '.2f')} | {fmt(train, '.2f')} | {ratio} "
            f"| {row['state-bytes'] / clients:,.0f} "
            f"| {'; '.join(f'{k} {v}' for k, v in row.get('round-seconds-by-kind', {}).items())} "
            f"| {'; '.join(f'{k} {v[MB]:.0f}' for k, v in row.get('processes', {}).items())} |"
        )
    return "\n".join(lines) + "\n"


def variant_row(name: str, variant: str) -> str:
    """The row of ``name`` run with ``variant`` (a non-default setting): ``"name (variant)"``, or ``name``."""
    return f"{name} ({variant})" if variant else name


def variant_folder(variant: str) -> str:
    """The suffix of a ``variant``'s run folder: ``"-"`` and its words, lower case, joined by ``-``."""
    words = re.findall(r"[a-z0-9]+", variant.lower())
    return "-" + "-".join(words) if words else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run every chosen algorithm in turn; print and write the table."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to every run unchanged."
    )
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fraction", type=float, default=0.03)
    parser.add_argument("--samples-per-label", type=int, default=10)
    parser.add_argument(
        "--sample-draw",
        default="disjoint",
        choices=SAMPLE_DRAWS,
        help=f"label-groups' sample draw; {STRESS_TEST}: the scaling stress test (named so in the runs)",
    )
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(ALGORITHMS)}")
    parser.add_argument("--results-dir", default="results/bench")
    parser.add_argument("--notes", default="", help="with --record: what the table's reader must know")
    parser.add_argument(
        "--not-run",
        action="append",
        default=[],
        metavar="NAME=REASON",
        help="a row saying why NAME did not complete: 'not run: REASON', or REASON itself when it says 'stopped'",
    )
    parser.add_argument("--report-only", action="store_true", help="rebuild the table from runs already there")
    parser.add_argument(
        "--variant",
        default="",
        help="what the arguments after -- change from the defaults (e.g. a sampled form): named in each row "
        "and run folder, so the default runs' rows and folders stay",
    )
    parser.add_argument(
        "--max-gb",
        type=float,
        default=8.0,
        help="memory guard: a run whose processes' RSS together passes this many GB is killed (its row says so)",
    )
    parser.add_argument(
        "--keep-record",
        action="store_true",
        help="with --record: keep the committed record's rows of the algorithms neither run nor --not-run now",
    )
    add_record_flag(parser)
    args, extra = parser.parse_known_args(argv)
    load_before = load_average()
    extra = [a for a in extra if a != "--"]
    names = [n for n in args.only.split(",") if n] or list(ALGORITHMS)
    unknown = sorted(set(names) - set(ALGORITHMS))
    if unknown:
        parser.error(f"The 'only' parameter of federation_scale must name {sorted(ALGORITHMS)}. Got {unknown} instead.")
    unknown = sorted({item.partition("=")[0] for item in args.not_run} - set(ALGORITHMS))
    if unknown:
        parser.error(
            f"The 'not-run' parameter of federation_scale must name {sorted(ALGORITHMS)} before '='. "
            f"Got {unknown} instead."
        )
    common = [
        "--num-clients",
        str(args.clients),
        "--scenario",
        "label-groups",
        "--groups",
        "5",
        "--samples-per-label",
        str(args.samples_per_label),
        "--fraction",
        str(args.fraction),
        "--rounds",
        str(args.rounds),
        "--eval-every",
        str(args.rounds),
        "--local-epochs",
        "1",
        "--sample-draw",
        args.sample_draw,
        *extra,
    ]
    label = f"-{STRESS_TEST}" if args.sample_draw == STRESS_TEST else ""
    results_dir = Path(args.results_dir)
    folder = (results_dir if results_dir.is_absolute() else ROOT / results_dir) / "federation-scale"
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        started = time.monotonic()
        row = variant_row(name, args.variant)
        try:
            run = folder / f"{name}-{args.clients}{label}{variant_folder(args.variant)}"
            memory = PeakMemory(run.name, max_mb=args.max_gb * 1024)
            if not args.report_only:
                with memory:
                    run = run_cli(["--strategy", name, *ALGORITHMS[name], *common], run.name, folder)
                (run / "process-memory.json").write_text(json.dumps(memory.summary(), indent=2) + "\n")
            rows[row] = read_outcome(run)
        except (RuntimeError, OSError, KeyError, ValueError) as err:
            guard = memory.stopped_at_mb
            kind, largest = memory.stopped_largest
            reason = (
                f"stopped by the memory guard: its processes held {guard / 1024:.1f} GB (the largest, {kind}, "
                f"{largest / 1024:.1f} GB) after {time.monotonic() - started:.0f} s"
                if guard
                else ""
            )
            rows[row] = {"error": reason or str(err).splitlines()[0][:200]}
        rows[row]["runner-seconds"] = round(time.monotonic() - started, 1)
        print(f"{row}: {json.dumps({k: v for k, v in rows[row].items() if k != 'state-bytes-by-attribute'})}")
        (folder / "federation-scale.json").write_text(json.dumps({"flags": common, "runs": rows}, indent=2) + "\n")
    for item in args.not_run:
        name, _, reason = item.partition("=")
        rows[name] = {"error": reason if reason.startswith("stopped") else f"not run: {reason}"}
    order = list(ALGORITHMS)
    rows = dict(sorted(rows.items(), key=lambda kv: (order.index(kv[0].split(" (")[0]), kv[0])))
    record = f"federation-scale-{args.clients}{label}"
    kept = read_record(RECORDS_DIR / f"{record}.json").tables[0].rows if args.keep_record else ()
    table = markdown(rows, args.clients, kept)
    (folder / "federation-scale.md").write_text(table)
    print(table)
    if args.record:
        title = f"{args.clients:,} simulated clients end to end" + (
            f", {STRESS_TEST} (a scaling stress test)" if label else ""
        )
        notes = f"Every run: `{' '.join(common)}`. {args.notes}"
        tables = tables_from_markdown(title, table + "\n" + notes + "\n")
        print(f"wrote {save_tables(record, LARGE, tables, load_before)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
