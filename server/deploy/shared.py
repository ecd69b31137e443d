"""What every ``umbel deploy`` command shares: paths, ports, exit codes, environment, address and file checks."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = PROJECT_ROOT / "deploy"
SECRETS = DEPLOY_DIR / "secrets"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
CERT_FILES = {"ca": "ca.crt", "ca-key": "ca.key", "cert": "server.pem", "key": "server.key"}
FLEET_PORT = 8000
CONTROL_PORT = 9093
SUPERNODE_PORT = 9094
# how long a SuperNode retries an unreachable SuperLink before it gives up
MAX_RETRIES = 10
MAX_WAIT_TIME = 300.0
# Flower reads these from the environment of the process it starts: no telemetry (it costs seconds
# offline), no update check, unbuffered logs.
ENV_DEFAULTS = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "PYTHONUNBUFFERED": "1"}
# the exit status of every command for bad arguments or missing files (nothing was started)
EXIT_USAGE = 2
USAGE_ERRORS = (ValueError, FileNotFoundError, FileExistsError)


def deploy_env(flwr_home: Path | None = None) -> dict[str, str]:
    """The current environment with Flower's quiet defaults (kept if already set) and ``FLWR_HOME``."""
    env = {**ENV_DEFAULTS, **os.environ}
    if flwr_home is not None:
        env["FLWR_HOME"] = str(flwr_home.resolve())
    return env


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets) as ``(host, port)``.

    Raises
    ------
    ValueError
        If ``address`` has no host or no numeric port.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"The 'superlink' parameter must be HOST:PORT. Got {address!r} instead.")
    return host.strip("[]"), int(port)


@functools.cache
def flower_scripts() -> Path | None:
    """The folder of the installed Flower's own console scripts (``flwr``, ``flower-superlink``), or None.

    Found from the ``flwr`` distribution's file list, not from ``PATH``: a version manager's shim
    (pyenv's) found on ``PATH`` re-runs the command with its own interpreter's folder put first on
    ``PATH``, which hides a launcher (``launcher_path``) from the SuperExec. Read once per process
    (the distribution's file list is parsed for it).
    """
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("flwr")
    except PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == "flwr" and file.parent.name in ("bin", "Scripts"):
            path = Path(str(dist.locate_file(file))).resolve()
            if path.is_file():
                return path.parent
    return None


def launcher_path(launcher_folder: Path, path: str) -> str:
    """``PATH`` with a launcher's folder first, then Flower's own scripts (no shim), then ``path``."""
    scripts = flower_scripts()
    return os.pathsep.join([str(launcher_folder), *([str(scripts)] if scripts else []), path])


def executable(name: str) -> str:
    """The path of Flower's command ``name``: among Flower's own scripts, else on ``PATH`` or beside this Python.

    Raises
    ------
    FileNotFoundError
        If it is not installed.
    """
    scripts = flower_scripts()
    own = None if scripts is None or not (scripts / name).is_file() else str(scripts / name)
    found = own or shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).exists():
        raise FileNotFoundError(f"'{name}' is not installed here (pip install 'flwr[simulation]==1.42.*').")
    return found


def refuse_overwrite(paths: Iterable[Path], force: bool) -> None:
    """Raise ``FileExistsError`` naming the ``paths`` that exist, unless ``force``."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(existing)} already exist; pass --force to replace them.")


def write_file(path: Path, data: bytes, private: bool = False) -> None:
    """Write ``data`` to a new ``path``, readable by its owner alone when ``private``."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
