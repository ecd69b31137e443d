"""Flower's SuperLink with its Fleet API alone on the address SuperNodes dial.

Flower 1.42 serves the Fleet, Control and Runtime (ServerAppIo) APIs of a SuperLink on one
HTTP port, and its open-source Control API has no user authentication: whoever reaches that
port with the CA certificate can register or unregister SuperNodes and submit runs. This
launcher builds Flower's own SuperLink application and serves it twice in one process:

- whole (Control, Runtime, Fleet) on Flower's ``--host``/``--port``, which ``umbel deploy
  superlink`` keeps on 127.0.0.1 unless told otherwise (the operator's ``flwr`` CLI and the
  SuperExec that starts the ServerApp connect there);
- Fleet only on ``--fleet-host``/``--fleet-port``: any path that is not a Fleet route (or
  ``/health``) gets 404 before it reaches Flower.

Both use the same TLS certificate. Usage (``umbel deploy superlink`` builds it)::

    python -m server.superlink --fleet-host 0.0.0.0 --fleet-port 8000 -- <flower-superlink args>

It uses Flower's private start-up functions, so it is tied to the flwr version pyproject pins.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from typing import Any

HEALTH_PATH = "/health"
Scope = dict[str, Any]
ASGIApp = Callable[..., Any]


def fleet_paths() -> frozenset[str]:
    """The exact paths of Flower's Fleet HTTP API, and the health check."""
    from flwr.superlink.routers.fleet.router import router
    from starlette.routing import Route

    return frozenset({route.path for route in router.routes if isinstance(route, Route)} | {HEALTH_PATH})


class FleetOnly:
    """ASGI wrapper that passes only exact Fleet API paths (and ``/health``) to ``app``.

    Parameters
    ----------
    app : ASGI application
        Flower's SuperLink application.
    allowed : set of str, optional
        Paths let through; default ``fleet_paths()``. Matching is exact, so ``/v1/fleet/../x``
        and encoded variants are refused too.
    """

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None = None) -> None:
        self.app = app
        self.allowed = fleet_paths() if allowed is None else allowed

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        """Pass an allowed HTTP request to ``app``; refuse any other (404, or close a websocket)."""
        if scope["type"] == "lifespan":
            return
        if scope["type"] == "http" and scope.get("path") in self.allowed and not scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = b'{"detail":"Not Found: only the Fleet API is served on this address"}'
        await send(
            {
                "type": "http.response.start",
                "status": 404,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def quiet_server(config: Any) -> Any:
    """A ``uvicorn.Server`` that leaves SIGINT and SIGTERM to ``serve_both``."""
    import uvicorn

    class Quiet(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    return Quiet(config)


async def serve_both(servers: Sequence[Any]) -> None:
    """Serve every uvicorn server in this loop; SIGINT or SIGTERM stops them all."""
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    main = asyncio.create_task(servers[0].serve())
    while not servers[0].started and not main.done():
        await asyncio.sleep(0.05)
    tasks = [main, *(asyncio.create_task(s.serve()) for s in servers[1:])]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        error = task.exception()
        if error is not None:
            raise error


def main(argv: Sequence[str] | None = None) -> None:
    """Start Flower's SuperLink with the Fleet API also (and alone) on the fleet address."""
    parser = argparse.ArgumentParser(
        prog="python -m server.superlink", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fleet-host", required=True)
    parser.add_argument("--fleet-port", type=int, required=True)
    parser.add_argument("flower_args", nargs=argparse.REMAINDER, help="-- then flower-superlink's arguments")
    args = parser.parse_args(argv)
    flower_args = [a for a in args.flower_args if a != "--"] if args.flower_args[:1] == ["--"] else args.flower_args

    import importlib

    import uvicorn
    from flwr.supercore import log
    from flwr.supercore.http_logging import get_uvicorn_log_config
    from flwr.supercore.logger import console_handler
    from flwr.superlink.main import create_app

    flower = importlib.import_module("flwr.superlink.cli.flower_superlink")  # the package shadows it
    sys.argv = ["flower-superlink", *flower_args]
    config = flower._parse_superlink_lifespan_config()
    app = create_app(config, flower.SuperLinkLifespan)
    scheme = "http" if config.certificates is None else "https"
    log(
        20,
        "Control, Runtime (ServerAppIo) and Fleet APIs on %s://%s:%s (keep it private)",
        scheme,
        config.host,
        config.port,
    )
    log(20, "Fleet API alone on %s://%s:%s (the address SuperNodes dial)", scheme, args.fleet_host, args.fleet_port)
    common = {
        "log_config": get_uvicorn_log_config(console_handler.level),
        "access_log": True,
        "ssl_keyfile": config.ssl_keyfile,
        "ssl_certfile": config.ssl_certfile,
    }
    servers = [
        quiet_server(uvicorn.Config(app, host=config.host, port=config.port, lifespan="on", **common)),
        quiet_server(
            uvicorn.Config(FleetOnly(app), host=args.fleet_host, port=args.fleet_port, lifespan="off", **common)
        ),
    ]
    asyncio.run(serve_both(servers))


if __name__ == "__main__":
    main()
