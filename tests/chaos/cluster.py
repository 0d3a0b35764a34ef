"""The processes a chaos run drives: ``Node`` (one ``odradek serve``) and ``Cluster``.

A ``Node`` wraps tests/support's ``BrokerProcess`` and adds what faults need: it keeps
its port across restarts (clients reconnect to the address they bootstrapped from),
can be paused (SIGSTOP) and resumed (SIGCONT), and times each start until its
``odradek ready`` line (the recovery time after a crash). Every signal goes to the pid
this node started, never to a name.

A ``Cluster`` is the list of nodes a run started and stops: one node today (combined
broker+controller); the multi-broker and controller-quorum issues add nodes with
their own ids and quorum arguments, and faults already name the node they hit.
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


class Node:
    def __init__(self, name: str, data_dir: Path, extra_args: Sequence[str] = ()) -> None:
        self.name = name
        self.broker = BrokerProcess(data_dir, extra_args)
        self.listen = "127.0.0.1:0"
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
        self.broker.start(self.listen)
        self.listen = f"127.0.0.1:{self.broker.port}"
        self.starts += 1
        return time.monotonic() - began

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

    @classmethod
    def single(cls, workdir: Path, extra_args: Sequence[str] = ()) -> Cluster:
        return cls([Node("broker-1", workdir / "broker-1", extra_args)])

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def start(self) -> None:
        for node in self.nodes:
            node.start()

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
