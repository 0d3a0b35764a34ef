"""The checkers on hand-made histories: a clean one passes, each planted fault is caught.

Every test starts from ``clean()`` (two partitions, six acknowledged records, all
consumed and committed) and breaks exactly one thing, so a checker that stopped
looking would leave that test green no longer.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from tests.chaos.checks import check_history
from tests.chaos.faults import FaultPlan, schedule
from tests.chaos.history import (
    SEQ_UNREADABLE,
    AckTable,
    History,
    OffsetSet,
    PartitionLog,
    Sample,
    decode_key,
    encode_key,
    expected_value,
    value_size,
)


def clean() -> History:
    # seq n went to partition n % 2 at offset n // 2
    acked = {seq: (seq % 2, seq // 2) for seq in range(6)}
    log = {
        0: PartitionLog(0, 3, [0, 1, 2], [0, 2, 4]),
        1: PartitionLog(0, 3, [0, 1, 2], [1, 3, 5]),
    }
    return History(
        partitions=2,
        acked=acked,
        log=log,
        committed=[Sample(1.0, 0, 1), Sample(1.0, 1, 2), Sample(2.0, 0, 3), Sample(2.0, 1, 3)],
        commit_acks=[(0, 1), (1, 2), (0, 3), (1, 3)],
        final_committed={0: 3, 1: 3},
        high_watermarks=[Sample(0.5, 0, 2), Sample(0.5, 1, 3), Sample(1.5, 0, 3)],
        consumed={0: {0, 1, 2}, 1: {0, 1, 2}},
    )


def kinds(history: History) -> Counter[str]:
    return check_history(history).counts


def test_a_clean_history_passes_and_counts_what_it_verified() -> None:
    report = check_history(clean())
    assert report.ok, report.examples
    assert report.verified == 6


def test_a_record_missing_from_the_log_is_lost() -> None:
    history = clean()
    # offset 2 (seq 5) cut off
    history.log = {**history.log, 1: PartitionLog(0, 2, [0, 1], [1, 3])}
    assert kinds(history)["lost"] == 1


def test_another_record_at_the_acknowledged_offset_is_a_loss() -> None:
    history = clean()
    # seq 4 overwritten by seq 2
    history.log = {**history.log, 0: PartitionLog(0, 3, [0, 1, 2], [0, 2, 2])}
    counts = kinds(history)
    assert counts["lost"] == 1
    assert counts["duplicate"] == 1


def test_a_record_twice_is_a_duplicate_even_in_another_partition() -> None:
    history = clean()
    history.log = {**history.log, 1: PartitionLog(0, 4, [0, 1, 2, 3], [1, 3, 5, 0])}
    counts = kinds(history)
    assert counts == Counter(duplicate=1), check_history(history).examples
    assert "first at 0/0" in check_history(history).examples[0].detail


def test_a_missing_offset_is_a_gap() -> None:
    history = clean()
    # offset 2 skipped
    history.log = {**history.log, 0: PartitionLog(0, 4, [0, 1, 3], [0, 2, 6])}
    history.acked = {seq: at for seq, at in history.acked.items() if seq != 4}
    assert kinds(history) == Counter(gap=1)


def test_a_log_that_ends_before_its_high_watermark_has_a_gap() -> None:
    history = clean()
    history.log = {**history.log, 0: PartitionLog(0, 4, [0, 1, 2], [0, 2, 4])}
    assert kinds(history) == Counter(gap=1)


def test_a_record_with_a_value_that_was_not_sent_is_unreadable() -> None:
    history = clean()
    history.log = {**history.log, 0: PartitionLog(0, 3, [0, 1, 2], [0, SEQ_UNREADABLE, 4])}
    counts = kinds(history)
    assert counts["unreadable"] == 1
    assert counts["lost"] == 1  # seq 2 is not at its offset any more


def test_a_committed_offset_going_back_is_caught() -> None:
    history = clean()
    history.committed = [*history.committed, Sample(3.0, 0, 2), Sample(4.0, 0, 3)]
    report = check_history(history)
    assert report.counts == Counter(commit_backwards=1)
    assert "committed offset 2 at 3.0s, was 3 at 2.0s" in report.examples[0].detail


def test_an_acknowledged_commit_that_did_not_survive_is_lost() -> None:
    history = clean()
    history.final_committed = {0: 2, 1: 3}
    assert kinds(history) == Counter(commit_lost=1)


def test_a_committed_offset_beyond_the_high_watermark_is_caught() -> None:
    history = clean()
    history.final_committed = {0: 3, 1: 7}
    assert kinds(history) == Counter(commit_lost=1)


def test_a_high_watermark_going_back_is_caught() -> None:
    history = clean()
    history.high_watermarks = [*history.high_watermarks, Sample(2.0, 1, 1)]
    assert kinds(history) == Counter(hw_backwards=1)


def test_a_record_the_group_never_got_is_unconsumed() -> None:
    history = clean()
    history.consumed = {0: {0, 1, 2}, 1: {0, 2}}
    assert kinds(history) == Counter(unconsumed=1)


def test_examples_are_capped_but_counts_are_exact() -> None:
    history = clean()
    history.consumed = {}
    report = check_history(history)
    assert report.counts == Counter(unconsumed=6)
    history.high_watermarks = [Sample(float(t), 0, 100 - t) for t in range(50)]
    report = check_history(history)
    assert report.counts["hw_backwards"] == 49
    assert sum(v.kind == "hw_backwards" for v in report.examples) == 20


def test_the_compact_tables_behave_like_the_plain_containers() -> None:
    acked = AckTable()
    for seq in range(5):
        acked.sent(seq, seq % 2)
    acked.acked(3, 1, 7)
    acked.acked(0, 0, 0)
    acked.acked(3, 1, 7)  # a delivery report twice counts once
    assert dict(acked) == {0: (0, 0), 3: (1, 7)}
    assert len(acked) == 2 and acked.sent_count == 5
    with pytest.raises(KeyError):
        acked[1]
    offsets = OffsetSet()
    for offset in (0, 9, 100_000):
        offsets.add(offset)
    assert [o for o in range(100_001) if o in offsets] == [0, 9, 100_000]
    assert -1 not in offsets


def test_values_are_recomputable_from_the_key_and_vary_in_size() -> None:
    assert decode_key(encode_key(12345)) == 12345
    assert decode_key(None) is None and decode_key(b"x1") is None
    sizes = {value_size(seq, 1000) for seq in range(200)}
    assert min(sizes) >= 500 and max(sizes) <= 1500 and len(sizes) > 100
    assert expected_value(7, 1000) == expected_value(7, 1000)
    assert expected_value(7, 1000) != expected_value(8, 1000)
    assert len(expected_value(7, 1000)) == value_size(7, 1000)
    assert expected_value(7, 1000).startswith(b"000000000007|")


def test_a_seed_gives_one_schedule() -> None:
    plan = FaultPlan(cycles=30)
    first = schedule(42, plan, nodes=3)
    assert first == schedule(42, plan, nodes=3)
    assert first != schedule(43, plan, nodes=3)
    assert {fault.kind for fault in first} == {"kill", "pause", "term", "crashloop"}
    assert {fault.node for fault in first} == {0, 1, 2}
    moments = [fault.at_s for fault in first]
    assert moments == sorted(moments) and moments[0] == plan.first_after_s
    for before, after in itertools.pairwise(first):
        assert after.at_s - before.at_s >= before.hold_s + plan.gap_s[0] - 0.01
