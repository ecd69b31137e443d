"""The distribution 'umbel' is installed and provides its four packages and its command."""

import importlib
from importlib.metadata import distribution
from pathlib import Path

import pytest

PACKAGES = ("server", "client", "strategies", "common")


def test_distribution_metadata():
    dist = distribution("umbel")
    assert dist.metadata["Name"] == "umbel"
    requires = set(dist.requires or [])
    assert {"flwr[simulation]==1.41.*", "torch==2.14.1", "torchvision==0.29.1"} <= requires
    names = {r.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0] for r in requires}
    assert {"numpy", "scipy", "scikit-learn", "networkx", "python-louvain", "matplotlib", "pytest"} <= names
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts["umbel"] == "server.cli:main"


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_imports_from_the_installed_distribution(name):
    module = importlib.import_module(name)
    root = Path(__file__).resolve().parent.parent
    assert Path(module.__file__).resolve().parent == root / name


def test_common_stays_free_of_flower():
    root = Path(__file__).resolve().parent.parent / "common"
    offenders = [p.name for p in root.rglob("*.py") if "import flwr" in p.read_text() or "from flwr" in p.read_text()]
    assert offenders == []
