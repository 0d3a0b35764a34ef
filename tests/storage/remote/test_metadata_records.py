"""``__remote_log_metadata`` records: round trips, the state machines, and hostile bytes.

Every message drawn by Hypothesis must decode to itself; every proper prefix of an
encoding, and every encoding with a count or length inflated, must raise
RemoteLogMetadataFormatError (never IndexError, struct.error, MemoryError or a hang).
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.bounds import uvarint_bytes
from odradek.storage.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    check_transition,
)
from odradek.storage.remote.metadata_records import (
    RemoteLogMetadataFormatError,
    deserialize,
    metadata_partition_for,
    serialize,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.uuids()
topics = st.text(alphabet="abcXYZ09._-", min_size=1, max_size=40)
custom = st.none() | st.binary(max_size=200)
tps = st.builds(TopicIdPartition, uuids, topics, st.integers(0, 2**31 - 1))
segment_ids = st.builds(
    lambda tp, sid: RemoteLogSegmentId(tp.topic_id, tp.topic, tp.partition, sid), tps, uuids
)


@st.composite
def segment_metadata(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 2**62))
    length = draw(st.integers(0, 10_000))
    count = draw(st.integers(1, min(5, length + 1)))
    offsets = (
        sorted(
            draw(
                st.sets(
                    st.integers(start + 1, start + length), min_size=count - 1, max_size=count - 1
                )
            )
        )
        if count > 1
        else []
    )
    epochs = sorted(draw(st.sets(st.integers(0, 2**31 - 1), min_size=count, max_size=count)))
    return RemoteLogSegmentMetadata(
        draw(segment_ids),
        start,
        start + length,
        draw(INT64),
        draw(INT32),
        draw(INT64),
        draw(st.integers(0, 2**31 - 1)),
        dict(zip(epochs, [start, *offsets], strict=True)),
        draw(st.sampled_from(S)),
        draw(custom),
        draw(st.booleans()),
    )


updates = st.builds(
    RemoteLogSegmentMetadataUpdate,
    segment_ids,
    INT64,
    custom,
    st.sampled_from([s for s in S if s != S.COPY_SEGMENT_STARTED]),
    INT32,
)
deletes = st.builds(RemotePartitionDeleteMetadata, tps, st.sampled_from(P), INT64, INT32)
messages = segment_metadata() | updates | deletes


@given(messages)
def test_round_trip(message) -> None:
    assert deserialize(serialize(message)) == message


@given(messages, st.data())
def test_every_truncation_is_refused(message, data) -> None:
    encoded = serialize(message)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RemoteLogMetadataFormatError):
        deserialize(encoded[:cut])


@given(messages)
def test_trailing_bytes_are_refused(message) -> None:
    with pytest.raises(RemoteLogMetadataFormatError, match="trailing"):
        deserialize(serialize(message) + b"\0")


@given(messages, st.data())
def test_random_corruption_raises_only_the_format_error(message, data) -> None:
    encoded = bytearray(serialize(message))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] = data.draw(st.integers(0, 255))
    with contextlib.suppress(RemoteLogMetadataFormatError):
        deserialize(bytes(encoded))


def sample_segment(**overrides) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(uuid.UUID(int=7), "orders", 3)
    fields = dict(
        remote_log_segment_id=RemoteLogSegmentId.generate(tp),
        start_offset=100,
        end_offset=199,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_500,
        segment_size_in_bytes=4096,
        segment_leader_epochs={2: 100, 3: 150},
    )
    fields.update(overrides)
    return RemoteLogSegmentMetadata(**fields)


def test_layout_is_kafkas_framing() -> None:
    encoded = serialize(sample_segment())
    assert encoded[:3] == b"\x01\x00\x00"  # frame version 1, apiKey 0, version 0
    assert encoded[3:4] == uvarint_bytes(len("orders") + 1)
    assert encoded[4:10] == b"orders"
    assert encoded[-2:] == b"\x00\x00"  # state COPY_SEGMENT_STARTED, no tagged fields
    tagged = serialize(sample_segment(txn_index_empty=True))
    assert tagged[-5:] == b"\x00\x01\x00\x01\x01"  # state, 1 tag: tag 0, size 1, true


def test_huge_counts_and_lengths_are_refused_before_allocating() -> None:
    encoded = serialize(sample_segment())
    # the topic name's length (byte 3) claiming 2^28 bytes
    huge = encoded[:3] + uvarint_bytes(2**28) + encoded[4:]
    with pytest.raises(RemoteLogMetadataFormatError, match="declares"):
        deserialize(huge)
    # the epoch array's count claiming 2^31 entries: find it after the fixed fields
    head = 3 + 1 + 6 + 16 + 4 + 1 + 16 + 1 + 8 + 8 + 4 + 8 + 8
    assert encoded[head] == 3  # two entries + 1
    huge = encoded[:head] + uvarint_bytes(2**31) + encoded[head + 1 :]
    with pytest.raises(RemoteLogMetadataFormatError, match="SegmentLeaderEpochs declares"):
        deserialize(huge)
    with pytest.raises(RemoteLogMetadataFormatError, match="varint"):
        deserialize(b"\x01\xff\xff\xff\xff\xff\xff")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "frame version"),
        (b"\x02\x00\x00", "unknown frame version 2"),
        (b"\x01\x09\x00", "unknown apiKey 9"),
        (b"\x01\x00\x01", "unsupported version 1"),
    ],
)
def test_envelope_errors(data: bytes, match: str) -> None:
    with pytest.raises(RemoteLogMetadataFormatError, match=match):
        deserialize(data)


def test_invalid_values_inside_well_formed_bytes_are_format_errors() -> None:
    encoded = bytearray(serialize(sample_segment()))
    encoded[-2] = 9  # an unknown segment state
    with pytest.raises(RemoteLogMetadataFormatError, match="state 9"):
        deserialize(bytes(encoded))
    update = serialize(
        RemoteLogSegmentMetadataUpdate(
            sample_segment().remote_log_segment_id, 1, None, S.COPY_SEGMENT_FINISHED, 1
        )
    )
    with pytest.raises(RemoteLogMetadataFormatError, match="COPY_SEGMENT_STARTED"):
        deserialize(update[:-2] + b"\x00\x00")  # an update back to COPY_SEGMENT_STARTED


def test_unknown_tags_are_skipped() -> None:
    encoded = serialize(sample_segment())
    with_tag = encoded[:-1] + b"\x01" + uvarint_bytes(7) + b"\x02ab"
    assert deserialize(with_tag) == sample_segment(
        remote_log_segment_id=deserialize(encoded).remote_log_segment_id  # type: ignore[union-attr]
    )


@pytest.mark.parametrize(
    ("current", "target", "ok"),
    [
        (None, S.COPY_SEGMENT_STARTED, True),
        (None, S.COPY_SEGMENT_FINISHED, False),
        (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, True),
        (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED, True),
        (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED, False),
        (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, True),
        (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED, False),
        (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED, True),
        (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED, True),
        (S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, False),
        (S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, False),
        (None, P.DELETE_PARTITION_MARKED, True),
        (None, P.DELETE_PARTITION_STARTED, False),
        (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED, True),
        (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_FINISHED, False),
        (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED, True),
        (P.DELETE_PARTITION_FINISHED, P.DELETE_PARTITION_MARKED, False),
    ],
)
def test_state_machines(current, target, ok: bool) -> None:
    if ok:
        check_transition(current, target, "x")
    else:
        with pytest.raises(IllegalStateTransitionError, match="illegal state transition"):
            check_transition(current, target, "x")


def test_segment_metadata_checks_its_epochs() -> None:
    with pytest.raises(ValueError, match="no leader epochs"):
        sample_segment(segment_leader_epochs={})
    with pytest.raises(ValueError, match="first epoch starts at 101"):
        sample_segment(segment_leader_epochs={2: 101})
    with pytest.raises(ValueError, match="out of order"):
        sample_segment(segment_leader_epochs={2: 100, 3: 200})
    with pytest.raises(ValueError, match="offsets"):
        sample_segment(end_offset=99)
    assert sample_segment().epoch_ranges() == [(2, 100, 149), (3, 150, 199)]


def test_metadata_partition_is_stable_and_spread() -> None:
    topic_id = uuid.UUID("3f2504e0-4f89-11d3-9a0c-0305e82c3301")
    assert metadata_partition_for(topic_id, 0, 50) == metadata_partition_for(topic_id, 0, 50)
    spread = {metadata_partition_for(topic_id, p, 50) for p in range(500)}
    assert len(spread) > 40
    assert all(0 <= p < 50 for p in spread)
    assert metadata_partition_for(topic_id, 5, 1) == 0
    # pinned: brokers of different versions must agree on where a partition's events are
    assert (metadata_partition_for(topic_id, 0, 50), metadata_partition_for(topic_id, 7, 50)) == (
        4,
        2,
    )
    with pytest.raises(ValueError):
        metadata_partition_for(topic_id, 0, 0)
