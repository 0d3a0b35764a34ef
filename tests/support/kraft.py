"""A KRaft quorum of combined ``odradek serve`` processes for tests, chaos runs and benches.

``Quorum(workdir)`` writes one ``config/cluster``-style properties file per node
(process.roles=broker,controller, ``controller.quorum.voters`` over fixed free ports,
a CONTROLLER listener on each), formats every node's dir with one cluster id (``odradek
storage format``), and keeps one ``BrokerProcess`` per node. ``roles`` makes some nodes
broker-only (observers of the metadata log: no CONTROLLER listener, not voters) or
controller-only (no client listener); the voters are the nodes with the controller
role. ``templates`` starts a node's properties from a file (the
``config/cluster/dedicated`` ones), its addresses and dirs replaced by free ones.
``node_properties`` adds one node's own lines last (e.g. an ``advertised.listeners``
naming a proxy in front of it, tests/support/netproxy.py). ``format_args`` go to every
node's ``storage format`` (e.g. ``--add-scram``).
``start()`` launches all nodes before waiting for any (a node is ready only once a
majority runs); each node's broker port is kept across restarts, so clients reconnect
to the addresses they bootstrapped from. Every process is stopped by pid (``close``:
SIGTERM, then SIGKILL); as a context manager it is started on entry and closed on exit,
or on a start that fails. Tests take one as the ``quorum`` fixture (tests/server/conftest.py,
configured with ``@pytest.mark.quorum(...)``).

``quorum_behind_proxies`` builds one whose nodes reach each other only through a
``NetProxy`` (tests/support/netproxy.py), for tests that partition the network.

``leader()`` asks the controllers the quorum's state in-process, with the requests
``odradek metadata-quorum --bootstrap-controller`` sends (DescribeCluster, then
DescribeQuorum to the leader), so polling for a new leader costs no interpreter start.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from odradek.cli.metadata_quorum import QuorumToolError, describe
from tests.support.broker import BrokerProcess
from tests.support.netproxy import NetProxy, Proxy

NODE_IDS = (1, 2, 3)
HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def odradek(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout
    )


class Quorum:
    def __init__(
        self,
        workdir: Path,
        node_ids: Iterable[int] = NODE_IDS,
        properties: Mapping[str, str] | None = None,
        serve_args: Iterable[str] = (),
        roles: Mapping[int, str] | None = None,
        templates: Mapping[int, Path] | None = None,
        node_properties: Mapping[int, Mapping[str, str]] | None = None,
        format_args: Iterable[str] = (),
    ) -> None:
        self.workdir = workdir
        self.node_ids = tuple(node_ids)
        self.roles = {n: (roles or {}).get(n, "broker,controller") for n in self.node_ids}
        self.templates = dict(templates or {})
        self.controller_ids = tuple(n for n in self.node_ids if "controller" in self.roles[n])
        self.broker_ids = tuple(n for n in self.node_ids if "broker" in self.roles[n])
        self.controller_ports = dict(
            zip(self.controller_ids, free_ports(len(self.controller_ids)), strict=True)
        )
        broker_ports = free_ports(len(self.broker_ids))
        self.listen = {n: f"{HOST}:{p}" for n, p in zip(self.broker_ids, broker_ports, strict=True)}
        self.cluster_id = odradek("storage", "random-uuid").stdout.strip()
        self.nodes: dict[int, BrokerProcess] = {}
        workdir.mkdir(parents=True, exist_ok=True)
        for node_id in self.node_ids:
            extra = {**(properties or {}), **(node_properties or {}).get(node_id, {})}
            config = self._write_properties(node_id, extra)
            formatted = odradek(
                "storage", "format", "-t", self.cluster_id, "-c", str(config), *format_args
            )
            if formatted.returncode != 0:
                raise RuntimeError(f"format node {node_id}: {formatted.stderr.strip()}")
            self.nodes[node_id] = BrokerProcess(
                self.data_dir(node_id), ["--config", str(config), *serve_args]
            )

    def data_dir(self, node_id: int) -> Path:
        return self.workdir / f"node{node_id}"

    def config_file(self, node_id: int) -> Path:
        return self.workdir / f"node{node_id}.properties"

    def _write_properties(self, node_id: int, extra: Mapping[str, str]) -> Path:
        voters = ",".join(f"{n}@{HOST}:{port}" for n, port in self.controller_ports.items())
        listeners = []
        if node_id in self.listen:
            listeners.append(f"PLAINTEXT://{self.listen[node_id]}")
        if node_id in self.controller_ports:
            listeners.append(f"CONTROLLER://{HOST}:{self.controller_ports[node_id]}")
        template = self.templates.get(node_id)
        lines = dict(_read_properties(template)) if template is not None else {}
        for key in ("advertised.listeners", "metadata.log.dir"):  # addresses, dirs: ours
            lines.pop(key, None)
        lines.update(
            {
                "process.roles": self.roles[node_id],
                "node.id": str(node_id),
                "controller.quorum.voters": voters,
                "listeners": ",".join(listeners),
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(self.data_dir(node_id)),
            }
        )
        if node_id in self.listen:
            lines["inter.broker.listener.name"] = "PLAINTEXT"
        else:
            lines.pop("inter.broker.listener.name", None)
        lines.update(extra)
        path = self.config_file(node_id)
        path.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        return path

    # -- processes ---------------------------------------------------------------------

    def start(self) -> Quorum:
        for node_id, node in self.nodes.items():
            node.launch(self.listen.get(node_id))
        for node in self.nodes.values():
            node.wait_ready()
        return self

    def start_node(self, node_id: int) -> float:
        """Start one node again on its own port; seconds until it was ready."""
        began = time.monotonic()
        self.nodes[node_id].start(self.listen.get(node_id))
        return time.monotonic() - began

    def launch_node(self, node_id: int) -> None:
        """Spawn one node without waiting (``nodes[node_id].wait_ready()`` later)."""
        self.nodes[node_id].launch(self.listen.get(node_id))

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def stop(self, node_id: int) -> int:
        return self.nodes[node_id].stop()

    def close(self) -> None:
        gc.collect()  # librdkafka handles in reference cycles close their sockets first
        for node in self.nodes.values():
            try:
                node.stop()
            except Exception:
                pass
            finally:
                node.kill()

    def __enter__(self) -> Quorum:
        try:
            return self.start()
        except BaseException:  # a node that never got ready: stop the ones launched
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses and state -----------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(self.listen[n] for n in self.broker_ids)

    def broker_address(self, node_id: int) -> str:
        return self.listen[node_id]

    def segment_files(self, node_id: int, partition: str) -> dict[str, bytes]:
        """Every ``.log`` segment of ``partition`` (``topic-N``) on ``node_id``, by name."""
        directory = self.data_dir(node_id) / partition
        if not directory.is_dir():
            return {}
        return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}

    def pids(self) -> dict[str, int]:
        """``node_name(id)`` -> pid of every node process running now."""
        return {node_name(n): node.pid for n, node in self.nodes.items() if node.alive()}

    def leader(self, among: Iterable[int] | None = None) -> tuple[int, int] | None:
        """(leader id, epoch) as the controllers of ``among`` (default all) see it now."""
        asked = among or self.controller_ids
        addresses = [(HOST, self.controller_ports[n]) for n in asked if n in self.controller_ports]
        try:
            quorum = asyncio.run(describe(addresses))
        except QuorumToolError:
            return None
        return quorum.leader_id, quorum.leader_epoch

    def wait_for_leader(
        self,
        timeout_s: float,
        not_in: frozenset[int] = frozenset(),
        among: Iterable[int] | None = None,
        poll_s: float = 0.05,
    ) -> tuple[int, int]:
        """(leader id, epoch) once a node outside ``not_in`` leads."""
        deadline = time.monotonic() + timeout_s
        seen = None
        asked = tuple(among or self.controller_ids)
        while time.monotonic() < deadline:
            seen = self.leader(asked)
            if seen is not None and seen[0] not in not_in:
                return seen
            time.sleep(poll_s)
        raise AssertionError(f"no leader outside {set(not_in)} within {timeout_s} s: {seen}")


def node_name(node_id: int) -> str:
    """A node's name as a party of a NetProxy (and a chaos ``Node``)."""
    return f"node-{node_id}"


def quorum_behind_proxies(
    workdir: Path,
    net: NetProxy,
    properties: Mapping[str, str] | None = None,
    node_ids: Iterable[int] = NODE_IDS,
    serve_args: Iterable[str] = (),
) -> tuple[Quorum, dict[int, Proxy]]:
    """Combined nodes (formatted, not started) whose every link to each other crosses
    ``net`` (tests/support/netproxy.py), so a test can cut them apart: each node listens
    on its own ports but advertises its broker proxy (``advertised.listeners``), and
    ``controller.quorum.voters`` names the controller listeners' proxies (Raft,
    heartbeats, forwarding). Proxies are named ``node_name(id)``; ``net``'s parties
    function should map those names to ``quorum.pids()``. Returns the quorum and each
    node's broker proxy (the addresses for clients: Metadata answers with them)."""
    ids = tuple(node_ids)
    brokers = {n: net.add(node_name(n)) for n in ids}
    controllers = {n: net.add(node_name(n)) for n in ids}
    voters = ",".join(f"{n}@{controllers[n].address}" for n in ids)
    quorum = Quorum(
        workdir,
        ids,
        properties={**(properties or {}), "controller.quorum.voters": voters},
        serve_args=serve_args,
        node_properties={
            n: {"advertised.listeners": f"PLAINTEXT://{brokers[n].address}"} for n in ids
        },
    )
    for n in ids:
        host, port = quorum.listen[n].rsplit(":", 1)
        brokers[n].upstream = (host, int(port))
        controllers[n].upstream = (HOST, quorum.controller_ports[n])
    return quorum, brokers


def _read_properties(path: Path) -> dict[str, str]:
    """key=value lines of a properties file (comments and blank lines skipped)."""
    properties = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def read_partition(
    bootstrap: str, topic: str, expected: int, group: str = "read-back", timeout_s: float = 60.0
) -> list[bytes]:
    """The values of ``topic`` partition 0 from offset 0, read with confluent-kafka until
    ``expected`` arrived or ``timeout_s`` passed (the caller compares what came)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values
