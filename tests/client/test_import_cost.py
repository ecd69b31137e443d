"""The ClientApp module stays light to import: in a deployment every message starts a fresh
ClientApp process, and in simulation every Ray actor imports it once."""

import subprocess
import sys

from server.cli import PROJECT_ROOT


def test_importing_the_client_app_loads_neither_scikit_learn_nor_torchvision():
    probe = "import sys, client.app; print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'torchvision'}))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
