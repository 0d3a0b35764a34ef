"""``odradek cluster``: three combined KRaft nodes on this machine (``make cluster``).

How this works and why: a local cluster is three ``odradek serve`` processes, one per
``config/cluster/node{1,2,3}.properties`` (process.roles=broker,controller, brokers
on 9092-9094, controllers on 19093-19095, data under ``./var/cluster/nodeN``). This
command does what the files' comments tell an operator to do by hand:

1. loads each file as ``serve`` does (``BrokerConfig.load`` with the ``--override``s
   this command adds), so a bad file is refused before anything starts;
2. formats the nodes' dirs once, as ``odradek storage format -t ID -c FILE
   --ignore-formatted`` does (``format_dirs``): the cluster id is the one the dirs
   already hold, or a new ``random_uuid`` when none is formatted; dirs formatted for
   two different clusters are refused with one line;
3. launches the three ``serve`` processes together (a node is ready only once a
   majority runs), waits for each ``odradek ready`` line, and prints one line
   ``odradek cluster ready BOOTSTRAP`` and a line per node (its pid, listeners, log);
4. waits; a node that exits meanwhile is reported and the others keep running (kill
   one to watch the quorum fail over); SIGINT (Ctrl-C) or SIGTERM stops every node it
   started by pid (SIGTERM, SIGKILL after ``--stop-timeout``) and waits for each.

The nodes run in their own process group, so Ctrl-C reaches only this process, which
stops them in order; on Linux each also gets SIGTERM should this process die first
(``PR_SET_PDEATHSIG``), so no node outlives its launcher. Each node's stderr goes to
``<log dir>.log`` beside its data dir.

``--port``, ``--controller-port``, ``--data-dir`` and ``--host`` move the three nodes
elsewhere (e.g. when 9092 is taken, or in tests): node ``i`` (0-based, in file order)
gets broker port ``port+i``, controller port ``controller-port+i``, and
``data-dir/nodeN``; ``controller.quorum.voters`` is rewritten to match.

Exit status: 0 every node stopped cleanly, 1 a node failed to start or stop cleanly,
2 bad usage or config (one line).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

import click

from odradek.cli.subcommand import ArgparseStyleCommand, Args, invoke
from odradek.server.config import BrokerConfig, ConfigError
from odradek.storage.errors import StorageError
from odradek.storage.meta_properties import describe_dirs, format_dirs, random_uuid

NAME: Final = "cluster"
DEFAULT_CONFIGS: Final = tuple(Path(f"config/cluster/node{n}.properties") for n in (1, 2, 3))
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
PR_SET_PDEATHSIG: Final = 1


@dataclass
class Node:
    config_file: Path
    overrides: list[str]
    config: BrokerConfig
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    urls: list[str] = field(default_factory=list)
    buffer: bytes = b""
    reported: bool = False

    @property
    def node_id(self) -> int:
        return self.config.node_id


class UsageError(Exception):
    """Options or files that cannot make a cluster (one line, exit status 2)."""


class Stop:
    """Set by SIGINT/SIGTERM; the main loop polls it (no work in the handler)."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


def _error(message: str) -> None:
    print(f"odradek cluster: {message}", file=sys.stderr, flush=True)


def node_overrides(args: Args, index: int, node_id: int) -> list[str]:
    """The ``--override``s that move node ``index`` (file order) to this run's ports/dirs."""
    overrides = list(args.override)
    host = args.host or "localhost"
    if args.port is not None or args.controller_port is not None or args.host:
        if args.port is None or args.controller_port is None:
            raise UsageError("--host, --port and --controller-port go together")
        broker = f"PLAINTEXT://{host}:{args.port + index}"
        overrides += [
            f"listeners={broker},CONTROLLER://{host}:{args.controller_port + index}",
            f"advertised.listeners={broker}",
        ]
    if args.data_dir is not None:
        overrides.append(f"log.dirs={args.data_dir / f'node{node_id}'}")
    return overrides


def load_nodes(args: Args) -> list[Node]:
    files = args.config or list(DEFAULT_CONFIGS)
    for path in files:
        if not path.is_file():
            raise UsageError(f"no config file {path} (run from the repository or pass --config)")
    first = [BrokerConfig.load(path, args.override) for path in files]
    ids = [config.node_id for config in first]
    if len(set(ids)) != len(ids):
        raise UsageError(f"two config files share a node.id: {ids}")
    voters: list[str] = []
    if args.controller_port is not None:
        host = args.host or "localhost"
        voters = [
            "controller.quorum.voters="
            + ",".join(f"{n}@{host}:{args.controller_port + i}" for i, n in enumerate(ids))
        ]
    nodes = []
    for index, (path, node_id) in enumerate(zip(files, ids, strict=True)):
        overrides = node_overrides(args, index, node_id) + voters
        config = BrokerConfig.load(path, overrides)
        log_dir = config.identity_dirs[0]
        nodes.append(Node(path, overrides, config, log_dir.parent / f"{log_dir.name}.log"))
    return nodes


def format_nodes(nodes: list[Node]) -> tuple[str, int]:
    """Format every node's dirs with one cluster id; (that id, dirs newly formatted)."""
    found = set()
    for node in nodes:
        report = describe_dirs(node.config.identity_dirs, node.node_id)
        found |= {p["cluster.id"] for p in report.found.values() if "cluster.id" in p}
    if len(found) > 1:
        raise StorageError(f"the nodes' dirs are formatted for different clusters: {sorted(found)}")
    cluster_id = found.pop() if found else random_uuid()
    formatted = 0
    for node in nodes:
        results = format_dirs(
            node.config.identity_dirs, cluster_id, node.node_id, ignore_formatted=True
        )
        formatted += sum(result.formatted for result in results)
    return cluster_id, formatted


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launcher dies (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def launch(node: Node, log_level: str) -> None:
    node.log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "odradek", "serve", "--config", str(node.config_file)]
    command += [f"--override={item}" for item in node.overrides]
    command += ["--log-level", log_level]
    with open(node.log_path, "ab") as log:
        node.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            process_group=0,  # Ctrl-C reaches the launcher only; it stops the nodes
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


def _drain(nodes: list[Node], timeout_s: float) -> None:
    """Read what the nodes printed (their ready lines) for up to ``timeout_s``."""
    pipes = {
        node.process.stdout.fileno(): node
        for node in nodes
        if node.process is not None
        and node.process.stdout is not None
        and not node.process.stdout.closed
    }
    if not pipes:
        time.sleep(timeout_s)
        return
    readable, _, _ = select.select(list(pipes), [], [], timeout_s)
    for fd in readable:
        node = pipes[fd]
        chunk = os.read(fd, 4096)
        if not chunk:
            assert node.process is not None and node.process.stdout is not None
            node.process.stdout.close()
            continue
        node.buffer += chunk
        while b"\n" in node.buffer:
            line, node.buffer = node.buffer.split(b"\n", 1)
            text = line.decode(errors="replace")
            if text.startswith("odradek ready ") and not node.urls:
                node.urls = text.split()[2:]


def _exited(node: Node) -> int | None:
    return None if node.process is None else node.process.poll()


def wait_ready(nodes: list[Node], stop: Stop, timeout_s: float) -> str:
    """ "" when every node is ready, else why not."""
    deadline = time.monotonic() + timeout_s
    while not all(node.urls for node in nodes):
        if stop.requested:
            return "stopped before the cluster was ready"
        for node in nodes:
            status = _exited(node)
            if status is not None and not node.urls:
                return f"node {node.node_id} exited with status {status}; see {node.log_path}"
        if time.monotonic() > deadline:
            waiting = [str(node.node_id) for node in nodes if not node.urls]
            return f"nodes {', '.join(waiting)} not ready after {timeout_s:g} s"
        _drain(nodes, 0.2)
    return ""


def bootstrap(nodes: list[Node]) -> str:
    return ",".join(node.urls[0].split("://", 1)[1] for node in nodes)


def stop_all(nodes: list[Node], timeout_s: float) -> bool:
    """SIGTERM every running node by pid, then wait (SIGKILL after ``timeout_s``)."""
    clean = True
    for node in nodes:
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                node.process.send_signal(signal.SIGCONT)  # a paused node must hear SIGTERM
                node.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for node in nodes:
        if node.process is None:
            continue
        try:
            status = node.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            node.process.kill()
            status = node.process.wait()
            print(f"node {node.node_id} did not stop in {timeout_s:g} s: killed", flush=True)
        if not node.reported:
            print(f"node {node.node_id} stopped (exit status {status})", flush=True)
            node.reported = True
        clean = clean and status == 0
        if node.process.stdout is not None:
            node.process.stdout.close()
    return clean


def run(args: Args) -> int:
    try:
        nodes = load_nodes(args)
    except (ConfigError, UsageError) as error:
        _error(str(error))
        return EXIT_USAGE
    try:
        cluster_id, formatted = format_nodes(nodes)
    except (StorageError, OSError) as error:
        _error(" ".join(str(error).split()))
        return EXIT_ERROR
    how = f"formatted {formatted} dirs" if formatted else "already formatted"
    print(f"odradek cluster: cluster id {cluster_id} ({how})", flush=True)
    stop = Stop()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for node in nodes:
            launch(node, args.log_level)
        problem = wait_ready(nodes, stop, args.ready_timeout)
        if problem:
            _error(problem)
            stop_all(nodes, args.stop_timeout)
            return EXIT_ERROR
        print(f"odradek cluster ready {bootstrap(nodes)}", flush=True)
        for node in nodes:
            assert node.process is not None
            print(
                f"  node {node.node_id}: pid {node.process.pid} {' '.join(node.urls)} "
                f"(log {node.log_path})",
                flush=True,
            )
        print("Ctrl-C stops all nodes.", flush=True)
        while not stop.requested:
            _drain(nodes, 0.5)
            for node in nodes:
                status = _exited(node)
                if status is not None and not node.reported:
                    node.reported = True
                    print(f"node {node.node_id} exited (status {status})", flush=True)
            if all(node.reported for node in nodes):
                _error("every node has exited")
                return EXIT_ERROR
        print("odradek cluster: stopping", flush=True)
        return 0 if stop_all(nodes, args.stop_timeout) else EXIT_ERROR
    finally:
        for node in nodes:  # an unexpected error: no node outlives this command
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
                node.process.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="format and run a three-node KRaft cluster on this machine until Ctrl-C",
    help="Format (once) and start combined broker+controller nodes from "
    "Kafka-style properties files, print the bootstrap string, and stop them all "
    "on Ctrl-C or SIGTERM.",
)
@click.option(
    "--config",
    type=click.Path(path_type=Path),
    multiple=True,
    metavar="FILE",
    help="a node's server.properties (repeat per node; default "
    "config/cluster/node{1,2,3}.properties)",
)
@click.option("--host", help="the host every listener binds and advertises")
@click.option("--port", type=int, help="the first node's broker port (next: +1, +2)")
@click.option("--controller-port", type=int, help="the first node's controller port (next: +1, +2)")
@click.option(
    "--data-dir", type=click.Path(path_type=Path), help="put node N's data in DATA_DIR/nodeN"
)
@click.option("--override", multiple=True, metavar="KEY=VALUE", help="set a property on every node")
@click.option("--ready-timeout", type=float, default=120.0, metavar="SECONDS", show_default=True)
@click.option("--stop-timeout", type=float, default=30.0, metavar="SECONDS", show_default=True)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
def command(**params: Any) -> int:
    return invoke(run, params)
