"""One ``umbel run`` at a time in a Flower home: a second run of the same name is refused, naming the
holder; the lock ends with its process, so a killed run blocks nothing (no Ray started here)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from server import cli
from tests.helpers import SMALL_FEDERATION_ARGS


def test_a_held_home_is_refused_naming_the_run_the_path_and_the_holder(tmp_path):
    home = tmp_path / ".flwr" / "run-a"
    with cli.hold_home(home, "run-a") as held:
        assert (home / cli.HOME_LOCK).read_text() == f"{os.getpid()}\n"
        message = (
            f"another umbel run with run name 'run-a' is using {home} (pid {os.getpid()}); "
            "wait for it to end, or give this run another --run-name or --flwr-home."
        )
        with pytest.raises(cli.HomeInUse, match=f"^{re.escape(message)}$"):
            cli.hold_home(home, "run-a")
        assert not held.closed
        with cli.hold_home(tmp_path / ".flwr" / "run-b", "run-b"):  # another name: another home
            pass
    with cli.hold_home(home, "run-a"):  # released by closing
        pass


def test_the_lock_ends_with_the_process_that_held_it(tmp_path):
    home = tmp_path / "home"
    ready, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # the holder: takes the lock, says so, waits to be killed
        try:
            held = cli.hold_home(home, "other")  # noqa: F841 (kept open: closing it releases the lock)
            os.write(told, b"held")
            time.sleep(120)
        finally:
            os._exit(0)
    try:
        assert os.read(ready, 4) == b"held"
        with pytest.raises(cli.HomeInUse, match=rf"run name 'x' is using {re.escape(str(home))} \(pid {pid}\)"):
            cli.hold_home(home, "x")
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with cli.hold_home(home, "x"):  # the killed holder's file is still there, its lock is not
        assert (home / cli.HOME_LOCK).read_text() == f"{os.getpid()}\n"


def test_umbel_run_refuses_a_run_name_in_use_before_starting_flower(tmp_path, monkeypatch, capsys):
    def must_not_start(*args, **kwargs):
        raise AssertionError("simulate() started while another run held the home")

    monkeypatch.setattr(cli, "simulate", must_not_start)
    monkeypatch.setattr(cli, "_work_root", lambda: tmp_path)
    home = tmp_path / ".flwr" / "same"  # the default home of run name 'same'
    with cli.hold_home(home, "same"):
        code = cli.main(["run", *SMALL_FEDERATION_ARGS, "--results-dir", str(tmp_path), "--run-name", "same"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"umbel run: error: another umbel run with run name 'same' is using {home} (pid {os.getpid()})" in err
