"""``umbel deploy run`` and ``umbel deploy wait``: a deployment run's outcome as an exit status.

``flwr run --stream`` returns 0 even when the run ends ``finished:failed``, so a script cannot
tell a failed run from a finished one. These commands follow a run through Flower's public
CLI (``flwr run --format json``, ``flwr ls --run-id ID --format json``, ``flwr log ID --show``),
which Flower 1.41 and 1.42 both answer in the same form, and exit with the outcome:

- 0: the run ended ``finished:completed`` (umbel's ServerApp fails a run in which nothing
  trained, so a completed run trained);
- 1: it ended failed or stopped; the last lines of its log are printed;
- 2: a usage error (no such run, no connection, ``flwr`` missing);
- 3: ``--timeout`` passed before the run ended.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from .shared import EXIT_USAGE, deploy_env, executable

EXIT_COMPLETED, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 3
COMPLETED = "finished:completed"
FINISHED = "finished"

Runner = Callable[[list[str]], subprocess.CompletedProcess]


def add_parsers(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``run`` and ``wait`` to ``umbel deploy``'s subcommands."""
    p = sub.add_parser(
        "run",
        help="submit umbel to a deployment and follow it; exit 0 only if it finished and trained",
        formatter_class=fmt,
        epilog=_EPILOG,
    )
    p.add_argument("connection", help="the Flower connection naming the SuperLink ('umbel deploy connection')")
    p.add_argument("--app", type=Path, default=Path("."), help="the Flower app folder (umbel's source tree)")
    p.add_argument(
        "--run-config", action="append", default=[], metavar="FILE_OR_KEY=VALUE", help="passed to flwr run (repeat)"
    )
    _follow_arguments(p)
    p = sub.add_parser(
        "wait",
        help="follow a submitted run; exit 0 only if it finished and trained",
        formatter_class=fmt,
        epilog=_EPILOG,
    )
    p.add_argument("run_id", type=int, metavar="RUN_ID")
    p.add_argument("connection", help="the Flower connection naming the SuperLink")
    _follow_arguments(p)


_EPILOG = "exit codes: 0 finished:completed; 1 failed or stopped (its last log lines are printed); 2 usage; 3 timeout"


def _follow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flwr-home", type=Path, default=None, help="default: $FLWR_HOME or ~/.flwr")
    p.add_argument("--poll", type=float, default=5.0, help="seconds between status queries")
    p.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0: never)")
    p.add_argument("--log-lines", type=int, default=40, help="lines of the run's log printed when it failed")


def parse_run_id(stdout: str) -> int:
    """The run id in ``flwr run --format json``'s answer.

    Raises
    ------
    ValueError
        If the answer is not JSON or says the submission failed.
    """
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as err:
        raise ValueError(f"flwr run did not answer in JSON ({err}): {stdout.strip()[-500:]!r}") from None
    if not data.get("success") or data.get("run-id") in (None, ""):
        raise ValueError(f"flwr run did not start a run: {data.get('error-message') or data}")
    return int(data["run-id"])


def parse_status(stdout: str, run_id: int) -> str:
    """The status (e.g. ``running``, ``finished:failed``) of ``run_id`` in ``flwr ls --format json``'s answer.

    Raises
    ------
    ValueError
        If the answer is not JSON, reports an error, or does not list ``run_id``.
    """
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as err:
        raise ValueError(f"flwr ls did not answer in JSON ({err}): {stdout.strip()[-500:]!r}") from None
    if not data.get("success"):
        raise ValueError(f"flwr ls failed: {data.get('error-message') or data}")
    for run in data.get("runs", []):
        if str(run.get("run-id")) == str(run_id):
            return str(run.get("status", ""))
    raise ValueError(f"The SuperLink lists no run {run_id}.")


def outcome(status: str) -> int | None:
    """The exit code for a run in ``status``; ``None`` while it has not finished."""
    if not status.startswith(FINISHED):
        return None
    return EXIT_COMPLETED if status == COMPLETED else EXIT_FAILED


def follow(
    run_id: int,
    connection: str,
    flwr: Runner,
    *,
    poll: float = 5.0,
    timeout: float = 0.0,
    log_lines: int = 40,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Query the run's status until it finishes; the exit code (module docstring).

    Parameters
    ----------
    run_id, connection
        The run and the Flower connection naming its SuperLink.
    flwr : callable
        Runs ``flwr`` with the given arguments and returns the completed process.
    poll, timeout, log_lines
        Seconds between queries, seconds before giving up (0: never), log lines on failure.
    """
    start, status = clock(), ""
    while True:
        ls = flwr(["ls", connection, "--run-id", str(run_id), "--format", "json"])
        try:
            now = parse_status(ls.stdout, run_id)
        except ValueError as err:
            print(f"umbel deploy wait: error: {err} {ls.stderr.strip()[-500:]}".rstrip(), file=sys.stderr)
            return EXIT_USAGE
        if now != status:
            status = now
            print(f"umbel deploy wait: run {run_id} is {status}", flush=True)
        code = outcome(status)
        if code is not None:
            break
        if timeout and clock() - start > timeout:
            print(f"umbel deploy wait: run {run_id} still {status} after {timeout:g} s", file=sys.stderr)
            return EXIT_TIMEOUT
        sleep(poll)
    if code != EXIT_COMPLETED:
        shown = flwr(["log", str(run_id), connection, "--show"])
        lines = (shown.stdout + shown.stderr).rstrip().splitlines()[-log_lines:]
        print(f"umbel deploy wait: run {run_id} ended {status}; its last {len(lines)} log lines:", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
    else:
        print(f"umbel deploy wait: run {run_id} finished and trained", flush=True)
    return code


def flwr_runner(env: Mapping[str, str], executable: str) -> Runner:
    """A ``Runner`` calling the ``flwr`` CLI at ``executable`` with ``env``."""

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [executable, *args], env=dict(env), capture_output=True, text=True, timeout=120, check=False
        )

    return run


def run_command(args: argparse.Namespace, env: Mapping[str, str], executable: str) -> int:
    """``umbel deploy run`` and ``umbel deploy wait``."""
    flwr = flwr_runner(env, executable)
    if args.deploy_command == "run":
        cmd = ["run", str(args.app.resolve()), args.connection, "--format", "json"]
        for item in args.run_config:
            cmd += ["--run-config", str(Path(item).resolve()) if Path(item).is_file() else item]
        submitted = flwr(cmd)
        run_id = parse_run_id(submitted.stdout)
        print(
            f"umbel deploy run: submitted run {run_id} (follow it again with: umbel deploy wait {run_id} "
            f"{args.connection})",
            flush=True,
        )
    else:
        run_id = args.run_id
    return follow(run_id, args.connection, flwr, poll=args.poll, timeout=args.timeout, log_lines=args.log_lines)


def _follow(args: argparse.Namespace) -> int:
    return run_command(args, deploy_env(args.flwr_home), executable("flwr"))


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"run": _follow, "wait": _follow}
