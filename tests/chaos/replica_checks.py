"""Checkers for a replicated run: what Jepsen found in Kafka (2013) and Redpanda (2022).

Pure functions from a ``ReplicationHistory`` to violations, in ``checks.py``'s style
(and reusing its checks for the final log, commits and high watermarks). On top of
the single-node properties (``lost``, ``duplicate``, ``unreadable``, ``gap``,
``commit_backwards``, ``commit_lost``, ``hw_backwards``), a cluster with failover must
also keep:

- ``read_diverged``: one offset held different records in different reads (two reads
  by the group, or a read by the group and the final log): a consumer saw a record
  that a leader change later replaced (seeds/000 "未提交数据不一致");
- ``read_uncommitted``: the group was handed an offset the final log does not reach:
  it read above a high watermark that then went back, state that was never committed;
- ``phantom_read``: a record read (by the group or in the final log) whose seq the
  producer never sent, or whose delivery failed with an error that says it was not
  written (acknowledged or in-doubt records may be read; nothing else);
- ``replica_diverged``: after healing, two replicas of a partition hold different
  bytes at the same offset, or batches at different offsets (followers must append
  the leader's batches byte for byte: KIP-101 truncation, not overwriting);
- ``replica_behind``: after healing, a replica's log ends before another's, or before
  the high watermark clients were given: it never caught up.

A replica's log is a list of ``BatchDigest`` (base offset, last offset, leader epoch
and a hash of the batch's bytes), read from its segment files after the nodes stopped,
so three replicas of a two-minute run compare in a few megabytes of memory.
``replication_active`` tells whether followers fetched at all (some batch is on two
replicas byte for byte): until partition replication exists it is False, and a test
reports that rather than the replica checks' certain failure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.chaos.checks import (
    Report,
    Violation,
    check_acked_present,
    check_commits_kept,
    check_contiguous,
    check_monotonic,
    check_no_duplicates,
    check_readable,
)
from tests.chaos.history import SEQ_UNREADABLE, PartitionLog, Sample

REPLICA_KINDS = (
    "read_diverged",
    "read_uncommitted",
    "phantom_read",
    "replica_diverged",
    "replica_behind",
)

# Delivery errors that mean the record was not written (the broker refused it before
# appending); any other failure (a timeout, a lost connection) leaves it in doubt.
NOT_WRITTEN = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",
        "INVALID_RECORD",
        "RECORD_LIST_TOO_LARGE",
        "CORRUPT_MESSAGE",
        "TOPIC_AUTHORIZATION_FAILED",
        "UNKNOWN_TOPIC_OR_PART",
        "INVALID_REQUIRED_ACKS",
        "NOT_ENOUGH_REPLICAS",
        "_MSG_TIMED_OUT_QUEUE",
    }
)


@dataclass(frozen=True)
class BatchDigest:
    base_offset: int
    last_offset: int
    leader_epoch: int
    digest: bytes


@dataclass
class ReplicationHistory:
    """What a replicated run saw:

    - ``acked``: seq -> (partition, offset) of every acknowledged record;
    - ``failed``: seq -> error name of every record whose delivery failed;
    - ``sent``: how many seqs were sent (0 .. sent - 1);
    - ``log``: the topic as read back after healing;
    - ``reads``: partition -> offset -> seq the consumer group was handed, and
      ``read_conflicts`` (partition, offset, seq, other seq) between its reads;
    - ``committed``/``commit_acks``/``final_committed``/``high_watermarks``: as in
      ``History``;
    - ``replicas``: partition -> node -> that replica's batches, after the nodes stopped.
    """

    acked: Mapping[int, tuple[int, int]]
    failed: Mapping[int, str]
    sent: int
    log: Mapping[int, PartitionLog]
    reads: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    read_conflicts: Sequence[tuple[int, int, int, int]] = ()
    committed: Sequence[Sample] = ()
    commit_acks: Sequence[tuple[int, int]] = ()
    final_committed: Mapping[int, int] = field(default_factory=dict)
    high_watermarks: Sequence[Sample] = ()
    replicas: Mapping[int, Mapping[str, Sequence[BatchDigest]]] = field(default_factory=dict)


def _final_seqs(log: PartitionLog) -> dict[int, int]:
    return dict(zip(log.offsets, log.seqs, strict=True))


def check_reads(
    reads: Mapping[int, Mapping[int, int]],
    conflicts: Sequence[tuple[int, int, int, int]],
    log: Mapping[int, PartitionLog],
) -> list[Violation]:
    """Every record the group read is the one the final log holds at that offset."""
    violations = [
        Violation("read_diverged", p, f"offset {o} read as seq {a}, later as seq {b}")
        for p, o, a, b in conflicts
    ]
    for partition in sorted(reads):
        final = log.get(partition)
        if final is None:
            continue
        held = _final_seqs(final)
        for offset, seq in sorted(reads[partition].items()):
            if offset >= final.high_watermark:
                violations.append(
                    Violation(
                        "read_uncommitted",
                        partition,
                        f"offset {offset} (seq {seq}) was read; the log ends at "
                        f"{final.high_watermark}",
                    )
                )
            elif offset in held and held[offset] != seq:
                violations.append(
                    Violation(
                        "read_diverged",
                        partition,
                        f"offset {offset} was read as seq {seq}, the log holds seq {held[offset]}",
                    )
                )
    return violations


def check_reads_were_sent(
    reads: Mapping[int, Mapping[int, int]],
    log: Mapping[int, PartitionLog],
    sent: int,
    failed: Mapping[int, str],
) -> list[Violation]:
    """Nothing read (by the group or in the final log) is a record that was never sent
    or whose delivery failed with an error that says it was not written."""
    violations = []
    seen: set[tuple[int, int]] = set()

    def judge(partition: int, offset: int, seq: int, where: str) -> None:
        if seq == SEQ_UNREADABLE or (partition, seq) in seen:
            return
        seen.add((partition, seq))
        if not 0 <= seq < sent:
            violations.append(
                Violation(
                    "phantom_read", partition, f"{where} offset {offset}: seq {seq} never sent"
                )
            )
        elif failed.get(seq) in NOT_WRITTEN:
            violations.append(
                Violation(
                    "phantom_read",
                    partition,
                    f"{where} offset {offset}: seq {seq}, whose delivery failed with {failed[seq]}",
                )
            )

    for partition in sorted(reads):
        for offset, seq in sorted(reads[partition].items()):
            judge(partition, offset, seq, "read at")
    for partition in sorted(log):
        for offset, seq in zip(log[partition].offsets, log[partition].seqs, strict=True):
            judge(partition, offset, seq, "log at")
    return violations


def check_replicas(
    replicas: Mapping[int, Mapping[str, Sequence[BatchDigest]]],
    log: Mapping[int, PartitionLog],
) -> list[Violation]:
    """After healing, every replica of a partition holds the same batches, byte for
    byte, up to the same end, at least the high watermark clients were given."""
    violations = []
    for partition in sorted(replicas):
        nodes = replicas[partition]
        ends = {
            node: batches[-1].last_offset + 1 if batches else 0 for node, batches in nodes.items()
        }
        reference = max(sorted(nodes), key=lambda node: ends[node], default=None)
        if reference is None:
            continue
        mine = {b.base_offset: b for b in nodes[reference]}
        for node in sorted(nodes):
            if node == reference:
                continue
            for batch in nodes[node]:
                theirs = mine.get(batch.base_offset)
                if theirs != batch:
                    what = (
                        f"no batch of {reference} starts there"
                        if theirs is None
                        else f"it differs from {reference}'s (epochs {batch.leader_epoch}"
                        f"/{theirs.leader_epoch}, last offsets {batch.last_offset}"
                        f"/{theirs.last_offset})"
                    )
                    violations.append(
                        Violation(
                            "replica_diverged",
                            partition,
                            f"{node}: batch at offset {batch.base_offset}: {what}",
                        )
                    )
                    break  # the first divergence says it; the rest follows from it
        high = log[partition].high_watermark if partition in log else 0
        target = max(high, ends[reference])
        for node, end in sorted(ends.items()):
            if end < target:
                violations.append(
                    Violation(
                        "replica_behind",
                        partition,
                        f"{node}: log ends at {end}, {reference}'s at {ends[reference]}, "
                        f"high watermark {high}",
                    )
                )
    return violations


def replication_active(replicas: Mapping[int, Mapping[str, Sequence[BatchDigest]]]) -> bool:
    """Whether followers fetched: some batch is on two replicas byte for byte. Batches
    on two replicas alone would not say it: with elections but no fetching, a new
    leader writes batches of its own (other epoch, other offsets), never a copy."""
    for nodes in replicas.values():
        seen: set[BatchDigest] = set()
        for batches in nodes.values():
            mine = set(batches)
            if seen & mine:
                return True
            seen |= mine
    return False


def replicas_identical(replicas: Mapping[int, Mapping[str, Sequence[BatchDigest]]]) -> bool:
    return all(
        len({tuple(batches) for batches in nodes.values()}) <= 1 for nodes in replicas.values()
    )


def check_replication(history: ReplicationHistory) -> Report:
    """Every check over one replicated run's history."""
    report = Report(Counter(), [], 0)
    violations, report.verified = check_acked_present(history.acked, history.log)
    report.add(violations)
    report.add(check_no_duplicates(history.log))
    report.add(check_readable(history.log))
    report.add(check_contiguous(history.log))
    report.add(check_reads(history.reads, history.read_conflicts, history.log))
    report.add(check_reads_were_sent(history.reads, history.log, history.sent, history.failed))
    report.add(check_monotonic(history.committed, "commit_backwards", "committed offset"))
    report.add(check_commits_kept(history.commit_acks, history.final_committed, history.log))
    report.add(check_monotonic(history.high_watermarks, "hw_backwards", "high watermark"))
    report.add(check_replicas(history.replicas, history.log))
    return report
