"""The safety and liveness checks of the KRaft simulation, and the global truth they use.

How this works and why: the checker keeps what the whole cluster has committed so far
(offset → first offset, epoch and payload of the entry holding it), the digest of the
state-machine input at every entry boundary, the leader of every epoch and each
leader's last high watermark. After every simulation step it compares each node
against that record; all comparisons are incremental (a node's newly committed
entries, the one offset at the top of the committed prefix), except the full log check
of each new leader, which happens once per election.
"""

from __future__ import annotations

import collections

from odradek.raft import CommittedEntries, LogEntry, SnapshotLoaded
from tests.raft.model import INITIAL_DIGEST, Scenario, SimNode, SimulationFailure, entry_digest


class InvariantChecks:
    scenario: Scenario
    nodes: dict[int, SimNode]
    voter_ids: list[int]
    now: float
    trace: collections.deque[str]
    calm_payloads: set[bytes]

    def fail(self, reason: str) -> SimulationFailure:
        raise NotImplementedError

    def init_truth(self) -> None:
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        # offset -> (first offset, epoch, payload) of the entry that holds it
        self.committed: dict[int, tuple[int, int, bytes]] = {}
        self.committed_end = 0
        # offset -> the lowest epoch any node was in when it saw the offset committed: an
        # upper bound of the epoch that committed it. Raft promises the entry to every
        # leader of a *later* epoch only (a candidate of an older epoch, paused with its
        # votes, may still win that older epoch without it, and can commit nothing).
        self.commit_epochs: dict[int, int] = {}
        self.digests: dict[int, bytes] = {0: INITIAL_DIGEST}  # offset -> digest before it
        self.leader_high_watermarks: dict[tuple[int, int], int] = {}
        self.leaders_checked: set[tuple[int, int]] = set()
        self.elections = 0

    def apply_committed(self, node: SimNode) -> None:
        """Feed the node's committed entries to its state machine (a digest chain)."""
        raft = node.raft
        if raft is None:
            return
        for event in raft.poll_committed():
            if isinstance(event, SnapshotLoaded):
                end_text, digest_hex = event.payload.decode().split(":")
                end = int(end_text)
                digest = bytes.fromhex(digest_hex)
                if end != event.snapshot_id.end_offset:
                    raise self.fail(f"snapshot {event.snapshot_id} holds state at {end}")
                if self.digests.get(end, digest) != digest:
                    raise self.fail(
                        f"node {node.node_id} loaded a snapshot that disagrees at {end}"
                    )
                node.applied_offset, node.digest = end, digest
                continue
            assert isinstance(event, CommittedEntries)
            for entry in event.entries:
                if entry.offset != node.applied_offset:
                    raise self.fail(
                        f"node {node.node_id} applied {entry.offset}, expected "
                        f"{node.applied_offset}"
                    )
                node.digest = entry_digest(node.digest, entry.epoch, entry.payload)
                node.applied_offset = entry.next_offset
                known = self.digests.setdefault(node.applied_offset, node.digest)
                if known != node.digest:
                    raise self.fail(f"node {node.node_id} state diverged at {entry.offset}")

    def check_invariants(self) -> None:
        for node in self.nodes.values():
            raft = node.raft
            if raft is None:
                continue
            epoch = raft.epoch
            if epoch < node.max_epoch:
                raise self.fail(f"node {node.node_id} epoch went back {node.max_epoch} -> {epoch}")
            node.max_epoch = epoch
            if raft.is_leader:
                self.check_leader(node)
            self.check_committed(node)
        self.check_majority_holds_committed()

    def check_leader(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        epoch = raft.epoch
        known = self.leaders.setdefault(epoch, node.node_id)
        if known != node.node_id:
            raise self.fail(f"two leaders in epoch {epoch}: {known} and {node.node_id}")
        key = (epoch, node.node_id)
        if key not in self.leaders_checked:
            self.leaders_checked.add(key)
            self.elections += 1
            self.trace.append(f"{self.now:10.3f} leader {node.node_id} epoch {epoch}")
            log = node.log
            for offset in range(log.start_offset, self.committed_end):
                if self.commit_epochs.get(offset, -1) >= epoch:
                    continue
                entry = log.entry_at(offset) if offset < log.end_offset else None
                if entry is None or _value(entry) != self.committed[offset]:
                    raise self.fail(
                        f"new leader {node.node_id} (epoch {epoch}) lacks committed offset {offset}"
                    )
        previous = self.leader_high_watermarks.get(key, 0)
        if raft.high_watermark < previous:
            raise self.fail(
                f"leader {node.node_id} HW went back {previous} -> {raft.high_watermark}"
            )
        self.leader_high_watermarks[key] = raft.high_watermark

    def check_committed(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        log = node.log
        high_watermark = raft.high_watermark
        if high_watermark > log.end_offset:
            raise self.fail(f"node {node.node_id} HW {high_watermark} > log end {log.end_offset}")
        if high_watermark < node.verified_offset:
            node.verified_offset = high_watermark
        for offset in range(max(node.verified_offset, log.start_offset), high_watermark):
            entry = log.entry_at(offset)
            value = _value(entry)
            known = self.committed.setdefault(offset, value)
            self.commit_epochs[offset] = min(self.commit_epochs.get(offset, raft.epoch), raft.epoch)
            if known != value:
                raise self.fail(
                    f"node {node.node_id} committed {value} at {offset}, others committed {known}"
                )
        self.committed_end = max(self.committed_end, high_watermark)
        node.verified_offset = high_watermark
        last = high_watermark - 1
        if last >= log.start_offset:
            entry = log.entry_at(last)
            if _value(entry) != self.committed.get(last):
                raise self.fail(f"node {node.node_id} changed committed offset {last}")

    def check_majority_holds_committed(self) -> None:
        end = self.committed_end
        if end == 0:
            return
        last = end - 1
        epoch = self.committed[last][1] if last in self.committed else None
        holders = 0
        for voter_id in self.voter_ids:
            log = self.nodes[voter_id].log
            if last < log.start_offset or (
                log.flushed_offset >= end and log.entry_at(last).epoch == epoch
            ):
                holders += 1
        if holders <= len(self.voter_ids) // 2:
            raise self.fail(f"committed offset {last} is on only {holders} voters' flushed logs")

    def check_liveness(self) -> None:
        alive = [n for n in self.nodes.values() if n.raft is not None]
        leaders = [n for n in alive if n.raft is not None and n.raft.is_leader]
        if len(leaders) != 1:
            raise self.fail(
                f"no single leader after {self.scenario.calm_ms} ms of calm: "
                f"{[n.node_id for n in leaders]}"
            )
        leader = leaders[0]
        assert leader.raft is not None
        for node in alive:
            assert node.raft is not None
            if node.raft.epoch != leader.raft.epoch or (
                node is not leader and node.raft.leader_id != leader.node_id
            ):
                raise self.fail(
                    f"node {node.node_id} ({node.raft.role_name}, epoch {node.raft.epoch}) "
                    f"does not follow leader {leader.node_id} (epoch {leader.raft.epoch})"
                )
        committed_calm = [
            offset
            for offset, (_, _, payload) in self.committed.items()
            if payload in self.calm_payloads
        ]
        if not committed_calm:
            raise self.fail("nothing appended in the calm phase was committed")
        first = min(committed_calm)
        for node in alive:
            assert node.raft is not None
            if node.raft.high_watermark <= first:
                raise self.fail(f"node {node.node_id} did not learn the calm commits")


def _value(entry: LogEntry) -> tuple[int, int, bytes]:
    """What must agree about a committed offset: the entry holding it (its first offset,
    so entry boundaries agree too), its epoch and its payload."""
    return entry.offset, entry.epoch, entry.payload
