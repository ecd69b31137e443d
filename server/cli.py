"""``umbel run``: one experiment in Flower's Ray-backed local simulation, in one command.

It maps its flags to run-config, validates everything (data included) before anything
starts, sizes a private local SuperLink's simulation to the scenario's client count in a
project-local ``FLWR_HOME`` of its own (``.flwr/<run-name>``, held by this process's lock so
that a second run of that name is refused, on a free port, so concurrent runs never touch each
other's SuperLink), runs ``flwr run`` with output streamed, stops the SuperLink it
started (by PID, also on failure, Ctrl-C or SIGTERM) and prints where the results are.
"""

from __future__ import annotations

import argparse
import fcntl
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import psutil
import tomli_w

from common import schema

from . import deploy, models_cli
from .deploy.shared import launcher_path
from .linkindex import write_launcher
from .outcome import run_failure

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONNECTION = "local"  # the simulation connection umbel writes into $FLWR_HOME/config.toml
SCENARIO_FLAGS = (
    "scenario",
    "dataset",
    "data-dir",
    "seed",
    "num-clients",
    "groups",
    "labels-per-group",
    "samples-per-label",
    "samples-per-client",
    "label-fraction",
    "dirichlet-alpha",
    "quantity-alpha",
    "angles",
    "attackers",
    "regression-phi",
    "test-fraction",
)


def _keys() -> ModuleType:
    """``strategies.schema``, imported on first use: the strategies import torch and scikit-learn
    (seconds of CPU), which ``umbel deploy`` and the model commands never need."""
    from strategies import schema as keys_schema

    return keys_schema


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``umbel`` console command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="umbel", description="Clustered federated learning on Flower.")
    commands = parser.add_subparsers(dest="command", required=True)
    if argv[:1] and argv[0] in ("deploy", *models_cli.COMMANDS):
        deploy.add_parser(commands)
        models_cli.add_parsers(commands)
        args = parser.parse_args(argv)
        return deploy.run(args) if args.command == "deploy" else models_cli.run(args)
    keys_schema = _keys()
    run = commands.add_parser(
        "run",
        help="run one experiment in Flower's local simulation",
        usage="umbel run [-h] [--KEY VALUE ...] [--check]",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Every option but the last group is a run-config key; "
        "`flwr run . --run-config` takes the same keys.",
    )
    add_run_config_arguments(run)
    local = run.add_argument_group("umbel run only")
    local.add_argument("--client-cpus", type=int, default=1, help="CPU cores per simulated client (Ray)")
    local.add_argument(
        "--client-gpus",
        type=float,
        default=0.0,
        help="GPU fraction per simulated client, e.g. 0.25 for four clients per GPU",
    )
    local.add_argument(
        "--client-actors",
        type=_at_least_zero("--client-actors"),
        default=0,
        help="Ray actors running the simulated clients (0: one per --client-cpus cores, Ray's count)",
    )
    local.add_argument(
        "--flwr-home",
        type=Path,
        default=None,
        help="Flower's home for this run (default: .flwr/<run-name>, removed after a good run)",
    )
    local.add_argument("--check", action="store_true", help="validate the configuration and data, then stop")
    export = commands.add_parser(
        "export",
        help="write a scenario's clients as data folders (docs/own-data.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    export.add_argument("--out", type=Path, required=True, help="new folder for partition_<i>/ and federation.json")
    export.add_argument(
        "--format",
        choices=("hf", "npz", "imagefolder"),
        default="hf",
        help="hf: datasets save_to_disk (as flwr-datasets create writes)",
    )
    for name in SCENARIO_FLAGS:
        key = keys_schema.SCHEMA[name]
        export.add_argument(
            f"--{name}",
            type=_parser_for(key),
            default=key.default,
            metavar=type(key.default).__name__.upper(),
            help=key.help,
        )
    deploy.add_parser(commands)
    models_cli.add_parsers(commands)
    if argv[:1] == ["run"] and (old := renamed_flag(argv[1:])):
        run.error(f"{schema.renamed_message(old)} Use --{schema.RENAMED[old]}.")
    args = parser.parse_args(argv)
    if args.command == "export":
        return export_federation(args)
    config = {key: getattr(args, key.replace("-", "_")) for key in keys_schema.SCHEMA}
    try:
        folder, num_clients = prepare(config)
    except (ValueError, FileNotFoundError) as err:
        print(f"umbel run: error: {err}", file=sys.stderr)
        return 2
    if args.check:
        print(f"umbel run: configuration and data are valid ({num_clients} clients).")
        return 0
    print("umbel run: starting Flower's simulation; the clients identify themselves first", flush=True)
    home = (args.flwr_home or _work_root() / ".flwr" / folder.name).resolve()
    try:
        held = hold_home(home, folder.name)
    except HomeInUse as err:
        print(f"umbel run: error: {err}", file=sys.stderr)
        return 2
    with held:
        started = time.time()
        code = simulate(config, num_clients, home, args.client_cpus, args.client_gpus, args.client_actors)
        if code in (130, 128 + signal.SIGTERM):
            return _interrupted(folder, config, code)
        failure = run_failure(folder, started)
        if code != 0 or failure:
            log_file = home / "local-superlink" / "superlink.log"
            where = f"the log above and {log_file}" if log_file.exists() else "the log above"
            why = failure or "the run stopped"
            print(f"umbel run: the run failed (flwr exit code {code}: {why}); see {where}.", file=sys.stderr)
            return code or 1
        if args.flwr_home is None:
            shutil.rmtree(home, ignore_errors=True)
    print(f"umbel run: results in {folder}")
    return 0


HOME_LOCK = "umbel-run.lock"
"""The file in a run's Flower home that its ``umbel run`` holds locked, holding its PID."""


class HomeInUse(RuntimeError):
    """Another live ``umbel run`` holds this Flower home."""


def hold_home(home: Path, run_name: str) -> IO[str]:
    """Lock Flower's home ``home`` for this process; close the returned file to release it.

    Two runs in one home would share the private SuperLink's state and stop each other's
    SuperLink. The lock (``flock``) ends with the process that holds it, however it ends, so a
    crashed run leaves no stale lock; the file says the holder's PID for the message.

    Raises
    ------
    HomeInUse
        Naming the run name, ``home`` and the holder's PID, when a live process holds it.
    """
    home.mkdir(parents=True, exist_ok=True)
    held = (home / HOME_LOCK).open("a+")
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.seek(0)
        holder = held.read().strip() or "unknown"
        held.close()
        raise HomeInUse(
            f"another umbel run with run name {run_name!r} is using {home} (pid {holder}); wait for it to "
            "end, or give this run another --run-name or --flwr-home."
        ) from None
    held.seek(0)
    held.truncate()
    held.write(f"{os.getpid()}\n")
    held.flush()
    return held


def add_run_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One ``--KEY`` per run-config key of ``common.schema``, in its group, typed and explained."""
    keys_schema = _keys()
    groups = {name: parser.add_argument_group(name) for name in keys_schema.GROUPS}
    for key in keys_schema.KEYS:
        text = key.help
        if key.choices:
            text += f"; one of {', '.join(key.choices)}"
        if key.read_by:
            text += f" [read by {', '.join(key.read_by)}]"
        extra: dict[str, Any] = {"nargs": "?", "const": True} if isinstance(key.default, bool) else {}
        groups[key.group].add_argument(
            f"--{key.name}",
            type=_parser_for(key),
            default=key.default,
            metavar=type(key.default).__name__.upper(),
            help=text.replace("%", "%%"),
            **extra,
        )


def renamed_flag(argv: Sequence[str]) -> str | None:
    """The first ``--KEY`` of ``argv`` that names a renamed run-config key (``common.schema.RENAMED``)."""
    for token in argv:
        name = token[2:].partition("=")[0] if token.startswith("--") else ""
        if name in schema.RENAMED:
            return name
    return None


def _interrupted(folder: Path, config: Mapping[str, Any], code: int) -> int:
    """Ctrl-C or SIGTERM: the summary and plots of the rounds that ran, then the exit code."""
    from server.results import write_partial

    rounds = write_partial(folder, config)
    where = f"; results of the {rounds} rounds that ran in {folder}" if rounds else "; no round had finished"
    print(f"umbel run: interrupted{where}.", file=sys.stderr)
    return code


def load_defaults(root: Path) -> dict[str, Any]:
    """The ``[tool.flwr.app.config]`` table of ``root/pyproject.toml`` (for tests and tools).

    ``umbel run`` itself takes its defaults from ``common.schema``, which holds the same values.
    """
    with (root / "pyproject.toml").open("rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])


def export_federation(args: argparse.Namespace) -> int:
    """``umbel export``: build the scenario and write its clients' folders and ``federation.json``."""
    from common.export import export_partition
    from common.scenarios import ScenarioConfig, build_partition

    rc = {key: getattr(args, key.replace("-", "_")) for key in SCENARIO_FLAGS}
    try:
        config = ScenarioConfig.from_run_config(rc)
        path = export_partition(build_partition(config, rc["data-dir"]), args.out, args.format)
    except (ValueError, FileNotFoundError) as err:
        print(f"umbel export: error: {err}", file=sys.stderr)
        return 2
    print(f"umbel export: {config.num_clients} client folders and {path}")
    return 0


def use_data_path(config: dict[str, Any]) -> None:
    """With ``data-path``: make it absolute, and take the client count (and, when not given,
    the classes and input shape) from its ``federation.json`` or its ``partition_<i>`` folders.
    """
    from common.local_data import read_federation

    root = Path(config["data-path"]).expanduser().resolve()
    config["data-path"] = str(root)
    if (root / "federation.json").is_file():
        meta = read_federation(root)
        config["num-clients"] = int(meta["num-partitions"])
        config["num-classes"] = config["num-classes"] or int(meta["num-classes"])
        config["input-shape"] = config["input-shape"] or ",".join(str(s) for s in meta["input-shape"])
    elif root.is_dir():
        count = sum(1 for p in root.iterdir() if p.is_dir() and p.name.startswith("partition_"))
        if count == 0:
            raise ValueError(
                f"The 'data-path' parameter of umbel run must be a folder holding partition_<i>/ "
                f"client folders. Got '{root}', which holds none, instead."
            )
        config["num-clients"] = count
    else:
        raise ValueError(f"The 'data-path' parameter of umbel run must be an existing folder. Got '{root}' instead.")
    if config.get("truth-path"):
        config["truth-path"] = str(Path(config["truth-path"]).expanduser().resolve())


def prepare(config: dict[str, Any]) -> tuple[Path, int]:
    """Validate ``config`` (data included) and fix the absolute results folder in it.

    Raises
    ------
    ValueError, FileNotFoundError
        On any bad value or missing data, before anything has started.
    """
    # torch and flwr load here, not at start-up, so that `umbel --help` answers at once
    from common.training import get_device
    from server.experiment import Experiment
    from server.federation_size import required_nodes

    if config.get("data-path"):
        use_data_path(config)
    experiment = Experiment.from_run_config(config)
    experiment.build_strategy()
    s = experiment.scenario
    required_nodes(s.num_clients, experiment.training.min_nodes)
    what = (
        f"reading {s.num_clients} client folders in {experiment.data_path}"
        if experiment.data_path
        else f"partitioning {s.dataset} among {s.num_clients} clients ({s.scenario})"
    )
    print(f"umbel run: settings valid; {what}...", flush=True)
    start = time.monotonic()
    experiment.partition()
    print(f"umbel run: partition checked in {time.monotonic() - start:.1f} s", flush=True)
    get_device(experiment.device)  # simulated clients run on this machine
    if experiment.output.tensorboard:
        from server.tracking import check_tensorboard

        check_tensorboard()
    if experiment.output.resume_from:
        from strategies.state import load_checkpoint

        resume = Path(experiment.output.resume_from).expanduser().resolve()
        load_checkpoint(resume, experiment.strategy)
        config["resume-from"] = str(resume)
    folder = experiment.results_path()
    config["results-dir"] = str(folder.parent)
    config["run-name"] = folder.name
    return folder, experiment.scenario.num_clients


def simulate(
    config: Mapping[str, Any], num_clients: int, flwr_home: Path, cpus: int, gpus: float, actors: int = 0
) -> int:
    """Run ``flwr run`` against a private local SuperLink; always stop that SuperLink.

    ``actors`` > 0 asks for that many Ray actors (Ray is told ``actors * cpus`` CPUs), or more
    where injected slow clients need them (:func:`simulation_cpus`).
    """
    flwr_home.mkdir(parents=True, exist_ok=True)
    write_flower_config(flwr_home)
    config_file = flwr_home / "run-config.toml"
    config_file.write_text(to_toml(config))
    env = simulation_env(flwr_home, free_port())
    stop_superlinks(flwr_home)
    flwr = shutil.which("flwr", path=env["PATH"]) or str(Path(sys.executable).with_name("flwr"))
    app = flower_app(flwr_home)
    cmd = [
        flwr,
        "run",
        str(app),
        CONNECTION,
        "--stream",
        "--run-config",
        str(config_file),
        "--federation-config",
        federation_config(num_clients, cpus, gpus, max(simulation_cpus(config, num_clients, cpus), actors * cpus)),
    ]
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        for attempt in range(1, SUPERLINK_TRIES + 1):
            # a start that failed (here or in an earlier run of this name) can leave a half-written
            # state.db, on which the next local SuperLink exits at once
            shutil.rmtree(flwr_home / "local-superlink", ignore_errors=True)
            code, slow_start = _stream_flower(cmd, env, app, flwr_home)
            if not (code and slow_start) or attempt == SUPERLINK_TRIES:
                return code
            print(
                f"umbel run: Flower's local SuperLink did not start within its fixed time (a busy machine?); "
                f"trying again ({attempt + 1} of {SUPERLINK_TRIES})",
                file=sys.stderr,
                flush=True,
            )
        return code
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


SUPERLINK_SLOW = "Failed to start local SuperLink"
"""Flower's words when its local SuperLink is not up within its fixed 15 s: nothing has run yet."""
SUPERLINK_TRIES = 3


def _stream_flower(cmd: list[str], env: Mapping[str, str], app: Path, flwr_home: Path) -> tuple[int, bool]:
    """Run ``cmd`` showing its output but Flower's noise; its exit code and whether the SuperLink was slow."""
    from .terminal import for_terminal

    slow_start = False
    proc = subprocess.Popen(
        cmd, env=dict(env), cwd=app, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    try:
        for line in proc.stdout or ():
            slow_start = slow_start or SUPERLINK_SLOW in line
            if not is_flower_noise(line):
                sys.stdout.write(for_terminal(line))
                sys.stdout.flush()
        return proc.wait(), slow_start
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        stop_superlinks(flwr_home)


FLOWER_NOISE = (
    "Since flwr 1.32, default simulated SuperNodes changed",
    "To change federation size, use the following command",
    "flwr federation simulation-config",
    "Successfully installed umbel to",
    "Starting logstream for run_id",
)


def is_flower_noise(line: str) -> bool:
    """A line of Flower's that the user cannot act on under ``umbel run`` (or an empty log line)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
    return any(marker in text for marker in FLOWER_NOISE) or text.rstrip(":").strip() == "INFO"


def write_flower_config(flwr_home: Path) -> None:
    """``$FLWR_HOME/config.toml`` with a ``local`` simulation connection (Flower 1.42's form)."""
    (flwr_home / "config.toml").write_text(
        tomli_w.dumps({"superlink": {"default": CONNECTION, CONNECTION: {"address": ":local:"}}})
    )


def federation_config(num_clients: int, cpus: int, gpus: float, ray_cpus: int = 0) -> str:
    """``flwr run --federation-config``: ``num_clients`` SuperNodes with these resources each.

    ``ray_cpus`` > 0 tells Ray how many CPUs to schedule on (its actor pool is ``ray_cpus // cpus``).
    """
    return (
        f"num-supernodes={int(num_clients)} client-resources-num-cpus={int(cpus)} "
        f"client-resources-num-gpus={float(gpus)}" + (f" init-args-num-cpus={int(ray_cpus)}" if ray_cpus else "")
    )


def flower_app(flwr_home: Path) -> Path:
    """The Flower app folder ``flwr run`` packs.

    From a source tree, the tree itself (its code travels in the FAB). From an installed wheel,
    a folder holding only a generated ``pyproject.toml``: the FAB then carries no code and the
    simulation imports the installed packages.
    """
    if _source_tree():
        return PROJECT_ROOT
    app = flwr_home / "app"
    app.mkdir(parents=True, exist_ok=True)
    (app / "pyproject.toml").write_text(
        tomli_w.dumps(
            {
                "build-system": {"requires": ["setuptools>=68"], "build-backend": "setuptools.build_meta"},
                "project": {"name": "umbel", "version": _version(), "dependencies": []},
                "tool": {
                    "flwr": {
                        "app": {
                            "publisher": "umbel",
                            "components": {"serverapp": "server.app:app", "clientapp": "client.app:app"},
                            "config": _keys().defaults(),
                        }
                    }
                },
            }
        )
    )
    return app


def _source_tree() -> bool:
    """Whether this code runs from umbel's source tree (editable install or checkout)."""
    return (PROJECT_ROOT / "pyproject.toml").exists() and (PROJECT_ROOT / "server" / "cli.py").exists()


def _work_root() -> Path:
    """Where ``.flwr/`` goes: the source tree, or the current folder for an installed wheel."""
    return PROJECT_ROOT if _source_tree() else Path.cwd()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("umbel")
    except PackageNotFoundError:
        return "0.0.0"


def simulation_cpus(config: Mapping[str, Any], num_clients: int, cpus: int) -> int:
    """CPUs for Ray when injected slow clients would hold its actors, else 0 (Ray counts the machine's).

    Each sleeping client holds one actor until its reply or its deadline (``client.faults``); so
    that healthy clients never queue behind sleepers, the pool gets one actor more per client
    that may be asleep at once (sleeping uses no CPU).
    """
    slow, delay = float(config.get("slow-fraction", 0.0)), float(config.get("slow-delay", 0.0))
    if slow <= 0 or delay <= 0:
        return 0
    base = max(1, (os.cpu_count() or 1) // cpus)
    if base >= num_clients:
        return 0
    asleep = math.ceil(slow * num_clients)
    return cpus * min(num_clients, base + asleep)


RAY_INLINE_ENV = "RAY_max_direct_call_object_size"
"""Ray's setting: the largest argument (bytes) sent with an actor call instead of through its object store."""
RAY_INLINE_BYTES = 4 * 2**20
"""umbel's value for it (Ray's is 100 KiB): a message carrying a model of up to 4 MiB goes with the call."""


def simulation_env(flwr_home: Path, port: int) -> dict[str, str]:
    """Flower's environment for a run: no runtime dependency installs, no telemetry, own home and port,
    and umbel's ``flwr-simulation`` launcher (``server.linkindex``) first on ``PATH``.

    Ray sends each message of up to :data:`RAY_INLINE_BYTES` with its actor call (Ray's own 100 KiB
    limit put every model-carrying message through its object store: a put and a fetch per
    message, the largest part of the simulation process's time per message); a value in the
    environment is kept.
    """
    launcher = write_launcher(flwr_home / "bin")
    return {
        RAY_INLINE_ENV: str(RAY_INLINE_BYTES),
        **os.environ,
        "PATH": launcher_path(launcher.parent, os.environ.get("PATH", "")),
        "FLWR_HOME": str(flwr_home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port),
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
        "PYTHONUNBUFFERED": "1",
    }


def stop_superlinks(flwr_home: Path) -> list[int]:
    """Stop every ``flower-superlink`` whose state lives in ``flwr_home``, children first."""
    marker = str(flwr_home / "local-superlink")
    stopped = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any("flower-superlink" in part for part in cmdline[:2]) and any(marker in part for part in cmdline):
            tree = proc.children(recursive=True) + [proc]
            for p in tree:
                _signal(p, signal.SIGTERM)
            _, alive = psutil.wait_procs(tree, timeout=10)
            for p in alive:
                _signal(p, signal.SIGKILL)
            stopped.append(proc.pid)
    return stopped


def to_toml(config: Mapping[str, Any]) -> str:
    """Run-config as a flat TOML document (``flwr run --run-config FILE``)."""
    return tomli_w.dumps(dict(config))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _at_least_zero(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(f"The '{flag}' parameter must be an int >= 0. Got {text!r} instead.")
        return value

    return parse


def _parser_for(key: schema.Key) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return key.parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


class _Terminated(Exception):
    """SIGTERM arrived: unwind so that the ``flwr run`` child and the SuperLink are stopped."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:
        pass


if __name__ == "__main__":
    sys.exit(main())
