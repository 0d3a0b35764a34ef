"""``odradek serve``: run a broker (combined broker+controller by default).

How this works and why: configuration comes from an optional Kafka
``server.properties`` plus ``--override KEY=VALUE`` and the shortcuts ``--data-dir``,
``--listen`` and ``--node-id``; a bad value exits with one line naming the key. When
the listeners accept connections one line goes to stdout — ``odradek ready
PLAINTEXT://127.0.0.1:40123`` with the real port — so scripts and tests can bind port 0
and read it back; with ``metrics.listener`` set, the line ends with ``METRICS
http://HOST:PORT/metrics``, where Prometheus scrapes (console/metrics.py), bound before
the broker starts. SIGTERM/SIGINT shut down cleanly and exit 0; if logs or checkpoints
cannot be written then (a full disk) it says so in one line and exits 1, and the next
start recovers the logs. A start refused (damaged or foreign data, or, on a node of a
configured quorum, a dir ``odradek storage format`` has not formatted; see
storage/meta_properties.py) is one line and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from odradek.cli.subcommand import ArgparseStyleCommand, Args, invoke
from odradek.server.config import (
    BrokerConfig,
    ConfigError,
    read_properties_file,
)

if TYPE_CHECKING:
    from odradek.console.metrics import MetricsEndpoint
    from odradek.server.broker import Broker


def _overrides(args: Args) -> list[str]:
    overrides = list(args.override)
    if args.data_dir:
        overrides.append(f"log.dirs={args.data_dir}")
    if args.listen:
        overrides.append(f"listeners={_listeners_with(args.listen, args.config, overrides)}")
    if args.node_id is not None:
        overrides.append(f"node.id={args.node_id}")
    return overrides


def _listeners_with(listen: str, config_file: Path | None, overrides: list[str]) -> str:
    """``--listen`` replaces the client (PLAINTEXT) listener; the controller listeners of
    the config stay, so a KRaft server.properties still passes its quorum checks."""
    properties = read_properties_file(config_file) if config_file else {}
    for item in overrides:
        key, _, value = item.partition("=")
        properties[key.strip()] = value.strip()
    names = properties.get("controller.listener.names", "CONTROLLER")
    controller_names = {name.strip().upper() for name in names.split(",")}
    kept = [
        item.strip()
        for item in properties.get("listeners", "").split(",")
        if item.partition("://")[0].strip().upper() in controller_names
    ]
    return ",".join([f"PLAINTEXT://{listen}", *kept])


SWITCH_INTERVAL_S: Final = 0.0005


def run(args: Args) -> int:
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = BrokerConfig.load(args.config, _overrides(args))
    except ConfigError as error:
        print(f"odradek serve: {error}", file=sys.stderr)
        return 2
    from odradek.network.limits import raise_open_file_limit

    raise_open_file_limit()  # connections and log files share the descriptor table
    # A thread doing Python work (the log cleaner, recompression) holds the GIL for up
    # to the switch interval each time the event loop wakes: 5 ms by default, 0.5 ms
    # here (bench/cleaner.py: loop wake-up lag beside a clean 5.3 -> 0.7 ms, the
    # clean's own rate unchanged).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        import uvloop

        return uvloop.run(_serve(config, args.truncate_damaged_metadata))
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(_serve(config, args.truncate_damaged_metadata))


async def _serve(config: BrokerConfig, truncate_damaged_metadata: bool = False) -> int:
    from odradek.console.broker_metrics import start_metrics_endpoint
    from odradek.server.broker import Broker

    broker = Broker(config, truncate_damaged_metadata=truncate_damaged_metadata)
    try:  # bound first: a metrics port in use stops the start before anything is loaded
        metrics = await start_metrics_endpoint(broker)
    except OSError as error:
        listener = config["metrics.listener"]
        where = f"http://{listener.host}:{listener.port}"
        print(
            f"odradek serve: cannot start: metrics.listener {where}: {_one_line(error)}",
            file=sys.stderr,
        )
        return 1
    try:
        return await _run(broker, metrics)
    finally:
        if metrics is not None:
            await metrics.close()


async def _run(broker: Broker, metrics: MetricsEndpoint | None) -> int:
    from odradek.metadata.controller import ControllerError
    from odradek.storage.errors import StorageError

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    starting = asyncio.ensure_future(broker.start())
    stopping = asyncio.ensure_future(stop.wait())
    # A quorum's node waits for a majority before it is ready: SIGTERM ends that wait.
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await starting
        print("odradek serve: stopped before it was ready", file=sys.stderr)
        with contextlib.suppress(Exception):
            await broker.stop()
        return 1
    stopping.cancel()
    try:
        urls = starting.result()
    except (StorageError, OSError, RuntimeError, ControllerError) as error:
        print(f"odradek serve: cannot start: {_one_line(error)}", file=sys.stderr)
        with contextlib.suppress(Exception):
            broker.log_manager.shutdown()
        return 1
    # Everything loaded so far lives as long as the process: keep it out of the
    # collector's full passes, which otherwise stall the loop for tens of ms.
    gc.freeze()
    if metrics is not None:  # a token of its own: listener URLs stay NAME://HOST:PORT
        urls = [*urls, "METRICS", metrics.url]
    print(f"odradek ready {' '.join(urls)}", flush=True)
    await stop.wait()
    logging.getLogger(__name__).info("shutting down")
    if metrics is not None:  # no scrape reads the logs while they close
        await metrics.close()
    try:
        await broker.stop()
    except (StorageError, OSError) as error:  # e.g. a full disk: exit 1 with one line
        print(f"odradek serve: shutdown incomplete: {_one_line(error)}", file=sys.stderr)
        return 1
    return 0


def _one_line(error: BaseException) -> str:
    """An error as a person reads it: an ``OSError``'s text and file, not ``[Errno N]``."""
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
        if error.filename is not None:
            text += f": {error.filename}"
        return text
    return str(error)


@click.command(
    "serve",
    cls=ArgparseStyleCommand,
    short_help="run a Kafka-compatible broker",
    help="Run an odradek broker (combined broker+controller by default).",
)
@click.option("--config", type=click.Path(path_type=Path), help="a Kafka server.properties file")
@click.option("--override", multiple=True, metavar="KEY=VALUE", help="set a property")
@click.option("--data-dir", help="log directory (log.dirs); default ./var")
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="the PLAINTEXT listener (controller listeners of --config stay); port 0 = any",
)
@click.option("--node-id", type=int, help="node.id")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@click.option(
    "--truncate-damaged-metadata",
    is_flag=True,
    help="if the flushed part of __cluster_metadata is damaged or missing, start from "
    "the metadata before the damage instead of refusing to start",
)
def command(**params: Any) -> int:
    return invoke(run, params)
