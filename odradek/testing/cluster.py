"""``EmbeddedCluster(n=3)``: a KRaft quorum of ``odradek serve`` processes for tests.

How this works and why: every node is combined (process.roles=broker,controller) and a
voter, as in ``examples/cluster``; the voters' controller listeners need fixed ports
(each node must know the others' before any starts), so they are picked free just
before start, while each client listener binds port 0 and is read back from its
node's ready line. The dirs are formatted in this process with one new cluster id
(what ``odradek storage format`` does, without an interpreter per node), then all
nodes are launched before any is waited for, since a node is ready only once a
majority runs. Nodes are child processes (_process.py), each stopped by pid; one can
be killed and started again (``kill_node``/``start_node``) to test failover.
``create_topic`` defaults to a replication factor of every node.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Final

from odradek.testing._process import READY_TIMEOUT_S, ServeProcess
from odradek.testing.embedded import HOST, load_config
from odradek.testing.topics import close_admin, create_topic

MAX_NODES: Final = 9  # a test quorum bigger than this is a mistake, not a need


class EmbeddedCluster:
    def __init__(
        self,
        n: int = 3,
        *,
        config: Mapping[str, str] | None = None,
        data_dir: str | Path | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        if not 1 <= n <= MAX_NODES:
            raise ValueError(f"EmbeddedCluster(n={n}): n must be 1 to {MAX_NODES}")
        self.n = n
        self.config = {str(k): str(v) for k, v in (config or {}).items()}
        self.root: Path | None = None if data_dir is None else Path(data_dir)
        self.ready_timeout_s = ready_timeout_s
        self.nodes: dict[int, ServeProcess] = {}
        self.addresses: dict[int, str] = {}
        self.bootstrap = ""
        self._cleanup: weakref.finalize[..., EmbeddedCluster] | None = None

    def start(self) -> EmbeddedCluster:
        if self.nodes:
            raise RuntimeError("this EmbeddedCluster is already started")
        from odradek.storage.meta_properties import format_dirs, random_uuid

        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="odradek-cluster-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        node_ids = range(1, self.n + 1)
        ports = _free_ports(self.n)
        voters = ",".join(
            f"{node}@{HOST}:{port}" for node, port in zip(node_ids, ports, strict=True)
        )
        cluster_id = random_uuid()
        try:
            for node, port in zip(node_ids, ports, strict=True):
                properties = {
                    "default.replication.factor": str(min(3, self.n)),
                    "offsets.topic.replication.factor": str(min(3, self.n)),
                    "transaction.state.log.replication.factor": str(min(3, self.n)),
                    "transaction.state.log.min.isr": str(min(2, self.n)),
                    **self.config,
                    "process.roles": "broker,controller",
                    "node.id": str(node),
                    "controller.quorum.voters": voters,
                    "controller.listener.names": "CONTROLLER",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listeners": f"PLAINTEXT://{HOST}:0,CONTROLLER://{HOST}:{port}",
                    "log.dirs": str(self.root / f"node{node}"),
                }
                config = load_config(properties)
                format_dirs(config.identity_dirs, cluster_id, node)
                args = [f"--override={key}={value}" for key, value in properties.items()]
                self.nodes[node] = ServeProcess(args, self.root / f"node{node}.log")
            for child in self.nodes.values():
                child.launch()
            for node, child in self.nodes.items():
                self.addresses[node] = child.wait_ready(self.ready_timeout_s)[0].split("://")[1]
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(self.addresses.values())
        return self

    def stop(self) -> None:
        """Stop every node by pid (SIGTERM, then SIGKILL) and remove a temporary root."""
        if self.bootstrap:
            close_admin(self.bootstrap)
        try:
            for child in self.nodes.values():
                child.stop()
        finally:
            self.nodes.clear()
            if self._cleanup is not None:
                self._cleanup()

    def kill_node(self, node: int) -> None:
        """SIGKILL one node (a crash); its data stays for ``start_node``."""
        self.nodes[node].kill()

    def start_node(self, node: int) -> None:
        """Start a stopped or killed node again; its client port is a new one."""
        child = self.nodes[node]
        child.launch()
        self.addresses[node] = child.wait_ready(self.ready_timeout_s)[0].split("://")[1]
        close_admin(self.bootstrap)  # create_topic's client bootstraps from the new list
        self.bootstrap = ",".join(self.addresses.values())

    def pids(self) -> dict[int, int]:
        return {node: child.pid for node, child in self.nodes.items() if child.alive()}

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> str:
        """Create ``name`` unless it exists; replicated on every node unless told."""
        if not self.bootstrap:
            raise RuntimeError("the cluster is not started")
        factor = self.n if replication_factor is None else replication_factor
        return create_topic(self.bootstrap, name, partitions, factor, config or {}, timeout_s)

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _free_ports(count: int) -> list[int]:
    """Ports free now (all held open together, so they differ); a small race remains
    until the nodes bind them, as with any fixed port."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
