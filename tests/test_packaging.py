"""The distribution 'umbel' is installed and provides its four packages and its command."""

import importlib
from importlib.metadata import distribution
from pathlib import Path

import pytest

from common.config import TrainingParams

PACKAGES = ("server", "client", "strategies", "common")


def test_distribution_metadata():
    dist = distribution("umbel")
    assert dist.metadata["Name"] == "umbel"
    requires = set(dist.requires or [])
    assert {"flwr[simulation]<1.43,>=1.42", "torch<2.15,>=2.14", "torchvision<0.30,>=0.29"} <= requires
    names = {r.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0] for r in requires}
    assert {
        "numpy",
        "scipy",
        "scikit-learn",
        "networkx",
        "python-louvain",
        "matplotlib",
        "pytest",
        "tomli-w",
        "tensorboard",
    } <= names
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts["umbel"] == "server.cli:main"


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_imports_from_the_installed_distribution(name):
    module = importlib.import_module(name)
    root = Path(__file__).resolve().parent.parent
    assert Path(module.__file__).resolve().parent == root / name


def test_common_stays_free_of_flower():
    """Flower itself (``flwr``) stays out of common; flwr-datasets (``flwr_datasets``) may come in."""
    import re

    root = Path(__file__).resolve().parent.parent / "common"
    flower = re.compile(r"^\s*(import|from) flwr\b(?!_)", re.MULTILINE)
    offenders = [p.name for p in root.rglob("*.py") if flower.search(p.read_text())]
    assert offenders == []
    assert flower.search("    from flwr.common import Context") and flower.search("import flwr\n")


@pytest.mark.slow
def test_a_built_wheel_runs_without_the_source_tree(tmp_path):
    """pip wheel + pip install --target, then `umbel run` from an unrelated folder: no pyproject is read."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    source = tmp_path / "source"
    shutil.copytree(
        root,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".flwr", "results", "build", "*.egg-info", "__pycache__", ".pytest_cache", "tests"
        ),
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        timeout=300,
    )
    wheel = next((tmp_path / "dist").glob("umbel-*.whl"))
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=300)
    assert not (site / "pyproject.toml").exists() and (site / "common" / "schema.py").exists()
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import server.cli; print(server.cli.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(site / "server" / "cli.py")
    # issue 20's done-means command, on defaults; only where the output goes is added
    done_means = ["run", "--rounds", "2", "--num-clients", "10", "--dataset", "digits"]
    umbel = site / "bin" / "umbel"  # the console script, as `pip install .` puts it on PATH
    assert umbel.is_file()
    cmd = [str(umbel), *done_means, "--run-name", "wheel", "--flwr-home", str(work / "flwr")]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=420, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    summary = json.loads((work / "results" / "wheel" / "summary.json").read_text())
    assert summary["strategy"] == "cflgt" and summary["rounds"] == 2 and summary["num-clients"] == 10
    assert summary["config"]["lr"] == TrainingParams().lr  # the schema's default, no pyproject.toml anywhere near
    installed = work / "flwr" / "apps"
    assert list(installed.rglob("pyproject.toml")) and list(installed.rglob("*.py")) == []  # code from the wheel
