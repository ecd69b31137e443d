"""A stand-in for Flower's ``flwr-clientapp`` in client.warm's tests: it says what its process was given.

Its first argument: an exit code, or ``sleep`` (wait for a signal).
"""

import json
import os
import sys
import time


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "0"
    seen = {
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "probe": os.environ.get("WARM_PROBE"),
        "preloaded": "torch" in sys.modules,
        "umbel": sorted({m.split(".")[0] for m in sys.modules} & {"client", "common", "server", "strategies"}),
        "draw": float(sys.modules["numpy"].random.random()) if "numpy" in sys.modules else None,
        "pid": os.getpid(),
    }
    print(json.dumps(seen), flush=True)
    print("probe stderr", file=sys.stderr, flush=True)
    if mode == "sleep":
        time.sleep(120)
    sys.exit(int(mode))
