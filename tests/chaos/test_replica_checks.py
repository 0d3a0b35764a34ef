"""The replicated run's checkers on hand-made histories: a clean one passes, and each
planted fault — the anomalies Jepsen found in Kafka and Redpanda — is caught by name.

Every test starts from ``clean()`` (two partitions on three replicas, six acknowledged
records, all read by the group and committed) and breaks one thing.
"""

from __future__ import annotations

from collections import Counter

from tests.chaos.history import SEQ_UNREADABLE, PartitionLog, Sample
from tests.chaos.replica_checks import (
    BatchDigest,
    ReplicationHistory,
    check_replication,
    replicas_identical,
    replication_active,
)

NODES = ("node-1", "node-2", "node-3")


def batches(seqs: list[int], epoch: int = 1) -> list[BatchDigest]:
    """One batch per record, its digest standing for its bytes (the seq and epoch)."""
    return [BatchDigest(o, o, epoch, b"%d/%d" % (seq, epoch)) for o, seq in enumerate(seqs)]


def clean() -> ReplicationHistory:
    # seq n went to partition n % 2 at offset n // 2
    acked = {seq: (seq % 2, seq // 2) for seq in range(6)}
    log = {
        0: PartitionLog(0, 3, [0, 1, 2], [0, 2, 4]),
        1: PartitionLog(0, 3, [0, 1, 2], [1, 3, 5]),
    }
    return ReplicationHistory(
        acked=acked,
        failed={},
        sent=7,  # seq 6 is in doubt: sent, no delivery report
        log=log,
        reads={0: {0: 0, 1: 2, 2: 4}, 1: {0: 1, 1: 3, 2: 5}},
        committed=[Sample(1.0, 0, 1), Sample(1.0, 1, 2), Sample(2.0, 0, 3), Sample(2.0, 1, 3)],
        commit_acks=[(0, 1), (1, 2), (0, 3), (1, 3)],
        final_committed={0: 3, 1: 3},
        high_watermarks=[Sample(0.5, 0, 2), Sample(1.5, 0, 3), Sample(1.5, 1, 3)],
        replicas={
            0: {node: batches([0, 2, 4]) for node in NODES},
            1: {node: batches([1, 3, 5]) for node in NODES},
        },
    )


def kinds(history: ReplicationHistory) -> Counter[str]:
    return check_replication(history).counts


def test_a_clean_history_passes() -> None:
    history = clean()
    report = check_replication(history)
    assert report.ok, report.examples
    assert report.verified == 6
    assert replication_active(history.replicas)
    assert replicas_identical(history.replicas)


def test_an_acknowledged_write_a_new_leader_never_had_is_lost() -> None:
    # Kafka 2013: the leader alone in the ISR acknowledged seq 5, died, and a replica
    # without it took over; the log went on from offset 2 with seq 6.
    history = clean()
    history.log = {**history.log, 1: PartitionLog(0, 3, [0, 1, 2], [1, 3, 6])}
    history.reads = {0: history.reads[0], 1: {0: 1, 1: 3}}
    assert kinds(history) == Counter(lost=1)


def test_a_record_written_twice_is_a_duplicate() -> None:
    history = clean()
    history.log = {**history.log, 0: PartitionLog(0, 4, [0, 1, 2, 3], [0, 2, 4, 4])}
    history.reads = {0: {**history.reads[0], 3: 4}, 1: history.reads[1]}
    history.replicas = {**history.replicas, 0: {n: batches([0, 2, 4, 4]) for n in NODES}}
    assert kinds(history) == Counter(duplicate=1)


def test_two_reads_of_one_offset_that_differ_diverge() -> None:
    history = clean()
    history.read_conflicts = [(1, 2, 5, 6)]
    assert kinds(history) == Counter(read_diverged=1)


def test_a_read_the_final_log_holds_otherwise_diverged() -> None:
    history = clean()
    history.reads = {0: {0: 0, 1: 2, 2: 6}, 1: history.reads[1]}
    assert kinds(history) == Counter(read_diverged=1)


def test_reading_above_the_final_high_watermark_read_uncommitted_state() -> None:
    # the group was handed offset 3 of a leader that then lost it (read above the HW)
    history = clean()
    history.reads = {0: {**history.reads[0], 3: 6}, 1: history.reads[1]}
    assert kinds(history) == Counter(read_uncommitted=1)


def test_reading_a_record_never_sent_or_refused_is_a_phantom() -> None:
    history = clean()
    history.reads = {0: {**history.reads[0]}, 1: {**history.reads[1]}}
    history.log = {**history.log, 0: PartitionLog(0, 4, [0, 1, 2, 3], [0, 2, 4, 99])}
    history.replicas = {**history.replicas, 0: {n: batches([0, 2, 4, 99]) for n in NODES}}
    assert kinds(history) == Counter(phantom_read=1)
    refused = clean()
    refused.failed = {6: "MSG_SIZE_TOO_LARGE"}
    refused.log = {**refused.log, 0: PartitionLog(0, 4, [0, 1, 2, 3], [0, 2, 4, 6])}
    refused.replicas = {**refused.replicas, 0: {n: batches([0, 2, 4, 6]) for n in NODES}}
    assert kinds(refused) == Counter(phantom_read=1)
    in_doubt = clean()
    in_doubt.failed = {6: "_MSG_TIMED_OUT"}  # may have been written: reading it is fine
    in_doubt.log, in_doubt.replicas = refused.log, refused.replicas
    assert kinds(in_doubt) == Counter()


def test_a_committed_offset_going_back_is_caught() -> None:
    history = clean()
    history.committed = [*history.committed, Sample(3.0, 0, 2)]
    assert kinds(history) == Counter(commit_backwards=1)


def test_an_acknowledged_commit_missing_at_the_end_is_lost() -> None:
    history = clean()
    history.final_committed = {0: 2, 1: 3}
    assert kinds(history) == Counter(commit_lost=1)


def test_replicas_with_different_bytes_at_an_offset_diverged() -> None:
    # Redpanda 2022 / KIP-101: a follower kept its own epoch-1 record at offset 2
    # where the leader wrote another in epoch 2.
    history = clean()
    replicas = dict(history.replicas[0])
    replicas["node-3"] = [*batches([0, 2]), BatchDigest(2, 2, 2, b"other")]
    history.replicas = {**history.replicas, 0: replicas}
    assert kinds(history) == Counter(replica_diverged=1)
    assert not replicas_identical(history.replicas)


def test_batches_cut_at_other_offsets_diverge() -> None:
    history = clean()
    replicas = dict(history.replicas[1])
    replicas["node-2"] = [BatchDigest(0, 1, 1, b"two records"), *batches([1, 3, 5])[2:]]
    history.replicas = {**history.replicas, 1: replicas}
    assert kinds(history) == Counter(replica_diverged=1)


def test_a_replica_that_never_caught_up_is_behind() -> None:
    history = clean()
    history.replicas = {
        **history.replicas,
        1: {"node-1": batches([1, 3, 5]), "node-2": batches([1, 3]), "node-3": []},
    }
    assert kinds(history) == Counter(replica_behind=2)


def test_replication_is_inactive_when_only_one_replica_holds_data() -> None:
    history = clean()
    history.replicas = {
        p: {"node-1": history.replicas[p]["node-1"], "node-2": [], "node-3": []}
        for p in history.replicas
    }
    assert not replication_active(history.replicas)
    assert kinds(history) == Counter(replica_behind=4)


def test_replication_is_inactive_when_replicas_only_hold_batches_of_their_own() -> None:
    # elections without fetching: each leader in turn wrote its own batches
    history = clean()
    history.replicas = {
        0: {"node-1": batches([0, 2, 4], epoch=1), "node-2": batches([0, 2, 4], epoch=2)},
        1: {"node-1": batches([1, 3, 5], epoch=1), "node-3": []},
    }
    assert not replication_active(history.replicas)
    history.replicas = {**history.replicas, 1: {n: batches([1, 3, 5]) for n in NODES}}
    assert replication_active(history.replicas)


def test_an_unreadable_read_is_left_to_the_log_checks() -> None:
    history = clean()
    history.reads = {0: {**history.reads[0], 1: SEQ_UNREADABLE}, 1: history.reads[1]}
    assert kinds(history) == Counter(read_diverged=1)
