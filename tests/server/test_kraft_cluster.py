"""Three combined KRaft nodes as real ``odradek serve`` processes.

Each node gets an ``examples/cluster/``-style properties file (process.roles=broker,
controller, controller.quorum.voters naming three fixed free ports, a CONTROLLER
listener on its own one), its dirs are formatted with one cluster id (``odradek storage
format``), and the three are launched together (a node is ready only once a majority
elected a leader and its loader caught up). ``odradek metadata-quorum
--bootstrap-controller`` then shows one leader and three voters; kill -9 of the leader
(by pid) gives a new leader; SIGTERM of a leader hands leadership over at once
(EndQuorumEpoch), well before the followers' fetch timeout would.

Every broker forwards metadata changes to the active controller over the controller
listeners, so CreateTopics on a follower's broker listener succeeds (the forwarding
itself, with real admin clients, is test_controller_forwarding.py's). Every process
is stopped by the test, by pid.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient, create_topic

NODE_IDS = (1, 2, 3)
# The followers wait this long without a leader before electing: SIGTERM must beat it.
FETCH_TIMEOUT_MS = 4000
ELECTION_TIMEOUT_MS = 500


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def odradek(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout
    )


def write_node(tmp_path: Path, node_id: int, ports: dict[int, int]) -> tuple[Path, Path]:
    data_dir = tmp_path / f"node{node_id}"
    voters = ",".join(f"{n}@127.0.0.1:{port}" for n, port in ports.items())
    properties = tmp_path / f"node{node_id}.properties"
    properties.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node_id}",
                f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{ports[node_id]}",
                "inter.broker.listener.name=PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                f"log.dirs={data_dir}",
                f"controller.quorum.election.timeout.ms={ELECTION_TIMEOUT_MS}",
                f"controller.quorum.fetch.timeout.ms={FETCH_TIMEOUT_MS}",
                "",
            ]
        )
    )
    return properties, data_dir


@contextlib.contextmanager
def cluster(tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    ports = dict(zip(NODE_IDS, free_ports(len(NODE_IDS)), strict=True))
    cluster_id = odradek("storage", "random-uuid").stdout.strip()
    nodes = {}
    for node_id in NODE_IDS:
        properties, data_dir = write_node(tmp_path, node_id, ports)
        formatted = odradek("storage", "format", "-t", cluster_id, "-c", str(properties))
        assert formatted.returncode == 0, formatted.stderr
        nodes[node_id] = BrokerProcess(data_dir, ["--config", str(properties)])
    try:
        for node in nodes.values():
            node.launch()
        for node in nodes.values():
            node.wait_ready()
        yield nodes
    finally:
        for node in nodes.values():
            with contextlib.suppress(Exception):
                node.stop()
            node.kill()


def quorum_status(node: BrokerProcess) -> dict[str, str] | None:
    """metadata-quorum describe --status through ``node``'s controller listener."""
    result = odradek(
        "metadata-quorum",
        "--bootstrap-controller",
        node.urls["CONTROLLER"],
        "describe",
        "--status",
        timeout=20,
    )
    if result.returncode != 0:
        return None
    fields = {}
    for line in result.stdout.splitlines():
        label, _, value = line.partition(":")
        fields[label] = value.strip()
    return fields


def wait_for_leader(
    nodes: list[BrokerProcess], timeout_s: float, not_in: frozenset[int] = frozenset()
) -> tuple[int, int]:
    """(leader id, epoch) once a node outside ``not_in`` leads, asked of ``nodes``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        for node in nodes:
            last = quorum_status(node)
            if last is not None and last.get("LeaderId", "").isdigit():
                leader = int(last["LeaderId"])
                if leader not in not_in:
                    return leader, int(last["LeaderEpoch"])
        time.sleep(0.1)
    raise AssertionError(f"no new leader within {timeout_s} s: {last}")


def test_three_nodes_elect_and_fail_over(tmp_path: Path) -> None:
    with cluster(tmp_path) as nodes:
        status = quorum_status(nodes[1])
        assert status is not None
        leader, epoch = int(status["LeaderId"]), int(status["LeaderEpoch"])
        assert leader in NODE_IDS
        assert [v["id"] for v in json.loads(status["CurrentVoters"])] == list(NODE_IDS)
        # Every node reports the same leader.
        for node in nodes.values():
            seen = quorum_status(node)
            assert seen is not None and int(seen["LeaderId"]) == leader

        # A follower's broker forwards to the active controller (test_controller_forwarding.py
        # covers the admin APIs with real clients).
        follower = next(n for i, n in nodes.items() if i != leader)
        with WireClient(follower.bootstrap) as client:
            assert create_topic(client, "on-a-follower").error_code == ErrorCode.none
        with WireClient(nodes[leader].bootstrap) as client:
            assert create_topic(client, "on-the-leader").error_code == ErrorCode.none

        # kill -9 of the leader: the other two elect a new one.
        nodes[leader].kill()
        survivors = [n for i, n in nodes.items() if i != leader]
        new_leader, new_epoch = wait_for_leader(survivors, 30.0, not_in=frozenset({leader}))
        assert new_epoch > epoch
        # The killed node comes back as a follower.
        nodes[leader].start()
        status = quorum_status(nodes[leader])
        assert status is not None and int(status["LeaderId"]) == new_leader

        # SIGTERM of the leader: it resigns and the others elect at once, well before
        # their fetch timeout.
        begun = time.monotonic()
        assert nodes[new_leader].stop() == 0
        others = [n for i, n in nodes.items() if i != new_leader]
        third, third_epoch = wait_for_leader(others, 30.0, not_in=frozenset({new_leader}))
        took_s = time.monotonic() - begun
        assert third_epoch > new_epoch
        assert took_s < FETCH_TIMEOUT_MS / 1000, f"the hand-over took {took_s:.1f} s"

        # The new active controller writes, on top of what the first one committed.
        deadline = time.monotonic() + 10
        with WireClient(nodes[third].bootstrap) as client:
            while (error := create_topic(client, "after-failover").error_code) != ErrorCode.none:
                assert error == ErrorCode.not_controller, error
                assert time.monotonic() < deadline, "the new leader never accepted a write"
                time.sleep(0.1)
            assert create_topic(client, "on-the-leader").error_code == (
                ErrorCode.topic_already_exists
            )


def test_a_node_waiting_for_its_quorum_stops_on_sigterm(tmp_path: Path) -> None:
    ports = dict(zip(NODE_IDS, free_ports(len(NODE_IDS)), strict=True))
    properties, data_dir = write_node(tmp_path, 1, ports)
    cluster_id = odradek("storage", "random-uuid").stdout.strip()
    assert odradek("storage", "format", "-t", cluster_id, "-c", str(properties)).returncode == 0
    node = BrokerProcess(data_dir, ["--config", str(properties)]).launch()
    try:
        # Alone: no majority, so never ready. Wait until it is waiting (its signal
        # handlers are installed by then; a loaded machine may take seconds to get there).
        deadline = time.monotonic() + 60
        while "odradek.raft: node 1 starts as" not in node.log():
            assert time.monotonic() < deadline and node.alive(), node.log()
            time.sleep(0.1)
        time.sleep(1)
        assert node.alive()
        begun = time.monotonic()
        assert node.stop() == 1
        assert time.monotonic() - begun < 5
        assert "odradek serve: stopped before it was ready" in node.log()
        assert "Traceback" not in node.log()
    finally:
        node.kill()
