"""``odradek console``: the web console (``odradek/console/``) over any Kafka cluster.

How this works and why: ``odradek console --bootstrap-server HOST:PORT --listen
127.0.0.1:8080`` connects to the cluster first — an unreachable bootstrap is a one-line
error and status 1, not a console that shows only errors — then binds the listen
address itself (port 0 picks a free one) and serves the app with uvicorn on that
socket, printing one line ``odradek console ready http://HOST:PORT/`` once requests
are answered (tests and scripts wait for it). SIGTERM and Ctrl-C shut it down cleanly.

Starlette, Jinja2, python-multipart and uvicorn are the ``console`` extra, imported only
here: without them the command says which ``pip install`` brings them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any, Final

import click

from odradek.cli.common import command_config, command_config_option
from odradek.cli.subcommand import ArgparseStyleCommand, Args, invoke

NAME: Final = "console"
INSTALL_HINT: Final = "pip install 'odradek[console]'"
DEFAULT_LISTEN: Final = "127.0.0.1:8080"
DEFAULT_SAMPLE_INTERVAL_S: Final = 5.0
STARTUP_TIMEOUT_S: Final = 30.0


class ConsoleError(Exception):
    """A failure to report in one line (exit status 1)."""


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="serve a web console for a Kafka-compatible cluster",
    help="A web console over odradek's admin client: brokers and controller quorum, "
    "topics (partitions, ISR, sizes, configs), a message browser, consumer groups with "
    "lag; create/delete topics and reset offsets with a confirmation.",
)
@click.option(
    "--bootstrap-server",
    required=True,
    metavar="HOST:PORT[,HOST:PORT]",
    help="the cluster's brokers",
)
@command_config_option
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    metavar="HOST:PORT",
    help=f"where the console listens (default {DEFAULT_LISTEN}; port 0: any free port)",
)
@click.option(
    "--sample-interval",
    type=float,
    default=DEFAULT_SAMPLE_INTERVAL_S,
    metavar="SECONDS",
    help="how often consumer lag is sampled for the charts (0: never; "
    f"default {DEFAULT_SAMPLE_INTERVAL_S:g})",
)
def command(**params: Any) -> int:
    return invoke(run, params)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConsoleError(f"--listen: {text!r} is not HOST:PORT")
    return host, int(port)


def run(args: Args) -> int:
    try:
        import jinja2  # noqa: F401 - the extra's packages, checked before anything starts
        import python_multipart  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as missing:
        print(f"{NAME}: {missing.name} is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 1
    try:
        if args.sample_interval < 0:
            raise ConsoleError("--sample-interval must not be negative")
        host, port = parse_listen(args.listen)
        properties = command_config()  # security.protocol, ssl.*, sasl.* for the cluster
        asyncio.run(serve(args.bootstrap_server, host, port, args.sample_interval, properties))
    except ConsoleError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    return 0


async def serve(
    bootstrap: str,
    host: str,
    port: int,
    sample_interval_s: float,
    properties: Mapping[str, str] | None = None,
) -> None:
    import uvicorn

    from odradek.client._core.config import ConfigError
    from odradek.client._core.connection import KafkaConnectionError
    from odradek.client._core.errors import KafkaError
    from odradek.console.app import create_app
    from odradek.console.source import ClusterSource

    try:
        source = ClusterSource(bootstrap, properties=properties)
        await source.start()
    except (ConfigError, ValueError) as error:
        raise ConsoleError(f"--bootstrap-server: {error}") from None
    except (KafkaError, KafkaConnectionError, OSError, TimeoutError) as error:
        raise ConsoleError(f"cannot reach {bootstrap}: {error}") from None
    try:
        listener = _bind(host, port)
    except OSError as error:
        await source.close()
        raise ConsoleError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    app = create_app(source, sample_interval_s)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it once it has shut down; a SIGTERM
    # handler that does nothing makes that a clean exit (status 0) instead of a kill.
    signal.signal(signal.SIGTERM, lambda *_: None)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[listener]))
    try:
        await _announce(server, task, listener)
        await task
    finally:
        if not task.done():
            server.should_exit = True
            with contextlib.suppress(Exception):
                await task
        await source.close()
        listener.close()


async def _announce(server: Any, task: asyncio.Task[None], listener: socket.socket) -> None:
    """Print the ready line once uvicorn serves (the lifespan has started)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_TIMEOUT_S
    while not server.started:
        if task.done():
            task.result()  # uvicorn's own failure, if it raised
            raise ConsoleError("the web server stopped while starting")
        if loop.time() > deadline:
            raise ConsoleError("the web server did not start")
        await asyncio.sleep(0.02)
    bound_host, bound_port = listener.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"odradek console ready http://{shown}:{bound_port}/", flush=True)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    listener.setblocking(False)
    return listener
