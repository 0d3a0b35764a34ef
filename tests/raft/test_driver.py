"""RaftDriver: three controllers in one process over real localhost sockets.

Each node has its own SocketServer (port 0) with a CONTROLLER-plane Dispatcher whose
services hold its driver, a FileElectionStore and a FileSnapshotStore in a tmp dir, and
a MemoryRaftLog: the disk RaftLog lands from another branch, and a restarted node here
reuses its MemoryRaftLog object, standing in for the disk that survived. Timeouts are
small (election 300 ms, fetch 600 ms) so failovers take well under a second or two.
Every server and driver the tests start is stopped by them.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client._core.connection import BrokerAddress, BrokerConnection, request_entity
from odradek.network.server import SocketServer
from odradek.raft import (
    CommitEvent,
    CommittedEntries,
    FileElectionStore,
    FileSnapshotStore,
    MemoryRaftLog,
    RaftConfig,
    SnapshotLoaded,
    wire,
    wire_describe_quorum,
)
from odradek.raft.driver import NotControllerError, RaftDriver
from odradek.raft.messages import FetchRequest
from odradek.records.codec import encode_batch, new_records
from odradek.server.config import QuorumVoter
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import Plane

CLUSTER_ID = "raft-driver-test-cluster"
CONFIG = RaftConfig(
    election_timeout_ms=300,
    fetch_timeout_ms=600,
    election_backoff_max_ms=300,
    retry_backoff_ms=20,
    request_timeout_ms=500,
    append_linger_ms=5,
)
NODE_IDS = (1, 2, 3)


@dataclass
class Node:
    node_id: int
    directory: Path
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    services: Any = field(default_factory=SimpleNamespace)
    server: SocketServer | None = None
    driver: RaftDriver | None = None
    port: int = 0
    events: list[CommitEvent] = field(default_factory=list)

    def committed(self) -> list[Any]:
        return [e for ev in self.events if isinstance(ev, CommittedEntries) for e in ev.entries]

    def entry_at(self, offset: int) -> Any:
        """The committed entry holding ``offset`` (an entry may span several), or None."""
        for entry in self.committed():
            if entry.offset <= offset < entry.next_offset:
                return entry
        return None

    def has(self, *offsets: int) -> bool:
        return all(self.entry_at(offset) is not None for offset in offsets)


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.nodes = {i: Node(i, tmp_path / f"node-{i}") for i in NODE_IDS}
        self.voters: list[QuorumVoter] = []

    async def bind(self, node: Node) -> None:
        dispatcher = Dispatcher(node.services, Plane.CONTROLLER)
        node.server = SocketServer(dispatcher, max_frame_bytes=1 << 24, idle_timeout_ms=60_000)
        node.port = node.server.bind("CONTROLLER", "127.0.0.1", node.port).port

    def start_driver(self, node: Node) -> None:
        node.directory.mkdir(exist_ok=True)
        node.events = []
        voter_ids = frozenset(NODE_IDS)
        node.driver = RaftDriver(
            node.node_id,
            self.voters,
            node.log,
            FileElectionStore(node.directory, voter_ids, CLUSTER_ID),
            FileSnapshotStore(node.directory),
            CONFIG,
            cluster_id=CLUSTER_ID,
            listener=node.events.append,
        )
        node.services.raft = node.driver
        assert node.server is not None
        node.server.start()
        node.driver.start()

    async def start(self) -> None:
        for node in self.nodes.values():
            await self.bind(node)
        self.voters = [QuorumVoter(n.node_id, "127.0.0.1", n.port) for n in self.nodes.values()]
        for node in self.nodes.values():
            self.start_driver(node)

    async def stop_node(self, node: Node, resign: bool) -> None:
        if node.driver is not None:
            await node.driver.shutdown(resign=resign)
            node.driver = None
        if node.server is not None:
            await node.server.stop(grace_s=0.1)
            node.server = None

    async def restart(self, node: Node) -> None:
        await self.bind(node)  # the same port: it is the node's address in the voters
        self.start_driver(node)

    async def stop(self) -> None:
        for node in self.nodes.values():
            await self.stop_node(node, resign=False)

    def running(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.driver is not None]

    def leaders(self) -> list[Node]:
        return [n for n in self.running() if n.driver is not None and n.driver.is_leader]

    async def wait_for_leader(self, timeout_s: float, excluding: int | None = None) -> Node:
        async def one_leader() -> Node | None:
            leaders = [n for n in self.leaders() if n.node_id != excluding]
            return leaders[0] if len(leaders) == 1 else None

        return await wait_until(one_leader, timeout_s, "a single leader")


async def wait_until(
    probe: Callable[[], Awaitable[Any]], timeout_s: float, what: str, step_s: float = 0.01
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        await asyncio.sleep(step_s)


def batch(*values: bytes) -> bytes:
    return encode_batch(new_records(list(values), timestamp=1_700_000_000_000))


def run(test: Callable[[Cluster], Awaitable[None]], tmp_path: Path) -> None:
    async def main() -> None:
        cluster = Cluster(tmp_path)
        await cluster.start()
        try:
            await test(cluster)
        finally:
            await cluster.stop()

    asyncio.run(main())


def test_elect_append_commit_everywhere_then_resign_hands_over_fast(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        assert leader.driver is not None
        followers = [n for n in cluster.running() if n is not leader]
        for follower in followers:
            assert follower.driver is not None
            with pytest.raises(NotControllerError):
                await follower.driver.append(batch(b"refused"))

        offset = await leader.driver.append(batch(b"a", b"b"))  # one entry of two offsets
        # Resolved only once the high watermark passed it: a majority holds it.
        holders = [n for n in cluster.nodes.values() if n.log.end_offset > offset]
        assert len(holders) >= 2
        # The leader's listener had it before append returned.
        assert leader.has(offset)

        async def everyone_has_it() -> bool:
            return all(n.has(offset) for n in cluster.running())

        await wait_until(everyone_has_it, 3.0, "commit on every node")
        entries = [n.entry_at(offset) for n in cluster.running()]
        assert len({e.payload for e in entries}) == 1  # the same stamped bytes everywhere
        assert all(not e.control for e in entries)
        # The LeaderChange control entry went over the wire too, unwrapped the same.
        control = [[e.payload for e in n.committed() if e.control] for n in cluster.running()]
        assert all(c == control[0] and c for c in control)

        started = time.monotonic()
        old_id = leader.node_id
        await cluster.stop_node(leader, resign=True)
        successor = await cluster.wait_for_leader(3.0, excluding=old_id)
        elapsed_s = time.monotonic() - started
        # EndQuorumEpoch: the preferred successor stands at once instead of waiting out
        # the fetch timeout; 1 s leaves room for a loaded CI machine.
        assert elapsed_s < 1.0, elapsed_s
        assert successor.driver is not None
        second = await successor.driver.append(batch(b"after resign"))
        assert second > offset

    run(scenario, tmp_path)


def test_a_crashed_leader_is_replaced_after_the_fetch_timeout_and_rejoins(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        assert leader.driver is not None
        first = await leader.driver.append(batch(b"before crash"))

        started = time.monotonic()
        old = leader
        await cluster.stop_node(old, resign=False)  # no EndQuorumEpoch: a crash
        successor = await cluster.wait_for_leader(5.0, excluding=old.node_id)
        elapsed_s = time.monotonic() - started
        assert elapsed_s >= CONFIG.fetch_timeout_ms / 1000 * 0.5, elapsed_s
        assert successor.driver is not None
        second = await successor.driver.append(batch(b"while it was down"))

        await cluster.restart(old)  # a new driver on the same stores and log
        assert old.driver is not None

        async def rejoined() -> bool:
            driver = old.driver
            assert driver is not None
            return driver.leader_id == successor.node_id and old.has(first, second)

        await wait_until(rejoined, 5.0, "the restarted node rejoining")
        third = await successor.driver.append(batch(b"after rejoin"))

        async def has_third() -> bool:
            return old.has(third)

        await wait_until(has_third, 3.0, "the restarted node fetching new entries")

    run(scenario, tmp_path)


def test_bad_quorum_requests_get_kafkas_errors_not_a_traceback(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.wait_for_leader(5.0)
        node = cluster.nodes[1]
        versions = dict(wire.VERSIONS)
        versions[18] = (0, 3)
        connection = BrokerConnection(
            BrokerAddress(node.node_id, "127.0.0.1", node.port),
            client_id="bad-peer",
            request_timeout_s=5.0,
            client_versions=versions,
        )
        await connection.connect()
        try:
            assert connection.version_for(wire.VOTE_KEY) == 2
            vote = request_entity(
                wire.VOTE_KEY,
                2,
                cluster_id="another-cluster",
                voter_id=1,
                topics=(
                    request_entity(
                        wire.VOTE_KEY,
                        2,
                        "TopicData",
                        topic_name=wire.METADATA_TOPIC,
                        partitions=(
                            request_entity(
                                wire.VOTE_KEY,
                                2,
                                "PartitionData",
                                partition_index=0,
                                replica_epoch=99,
                                replica_id=2,
                                replica_directory_id=None,
                                voter_directory_id=None,
                                last_offset_epoch=0,
                                last_offset=0,
                                pre_vote=False,
                            ),
                        ),
                    ),
                ),
            )
            response = await connection.send(vote)
            assert response.error_code == ErrorCode.inconsistent_cluster_id
            assert node.driver is not None and node.driver.epoch < 99  # not moved by it

            fetch = request_entity(
                wire.FETCH_KEY,
                17,
                cluster_id=CLUSTER_ID,
                max_wait=datetime.timedelta(0),
                min_bytes=0,
                topics=(
                    request_entity(
                        wire.FETCH_KEY,
                        17,
                        "FetchTopic",
                        topic_id=uuid.uuid4(),
                        partitions=(
                            request_entity(
                                wire.FETCH_KEY,
                                17,
                                "FetchPartition",
                                partition=0,
                                fetch_offset=0,
                                partition_max_bytes=1024,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
            response = await connection.send(fetch)
            # Kafka's KafkaRaftClient answers a topic other than __cluster_metadata with
            # a top-level INVALID_REQUEST; the connection stays up.
            assert response.error_code == ErrorCode.invalid_request
            assert response.responses == ()
            describe = wire_describe_quorum.describe_quorum_request(2)
            response = await connection.send(describe)
            (partition,) = response.topics[0].partitions
            assert partition.error_code in (ErrorCode.none, ErrorCode.not_leader_or_follower)
        finally:
            await connection.close()

    run(scenario, tmp_path)


def test_describe_quorum_on_the_leader_lists_the_voters(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        assert leader.driver is not None
        offset = await leader.driver.append(batch(b"x"))
        versions = dict(wire.VERSIONS)
        versions[18] = (0, 3)
        connection = BrokerConnection(
            BrokerAddress(leader.node_id, "127.0.0.1", leader.port),
            client_id="admin",
            request_timeout_s=5.0,
            client_versions=versions,
        )
        await connection.connect()
        try:
            response = await connection.send(wire_describe_quorum.describe_quorum_request(2))
        finally:
            await connection.close()
        (partition,) = response.topics[0].partitions
        assert partition.error_code == ErrorCode.none
        assert partition.leader_id == leader.node_id
        assert partition.high_watermark > offset
        assert sorted(v.replica_id for v in partition.current_voters) == list(NODE_IDS)
        now_ms = time.time() * 1000
        own = next(v for v in partition.current_voters if v.replica_id == leader.node_id)
        assert abs(own.last_fetch_timestamp - now_ms) < 60_000  # wall clock, not monotonic

    run(scenario, tmp_path)


def test_a_node_that_lost_its_log_catches_up_from_a_snapshot(tmp_path: Path) -> None:
    """FetchSnapshot over the wire: the leader trimmed its log into a snapshot while a
    follower was down; the follower comes back with an empty log, copies the snapshot,
    hands it to its listener, then fetches what follows."""

    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        assert leader.driver is not None
        lagging = next(n for n in cluster.running() if n is not leader)
        await cluster.stop_node(lagging, resign=False)
        last = 0
        for value in (b"one", b"two", b"three"):
            last = await leader.driver.append(batch(value))
        snapshot_payload = b"the state machine's image"
        snapshot_id = leader.driver.create_snapshot(last + 1, snapshot_payload)
        assert leader.log.start_offset == last + 1

        lagging.log = MemoryRaftLog()  # its disk was lost
        await cluster.restart(lagging)

        async def loaded() -> bool:
            return any(
                isinstance(e, SnapshotLoaded) and e.snapshot_id == snapshot_id
                for e in lagging.events
            )

        await wait_until(loaded, 5.0, "the snapshot on the restarted node")
        loads = [e for e in lagging.events if isinstance(e, SnapshotLoaded)]
        assert loads[-1].payload == snapshot_payload
        after = await leader.driver.append(batch(b"after the snapshot"))

        async def fetched_after() -> bool:
            return lagging.has(after)

        await wait_until(fetched_after, 3.0, "entries after the snapshot")

    run(scenario, tmp_path)


def test_an_idle_quorum_long_polls_over_sockets(tmp_path: Path) -> None:
    """Over real connections: the leader parks its followers' fetches, so an idle
    quorum exchanges a few fetches a second (max wait here: half the 500 ms request
    timeout), not one per 20 ms; and a commit still reaches the followers at once."""

    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        assert leader.driver is not None
        offset = await leader.driver.append(batch(b"warm-up"))

        async def everyone_has(at: int) -> bool:
            return all(n.has(at) for n in cluster.running())

        await wait_until(lambda: everyone_has(offset), 3.0, "the first commit everywhere")
        fetches: list[float] = []
        real = leader.driver.handle_request

        async def counting(source_id: int, message: Any) -> Any:
            if isinstance(message, FetchRequest):
                fetches.append(time.monotonic())
            return await real(source_id, message)

        leader.services.raft = SimpleNamespace(
            handle_request=counting,
            stopped=False,
            describe_quorum=leader.driver.describe_quorum,
            voters=leader.driver.voters,
        )
        await asyncio.sleep(2.0)
        # Two followers, at most 4 fetches a second each when idle (more under load is
        # impossible: a parked fetch holds its follower). Polling at 20 ms made ~200.
        assert len(fetches) <= 24, len(fetches)
        assert leader.driver.is_leader
        second = await leader.driver.append(batch(b"after idle"))
        await wait_until(lambda: everyone_has(second), 3.0, "the commit everywhere")
        leader.services.raft = leader.driver

    run(scenario, tmp_path)


def test_a_deadline_the_step_does_not_move_still_lets_the_loop_run() -> None:
    """The driver sleeps until the node's next deadline; one already past (a timer bug:
    an idle lone leader's once sat an hour after its election) made it step again
    without ever yielding, and the broker on that loop froze — no requests, no
    signals. It now yields once per step whatever the deadline says."""
    from odradek.raft import MemoryElectionStore, MemorySnapshotStore

    async def go() -> int:
        driver = RaftDriver(
            1,
            [QuorumVoter(1, "127.0.0.1", 1)],
            MemoryRaftLog(),
            MemoryElectionStore(),
            MemorySnapshotStore(),
            RaftConfig(),
            cluster_id=None,
        )
        steps = 0
        tick = driver.node.tick

        def counted(now_ms: int) -> Any:
            nonlocal steps
            steps += 1
            if steps > 200_000:  # bounded, so the old behaviour fails instead of hanging
                raise RuntimeError("the driver never yielded")
            return tick(now_ms)

        driver.node.tick = counted  # type: ignore[method-assign]
        driver.node.next_deadline_ms = lambda: 0  # type: ignore[method-assign]
        driver.start()
        await asyncio.sleep(0.05)  # returns only if the driver lets the loop run
        seen = steps
        await driver.shutdown(resign=False)
        return seen

    assert asyncio.run(go()) < 200_000
