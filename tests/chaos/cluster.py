"""The processes a chaos run drives: ``Node`` (one ``odradek serve``) and ``Cluster``.

A ``Node`` wraps tests/support's ``BrokerProcess`` and adds what faults need: it keeps
its port across restarts (clients reconnect to the address they bootstrapped from),
can be paused (SIGSTOP) and resumed (SIGCONT), and times each start until its
``odradek ready`` line (the recovery time after a crash). Every signal goes to the pid
this node started, never to a name.

A ``Cluster`` is the list of nodes a run started and stops: one combined
broker+controller (``single``), or three combined nodes of one KRaft quorum
(``quorum``: ``tests/support/kraft.py`` writes their properties files, formats their
dirs with one cluster id and fixes their ports). A quorum's nodes are launched
together and waited for together (a node is ready only once a majority runs), and
``leader()`` asks the running, unpaused nodes' controllers which node leads.
"""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.broker import BrokerProcess
from tests.support.kraft import Quorum, node_name


class Node:
    def __init__(
        self,
        name: str,
        data_dir: Path,
        extra_args: Sequence[str] = (),
        broker: BrokerProcess | None = None,
        listen: str = "127.0.0.1:0",
        node_id: int = 1,
    ) -> None:
        self.name = name
        self.node_id = node_id
        self.broker = broker or BrokerProcess(data_dir, extra_args)
        self.listen = listen
        self.paused = False
        self.starts = 0

    @property
    def data_dir(self) -> Path:
        return self.broker.data_dir

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def pid(self) -> int:
        return self.broker.pid

    def alive(self) -> bool:
        return self.broker.alive()

    def start(self) -> float:
        """Start (again, on the same port) and return the seconds until it was ready."""
        began = time.monotonic()
        self.launch()
        self.wait_ready()
        return time.monotonic() - began

    def launch(self) -> None:
        self.broker.launch(self.listen)

    def wait_ready(self) -> None:
        self.broker.wait_ready()
        self.listen = f"127.0.0.1:{self.broker.port}"
        self.starts += 1

    def start_and_crash(self, after_s: float) -> bool:
        """Start again and SIGKILL it ``after_s`` later, ready or not (a crash during
        recovery); returns whether it was ready first. The node is down afterwards."""
        # The timer only signals (Popen.send_signal skips a reaped process); reaping stays
        # with this thread, so no two threads wait() on it and kill a pid one reaped.
        timer = threading.Timer(after_s, self._signal, (signal.SIGKILL,))
        timer.start()
        try:
            self.broker.start(self.listen)
            ready = True
        except RuntimeError:  # killed before its ready line
            ready = False
        finally:
            timer.join()
        self.broker.kill()
        return ready

    def kill(self) -> None:
        """SIGKILL (a stopped process dies too)."""
        self.broker.kill()
        self.paused = False

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.paused:
            self.resume()
        return self.broker.stop()

    def pause(self) -> None:
        assert self.alive() and not self.paused
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT)
        self.paused = False

    def _signal(self, signum: int) -> None:
        """Signal the process this node started, unless it has already been reaped."""
        if self.broker.process is not None:
            self.broker.process.send_signal(signum)

    def log(self) -> str:
        return self.broker.log()


class Cluster:
    def __init__(self, nodes: Sequence[Node]) -> None:
        assert nodes
        self.nodes = list(nodes)

        self.quorum: Quorum | None = None

    @classmethod
    def single(cls, workdir: Path, extra_args: Sequence[str] = ()) -> Cluster:
        return cls([Node("broker-1", workdir / "broker-1", extra_args)])

    @classmethod
    def kraft(
        cls, workdir: Path, properties: dict[str, str], extra_args: Sequence[str] = ()
    ) -> Cluster:
        """Three combined nodes of one quorum, formatted, not yet started."""
        return cls.of_quorum(Quorum(workdir, properties=properties, serve_args=extra_args))

    @classmethod
    def of_quorum(cls, quorum: Quorum) -> Cluster:
        """The nodes of a formatted, not yet started ``Quorum``."""
        cluster = cls(
            [
                Node(node_name(n), quorum.data_dir(n), (), quorum.nodes[n], quorum.listen[n], n)
                for n in quorum.node_ids
            ]
        )
        cluster.quorum = quorum
        return cluster

    @property
    def bootstrap(self) -> str:
        return ",".join(node.listen for node in self.nodes)

    def pids(self) -> dict[str, int]:
        """name -> pid of every node process running now (paused ones included)."""
        return {node.name: node.pid for node in self.nodes if node.alive()}

    def start(self) -> None:
        self.start_nodes(self.nodes)

    def start_nodes(self, nodes: Sequence[Node]) -> float:
        """Launch every node of ``nodes``, then wait for each (a quorum's node is ready
        only once a majority runs); the seconds until the last was ready."""
        began = time.monotonic()
        for node in nodes:
            node.launch()
        for node in nodes:
            node.wait_ready()
        return time.monotonic() - began

    def leader(self) -> int | None:
        """The index in ``nodes`` of the active controller, as the running, unpaused
        nodes' controllers report it (None: no leader now, or not a quorum)."""
        if self.quorum is None:
            return None
        asked = [n.node_id for n in self.nodes if n.alive() and not n.paused]
        seen = self.quorum.leader(asked) if asked else None
        if seen is None:
            return None
        return next((i for i, n in enumerate(self.nodes) if n.node_id == seen[0]), None)

    def close(self) -> None:
        """Stop every node this cluster started (SIGTERM, then SIGKILL by pid)."""
        gc.collect()  # librdkafka handles in reference cycles close their sockets first
        for node in self.nodes:
            try:
                node.stop()
            except Exception:
                pass
            finally:
                node.kill()


@contextmanager
def running_cluster(cluster: Cluster) -> Iterator[Cluster]:
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()
