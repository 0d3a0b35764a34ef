"""Checkers: pure functions from a ``History`` to the violations it contains.

Each returns a list of ``Violation``; an empty list means the property held. The
properties are what a single-node Kafka promises an idempotent acks=all producer and
a committing consumer group, whatever SIGKILL/SIGSTOP did in between:

- ``lost``: a record whose delivery was acknowledged at (partition, offset) is not at
  that offset (missing, beyond the high watermark, or another record is there);
- ``duplicate``: a record (seq) is in the log more than once;
- ``unreadable``: a record whose key or value is not what the producer sent;
- ``gap``: a partition's offsets do not run contiguously from log start to the HW;
- ``commit_backwards``: an observed committed offset smaller than one seen earlier;
- ``commit_lost``: the final committed offset is below a commit a member was told
  succeeded, or beyond the high watermark;
- ``hw_backwards``: an observed high watermark smaller than one seen earlier;
- ``unconsumed``: an acknowledged record the consumer group was never handed.

Counts are exact; each violation kind keeps at most ``EXAMPLES_PER_KIND`` examples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tests.chaos.history import SEQ_UNREADABLE, History, OffsetSet, PartitionLog, Sample

EXAMPLES_PER_KIND = 20

KINDS = (
    "lost",
    "duplicate",
    "unreadable",
    "gap",
    "commit_backwards",
    "commit_lost",
    "hw_backwards",
    "unconsumed",
)


@dataclass(frozen=True)
class Violation:
    kind: str
    partition: int
    detail: str


@dataclass
class Report:
    """The violations of one history: exact counts, a few examples of each kind."""

    counts: Counter[str]
    examples: list[Violation]
    verified: int  # acknowledged records found intact at their acknowledged offset

    @property
    def ok(self) -> bool:
        return not self.counts

    def add(self, violations: Iterable[Violation]) -> None:
        for violation in violations:
            self.counts[violation.kind] += 1
            if self.counts[violation.kind] <= EXAMPLES_PER_KIND:
                self.examples.append(violation)


def _position(log: PartitionLog, offset: int) -> int | None:
    """Index of ``offset`` in ``log.offsets`` (they are sorted), or None."""
    offsets = log.offsets
    guess = offset - log.log_start
    if 0 <= guess < len(offsets) and offsets[guess] == offset:
        return guess
    low, high = 0, len(offsets)
    while low < high:
        middle = (low + high) // 2
        if offsets[middle] < offset:
            low = middle + 1
        else:
            high = middle
    return low if low < len(offsets) and offsets[low] == offset else None


def check_acked_present(
    acked: Mapping[int, tuple[int, int]], log: Mapping[int, PartitionLog]
) -> tuple[list[Violation], int]:
    """Every acknowledged record at the offset it was acknowledged with; and how many were."""
    violations = []
    verified = 0
    for seq in acked:
        partition, offset = acked[seq]
        partition_log = log.get(partition)
        if partition_log is None:
            violations.append(Violation("lost", partition, f"seq {seq}: partition not read"))
            continue
        if offset >= partition_log.high_watermark:
            violations.append(
                Violation(
                    "lost",
                    partition,
                    f"seq {seq} acked at offset {offset}, high watermark is "
                    f"{partition_log.high_watermark}",
                )
            )
            continue
        position = _position(partition_log, offset)
        if position is None:
            violations.append(
                Violation("lost", partition, f"seq {seq} acked at offset {offset}: not in the log")
            )
        elif partition_log.seqs[position] != seq:
            found = partition_log.seqs[position]
            violations.append(
                Violation(
                    "lost",
                    partition,
                    f"seq {seq} acked at offset {offset}, the log has seq {found} there",
                )
            )
        else:
            verified += 1
    return violations, verified


def check_no_duplicates(log: Mapping[int, PartitionLog]) -> list[Violation]:
    """No seq twice in the log (the idempotent producer's promise), across partitions.

    A bitmap of seen seqs (runs hold millions), so a duplicate names where it is again;
    a second pass finds where the first copies of the few duplicated seqs are.
    """
    seen = OffsetSet()
    again: list[tuple[int, int, int]] = []
    for partition in sorted(log):
        partition_log = log[partition]
        for offset, seq in zip(partition_log.offsets, partition_log.seqs, strict=True):
            if seq == SEQ_UNREADABLE:
                continue
            if seq in seen:
                again.append((seq, partition, offset))
            else:
                seen.add(seq)
    first: dict[int, tuple[int, int]] = {}
    wanted = {seq for seq, _, _ in again[:EXAMPLES_PER_KIND]}
    for partition in sorted(log) if wanted else ():
        partition_log = log[partition]
        for offset, seq in zip(partition_log.offsets, partition_log.seqs, strict=True):
            if seq in wanted:
                first.setdefault(seq, (partition, offset))
    return [
        Violation(
            "duplicate",
            partition,
            f"seq {seq} at offset {offset}, first at {first.get(seq, ('?', '?'))[0]}/"
            f"{first.get(seq, ('?', '?'))[1]}",
        )
        for seq, partition, offset in again
    ]


def check_readable(log: Mapping[int, PartitionLog]) -> list[Violation]:
    """Every record read back is one the producer sent, with the value it sent."""
    violations = []
    for partition in sorted(log):
        partition_log = log[partition]
        for offset, seq in zip(partition_log.offsets, partition_log.seqs, strict=True):
            if seq == SEQ_UNREADABLE:
                violations.append(
                    Violation("unreadable", partition, f"offset {offset}: key or value not sent")
                )
    return violations


def check_contiguous(log: Mapping[int, PartitionLog]) -> list[Violation]:
    """Offsets run log_start, log_start + 1, ..., high_watermark - 1 with nothing missing."""
    violations = []
    for partition in sorted(log):
        partition_log = log[partition]
        expected = partition_log.log_start
        for offset in partition_log.offsets:
            if offset != expected:
                violations.append(
                    Violation("gap", partition, f"offset {offset} follows {expected - 1}")
                )
            expected = offset + 1
        if expected < partition_log.high_watermark:
            violations.append(
                Violation(
                    "gap",
                    partition,
                    f"read up to offset {expected - 1}, high watermark is "
                    f"{partition_log.high_watermark}",
                )
            )
    return violations


def check_monotonic(samples: Sequence[Sample], kind: str, what: str) -> list[Violation]:
    """Per partition, each sample at least the largest one seen before it."""
    highest: dict[int, Sample] = {}
    violations = []
    for sample in samples:
        before = highest.get(sample.partition)
        if before is not None and sample.offset < before.offset:
            violations.append(
                Violation(
                    kind,
                    sample.partition,
                    f"{what} {sample.offset} at {sample.at_s:.1f}s, "
                    f"was {before.offset} at {before.at_s:.1f}s",
                )
            )
        elif before is None or sample.offset > before.offset:
            highest[sample.partition] = sample
    return violations


def check_commits_kept(
    commit_acks: Sequence[tuple[int, int]],
    final_committed: Mapping[int, int],
    log: Mapping[int, PartitionLog],
) -> list[Violation]:
    """The final committed offset covers every acknowledged commit and is within the log."""
    highest_acked: dict[int, int] = {}
    for partition, offset in commit_acks:
        highest_acked[partition] = max(offset, highest_acked.get(partition, -1))
    violations = []
    for partition, offset in sorted(highest_acked.items()):
        final = final_committed.get(partition, -1)
        if final < offset:
            violations.append(
                Violation(
                    "commit_lost",
                    partition,
                    f"a commit of offset {offset} was acknowledged, committed is now {final}",
                )
            )
    for partition, final in sorted(final_committed.items()):
        partition_log = log.get(partition)
        if partition_log is not None and final > partition_log.high_watermark:
            violations.append(
                Violation(
                    "commit_lost",
                    partition,
                    f"committed offset {final} is beyond the high watermark "
                    f"{partition_log.high_watermark}",
                )
            )
    return violations


def check_consumed(
    acked: Mapping[int, tuple[int, int]], consumed: Mapping[int, object]
) -> list[Violation]:
    """The consumer group was handed every acknowledged record (at least once)."""
    violations = []
    for seq in acked:
        partition, offset = acked[seq]
        offsets = consumed.get(partition)
        if offsets is None or offset not in offsets:  # type: ignore[operator]
            violations.append(
                Violation("unconsumed", partition, f"seq {seq} at offset {offset} never consumed")
            )
    return violations


def check_history(history: History) -> Report:
    """Every check above over one history."""
    report = Report(Counter(), [], 0)
    violations, report.verified = check_acked_present(history.acked, history.log)
    report.add(violations)
    report.add(check_no_duplicates(history.log))
    report.add(check_readable(history.log))
    report.add(check_contiguous(history.log))
    report.add(check_monotonic(history.committed, "commit_backwards", "committed offset"))
    report.add(check_commits_kept(history.commit_acks, history.final_committed, history.log))
    report.add(check_monotonic(history.high_watermarks, "hw_backwards", "high watermark"))
    report.add(check_consumed(history.acked, history.consumed))
    return report


# -- the quorum: topics the admin workload was told about, and the metadata logs -----------

QUORUM_KINDS = ("topic_missing", "topic_not_deleted", "topics_differ", "metadata_diverged")
NO_PARTITION = -1


def check_topics(
    created: Iterable[str],
    deleted: Iterable[str],
    delete_sent: Iterable[str],
    per_node: Mapping[str, set[str]],
    prefix: str,
) -> list[Violation]:
    """On every node: each acknowledged create whose topic no delete was sent for is
    listed; no acknowledged delete's topic is; and the nodes list the same topics of
    the admin workload (names starting with ``prefix``)."""
    violations = []
    must_exist = set(created) - set(delete_sent)
    gone = set(deleted)
    for node, topics in sorted(per_node.items()):
        for name in sorted(must_exist - topics):
            violations.append(
                Violation("topic_missing", NO_PARTITION, f"{node}: {name} was created, not listed")
            )
        for name in sorted(gone & topics):
            violations.append(
                Violation("topic_not_deleted", NO_PARTITION, f"{node}: {name} was deleted, listed")
            )
    mine = {node: {t for t in topics if t.startswith(prefix)} for node, topics in per_node.items()}
    if len({frozenset(topics) for topics in mine.values()}) > 1:
        union = set().union(*mine.values())
        for node, topics in sorted(mine.items()):
            absent = sorted(union - topics)[:5]
            if absent:
                violations.append(
                    Violation("topics_differ", NO_PARTITION, f"{node} lacks {absent}")
                )
    return violations


def check_metadata_logs(
    batches: Mapping[str, Mapping[int, bytes]],
    log_end: Mapping[str, int],
    high_watermark: int,
) -> list[Violation]:
    """The nodes' ``__cluster_metadata`` logs (base offset -> raw batch) hold the same
    batches below the quorum's high watermark, where more than one node still has them
    (a snapshot may have deleted a prefix), and every log reaches the high watermark."""
    violations = []
    for node, end in sorted(log_end.items()):
        if end < high_watermark:
            violations.append(
                Violation(
                    "metadata_diverged",
                    NO_PARTITION,
                    f"{node}: log ends at {end}, below the high watermark {high_watermark}",
                )
            )
    offsets = sorted({o for node in batches.values() for o in node if o < high_watermark})
    for node, found in sorted(batches.items()):
        start = min(found, default=high_watermark)
        missing = [o for o in offsets if o >= start and o not in found]
        if missing:
            violations.append(
                Violation(
                    "metadata_diverged",
                    NO_PARTITION,
                    f"{node}: no batch at offsets {missing[:5]} that other nodes hold",
                )
            )
    for offset in offsets:
        held = {node: found[offset] for node, found in batches.items() if offset in found}
        if len(set(held.values())) > 1:
            violations.append(
                Violation(
                    "metadata_diverged",
                    NO_PARTITION,
                    f"batch at offset {offset} differs between {sorted(held)}",
                )
            )
    return violations
