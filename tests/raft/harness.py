"""A tiny in-memory cluster for the raft unit tests: instant delivery, one shared clock.

How this works and why: unit tests want to steer a quorum into one precise situation
(this node leads, that one has a stale tail) and then look at one exchange. Messages are
delivered in FIFO order with no delay; ``cut`` drops everything between two nodes; time
moves only when a test says so (``advance``) or when nothing else is left to do
(``settle`` jumps to the next deadline). Node-specific configs let a test decide who
times out first, so elections have a chosen winner.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from odradek.raft import (
    Inbound,
    LogEntry,
    MemoryElectionStore,
    MemoryRaftLog,
    MemorySnapshotStore,
    Outbound,
    RaftConfig,
    RaftNode,
)
from odradek.raft.election_store import ElectionState

QUICK = RaftConfig(election_timeout_ms=10, election_backoff_max_ms=10, request_timeout_ms=100)
SLOW = RaftConfig(election_timeout_ms=100_000, fetch_timeout_ms=200_000, request_timeout_ms=100)
# Steps one settle() may take before the test is declared stuck.
MAX_SETTLE_STEPS = 100_000


def entries(*epochs: int, start: int = 0) -> list[LogEntry]:
    return [
        LogEntry(offset=start + index, epoch=epoch, payload=f"e{epoch}-{start + index}".encode())
        for index, epoch in enumerate(epochs)
    ]


@dataclass
class Member:
    node_id: int
    config: RaftConfig
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    store: MemoryElectionStore = field(default_factory=MemoryElectionStore)
    snapshots: MemorySnapshotStore = field(default_factory=MemorySnapshotStore)
    node: RaftNode | None = None


class Cluster:
    def __init__(
        self,
        voters: list[int],
        observers: Sequence[int] = (),
        first: int | None = None,
        epoch: int = 0,
    ) -> None:
        self.voters = voters
        self.now = 0
        self.members: dict[int, Member] = {}
        for node_id in [*voters, *observers]:
            config = QUICK if node_id == first else SLOW
            member = Member(node_id, config)
            if epoch:
                member.store.write(ElectionState(epoch))
            self.members[node_id] = member
        self.queue: collections.deque[tuple[int, Outbound]] = collections.deque()
        self.cut_links: set[frozenset[int]] = set()
        self.sent: list[tuple[int, Outbound]] = []

    def start(self) -> Cluster:
        for member in self.members.values():
            self.restart(member.node_id)
        return self

    def restart(self, node_id: int) -> RaftNode:
        member = self.members[node_id]
        member.node = RaftNode(
            node_id,
            self.voters,
            member.log,
            member.store,
            member.snapshots,
            member.config,
            random.Random(node_id),
            self.now,
        )
        return member.node

    def node(self, node_id: int) -> RaftNode:
        node = self.members[node_id].node
        assert node is not None
        return node

    def cut(self, a: int, b: int) -> None:
        self.cut_links.add(frozenset((a, b)))

    def heal(self) -> None:
        self.cut_links.clear()

    def enqueue(self, source_id: int, outbound: list[Outbound]) -> None:
        for message in outbound:
            self.sent.append((source_id, message))
            if frozenset((source_id, message.destination_id)) not in self.cut_links:
                self.queue.append((source_id, message))

    def deliver_all(self) -> None:
        steps = 0
        while self.queue:
            steps += 1
            assert steps < MAX_SETTLE_STEPS, "messages never stop"
            source_id, message = self.queue.popleft()
            member = self.members.get(message.destination_id)
            if member is None or member.node is None:
                continue
            inbound = Inbound(source_id, message.correlation_id, message.message)
            self.enqueue(message.destination_id, member.node.handle(inbound, self.now))

    def tick_all(self) -> None:
        for member in self.members.values():
            if member.node is not None:
                self.enqueue(member.node_id, member.node.tick(self.now))

    def advance(self, ms: int) -> None:
        """Let ``ms`` pass, ticking every node at each deadline on the way."""
        target = self.now + ms
        for _ in range(MAX_SETTLE_STEPS):
            self.deliver_all()
            deadlines = [m.node.next_deadline_ms() for m in self.members.values() if m.node]
            upcoming = min(deadlines, default=target)
            if upcoming > target:
                break
            self.now = max(self.now, upcoming)
            self.tick_all()
        else:
            raise AssertionError("advance() never settled")
        self.now = target
        self.tick_all()
        self.deliver_all()

    def leader(self) -> RaftNode | None:
        leaders = [m.node for m in self.members.values() if m.node and m.node.is_leader]
        assert len(leaders) <= 1
        return leaders[0] if leaders else None
