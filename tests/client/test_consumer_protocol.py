"""Consumer-protocol bytes: round trips, every version, and bytes real clients sent.

The golden vectors were captured from groups on an ``odradek serve`` broker
(DescribeGroups returns each member's JoinGroup metadata and SyncGroup assignment as
the clients sent them): confluent-kafka 2.16.1 (librdkafka) and kafka-python 3.0.12.
``test_partitioning_interop.py`` repeats the librdkafka capture live.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.client.consumer.protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
    protocol_version,
)

TP = TopicPartition

# librdkafka, partition.assignment.strategy=range, client.rack=rackA, two topics.
LIBRDKAFKA_SUBSCRIPTION = bytes.fromhex(
    "0003"  # version 3
    "00000002"
    "000974612d306431373965"
    "000974622d313664393462"  # topics
    "00000000"  # user data: empty (not null)
    "00000000"  # owned partitions: none
    "ffffffff"  # generation -1
    "00057261636b41"  # rack "rackA"
)
LIBRDKAFKA_ASSIGNMENT = bytes.fromhex(
    "0000"  # version 0
    "00000002"
    "000974622d313664393462"
    "00000001"
    "00000001"
    "000974612d306431373965"
    "00000001"
    "00000002"
    "00000000"  # user data: empty
)
# kafka-python, sticky, second generation: v0 subscription whose user data is
# StickyAssignorUserData v1 behind kafka-python 3's int16 version.
KAFKA_PYTHON_STICKY = bytes.fromhex(
    "0000"
    "00000001"
    "000974612d396261383932"
    "00000025"
    "0001"
    "00000001"
    "000974612d396261383932"
    "00000003"
    "000000000000000100000002"
    "00000002"
)


def test_librdkafka_subscription_and_assignment() -> None:
    assert protocol_version(LIBRDKAFKA_SUBSCRIPTION) == 3
    assert decode_subscription(LIBRDKAFKA_SUBSCRIPTION, group_instance_id="i") == Subscription(
        topics=("ta-0d179e", "tb-16d94b"),
        user_data=b"",
        owned_partitions=(),
        generation=-1,
        rack="rackA",
        group_instance_id="i",
    )
    assert decode_assignment(LIBRDKAFKA_ASSIGNMENT) == Assignment(
        (TP("tb-16d94b", 1), TP("ta-0d179e", 2)), user_data=b""
    )
    # The same fields encode to the same bytes.
    assert encode_subscription(decode_subscription(LIBRDKAFKA_SUBSCRIPTION)) == (
        LIBRDKAFKA_SUBSCRIPTION
    )
    assert encode_assignment(decode_assignment(LIBRDKAFKA_ASSIGNMENT), 0) == LIBRDKAFKA_ASSIGNMENT


def test_kafka_python_sticky_user_data() -> None:
    subscription = decode_subscription(KAFKA_PYTHON_STICKY)
    assert protocol_version(KAFKA_PYTHON_STICKY) == 0
    assert subscription.topics == ("ta-9ba892",)
    assert subscription.owned_partitions == () and subscription.generation == -1
    assert subscription.user_data is not None
    owned = tuple(TP("ta-9ba892", p) for p in range(3))
    assert decode_sticky_user_data(subscription.user_data) == (owned, 2)
    # What Java's StickyAssignor writes (and this client): the same struct, no prefix.
    assert encode_sticky_user_data(owned, 2) == subscription.user_data[2:]


def test_sticky_user_data_versions_and_garbage() -> None:
    owned = (TP("a", 0), TP("a", 2), TP("b", 1))
    v1 = encode_sticky_user_data(owned, 9)
    assert v1 == bytes.fromhex(
        "00000002000161000000020000000000000002000162000000010000000100000009"
    )
    assert decode_sticky_user_data(v1) == (owned, 9)
    assert decode_sticky_user_data(v1[:-4]) == (owned, -1)  # v0: no generation
    assert decode_sticky_user_data(encode_sticky_user_data((), 3)) == ((), 3)
    for garbage in (b"", b"\x00", b"\xff\xff\xff\xff", v1[:-6], b"\x00\x00\x00\x05zz"):
        assert decode_sticky_user_data(garbage) is None
    huge = struct.pack(">ih", 1, 1) + b"a" + struct.pack(">i", 2**31 - 1)
    assert decode_sticky_user_data(huge) is None


def test_versions_carry_their_fields() -> None:
    full = Subscription(
        topics=("a", "b"),
        user_data=b"ud",
        owned_partitions=(TP("a", 0), TP("a", 3), TP("b", 1)),
        generation=12,
        rack="r1",
    )
    decoded = [decode_subscription(encode_subscription(full, v)) for v in range(4)]
    assert decoded[0] == Subscription(("a", "b"), b"ud")
    assert decoded[1] == Subscription(("a", "b"), b"ud", full.owned_partitions)
    assert decoded[2] == Subscription(("a", "b"), b"ud", full.owned_partitions, 12)
    assert decoded[3] == full
    assert [protocol_version(encode_subscription(full, v)) for v in range(4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        encode_subscription(full, 4)
    with pytest.raises(ValueError):
        encode_assignment(Assignment(()), -1)


def test_owned_partitions_are_grouped_by_topic_in_first_seen_order() -> None:
    data = encode_subscription(
        Subscription(("b", "a"), owned_partitions=(TP("b", 2), TP("a", 1), TP("b", 0))), 1
    )
    assert decode_subscription(data).owned_partitions == (TP("b", 2), TP("b", 0), TP("a", 1))


def test_newer_versions_read_as_v3_and_bad_bytes_raise() -> None:
    v3 = encode_subscription(Subscription(("t",), None, (TP("t", 1),), 4, "rack"), 3)
    future = struct.pack(">h", 7) + v3[2:] + b"\x00\x00\x00\x2a new fields"
    assert decode_subscription(future) == decode_subscription(v3)
    assignment = encode_assignment(Assignment((TP("t", 0),), b"x"))
    assert decode_assignment(struct.pack(">h", 9) + assignment[2:] + b"more") == Assignment(
        (TP("t", 0),), b"x"
    )
    for bad in (b"", b"\x00", struct.pack(">h", -1) + v3[2:], v3[:-3], v3[:7]):
        with pytest.raises(ConsumerProtocolError):
            decode_subscription(bad)
    assert decode_assignment(b"") == Assignment(())  # a member the leader left out
    for bad in (b"\x00", struct.pack(">h", -2) + assignment[2:], assignment[:-1]):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(bad)


names = st.text(min_size=1, max_size=12)
partitions = st.integers(min_value=0, max_value=2**31 - 1)


@st.composite
def grouped_partitions(draw: st.DrawFn) -> tuple[TopicPartition, ...]:
    """Partitions listed topic by topic (the order the encoding keeps)."""
    topics = draw(st.lists(names, max_size=4, unique=True))
    return tuple(
        TP(t, p) for t in topics for p in draw(st.lists(partitions, min_size=1, max_size=5))
    )


@given(
    st.lists(names, max_size=5).map(tuple),
    st.none() | st.binary(max_size=20),
    grouped_partitions(),
    st.integers(min_value=-1, max_value=2**31 - 1),
    st.none() | names,
)
def test_subscription_round_trip(
    topics: tuple[str, ...],
    user_data: bytes | None,
    owned: tuple[TopicPartition, ...],
    generation: int,
    rack: str | None,
) -> None:
    subscription = Subscription(topics, user_data, owned, generation, rack)
    assert decode_subscription(encode_subscription(subscription)) == subscription
    assert decode_subscription(encode_subscription(subscription, 0)) == Subscription(
        topics, user_data
    )


@given(grouped_partitions(), st.none() | st.binary(max_size=20), st.integers(0, 3))
def test_assignment_round_trip(
    assigned: tuple[TopicPartition, ...], user_data: bytes | None, version: int
) -> None:
    assignment = Assignment(assigned, user_data)
    data = encode_assignment(assignment, version)
    assert protocol_version(data) == version
    assert decode_assignment(data) == assignment


@given(grouped_partitions(), st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_sticky_user_data_round_trip(owned: tuple[TopicPartition, ...], generation: int) -> None:
    assert decode_sticky_user_data(encode_sticky_user_data(owned, generation)) == (
        owned,
        generation,
    )
