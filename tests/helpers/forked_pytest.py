"""Run pytest many times, each in a child forked from one process that imported the libraries once.

``tests/test_mutations.py`` runs a few tests on each of about fifty mutated copies of the source. A
fresh interpreter for each spends most of its time importing torch, Flower and scikit-learn; here
they are imported once, and each request forks a child that imports the project's own (mutated)
modules from its tree and runs pytest there. Start it with ``python -I`` so the parent's
``sys.path`` holds no project folder: nothing of the project may be imported before the fork.

Protocol, one JSON object a line: the request ``{"cwd": TREE, "args": [...], "log": PATH}`` on
stdin, the reply ``{"rc": EXIT_CODE}`` on stdout; the child's output goes to ``log``.
"""

from __future__ import annotations

import json
import os
import sys

# Bytecode of a mutated file could be reused for the original (or the reverse) when both have the
# same size and modification second, so nothing is cached.
sys.dont_write_bytecode = True

WARM = (
    "numpy",
    "scipy.cluster.hierarchy",
    "scipy.linalg",
    "scipy.spatial.distance",
    "sklearn.cluster",
    "sklearn.datasets",
    "sklearn.metrics",
    "torch",
    "flwr.app",
    "flwr.clientapp",
    "flwr.common",
    "flwr.serverapp",
    "pytest",
)


def _run(request: dict) -> int:
    """Fork; the child runs pytest in ``request["cwd"]`` with its output in ``request["log"]``."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(request["cwd"])
            sys.path.insert(0, request["cwd"])
            import pytest

            code = int(pytest.main(request["args"]))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    for name in WARM:
        __import__(name)
    for line in sys.stdin:
        rc = _run(json.loads(line))
        sys.stdout.write(json.dumps({"rc": rc}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
