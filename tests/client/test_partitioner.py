"""Producer partitioners: Kafka's murmur2 against published vectors, sticky and round robin.

The murmur2 vectors are the published expectations of two independent implementations:
Kafka's ``UtilsTest.testMurmur2`` (Java client) and librdkafka's ``unittest_murmur2``
in ``src/rdmurmur2.c`` (whose keys include unaligned views into one buffer, exercising
its alignment branch). ``test_partitioning_interop.py`` checks the partitions a real
librdkafka producer picks.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.client.producer.partitioner import (
    CallablePartitioner,
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    as_partitioner,
    default_partition,
    murmur2,
    to_positive,
)

# Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java testMurmur2
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka src/rdmurmur2.c unittest_murmur2: keys and java_murmur2_results (unsigned)
_SHORT = b"1234"
_LONG = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_UNITTEST = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (_SHORT, 0x9FC97B14),
    (_SHORT[1:], 0xE7C009CA),
    (_SHORT[2:], 0x873930DA),
    (_SHORT[3:], 0x5A4B5CA1),
    (_LONG, 0x78424F1C),
    (_LONG[1:], 0x4A62B377),
    (_LONG[2:], 0xE0E4E09E),
    (_LONG[3:], 0x62B8B43F),
    (b"", 0x106E08D9),
]


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_UTILS_TEST.items()))
def test_murmur2_matches_kafka_utils_test(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_UNITTEST)
def test_murmur2_matches_librdkafka_unittest(key: bytes, expected: int) -> None:
    signed = expected - (1 << 32) if expected & 0x80000000 else expected
    assert murmur2(key) == signed
    # Unaligned views of one buffer, as librdkafka's test feeds them.
    buffer = bytearray(b"\x00\x01\x02" + key)
    assert murmur2(memoryview(buffer)[3:]) == signed
    assert murmur2(bytes(buffer[3:])) == signed


def test_default_partition_is_positive_hash_modulo_count() -> None:
    # 0xd067cf64 has the sign bit set: toPositive clears it (it is not abs()).
    assert to_positive(murmur2(b"kafka")) == 0xD067CF64 & 0x7FFFFFFF
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(1 << 31)) == 0
    for key, expected in KAFKA_UTILS_TEST.items():
        for count in (1, 2, 3, 7, 10, 50, 1000):
            assert default_partition(key, count) == (expected & 0x7FFFFFFF) % count
    assert default_partition(b"kafka", 10) == (0xD067CF64 & 0x7FFFFFFF) % 10 == 0
    with pytest.raises(ValueError):
        default_partition(b"k", 0)


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_murmur2_is_a_signed_32_bit_int_and_partitions_are_in_range(key: bytes, count: int) -> None:
    value = murmur2(key)
    assert -(1 << 31) <= value < (1 << 31)
    assert 0 <= default_partition(key, count) < count


ALL = [0, 1, 2, 3, 4, 5]


def test_default_partitioner_hashes_keys_regardless_of_availability() -> None:
    partitioner = DefaultPartitioner(random.Random(1))
    for key in KAFKA_UTILS_TEST:
        expected = default_partition(key, len(ALL))
        assert partitioner.partition("t", key, ALL, ALL) == expected
        assert partitioner.partition("t", key, ALL, [5]) == expected
        assert partitioner.partition("t", key, ALL, []) == expected
    assert partitioner.partition("t", b"", ALL, ALL) == default_partition(b"", 6)


def test_keyless_records_stick_to_one_partition_until_a_new_batch() -> None:
    partitioner = DefaultPartitioner(random.Random(7))
    first = partitioner.partition("t", None, ALL, ALL)
    assert {partitioner.partition("t", None, ALL, ALL) for _ in range(50)} == {first}
    assert partitioner.sticky_partition("t") == first
    # Another topic has its own sticky partition; keyed records do not disturb it.
    partitioner.partition("other", None, ALL, ALL)
    partitioner.partition("t", b"key", ALL, ALL)
    assert partitioner.partition("t", None, ALL, ALL) == first
    # A report about a batch of another partition is stale: nothing changes.
    partitioner.on_new_batch("t", previous_partition=(first + 1) % 6)
    assert partitioner.partition("t", None, ALL, ALL) == first
    partitioner.on_new_batch("t", previous_partition=first)
    second = partitioner.partition("t", None, ALL, ALL)
    assert second != first
    assert {partitioner.partition("t", None, ALL, ALL) for _ in range(20)} == {second}


def test_sticky_switches_among_available_partitions_uniformly() -> None:
    partitioner = DefaultPartitioner(random.Random(3))
    available = [1, 3, 4]
    chosen = []
    for _ in range(3000):
        partition = partitioner.partition("t", None, ALL, available)
        chosen.append(partition)
        partitioner.on_new_batch("t")
    counts = Counter(chosen)
    assert set(counts) == set(available)
    assert min(counts.values()) > 800  # about 1000 each
    assert all(a != b for a, b in itertools.pairwise(chosen))  # always moves


def test_sticky_with_one_or_no_available_partition() -> None:
    partitioner = DefaultPartitioner(random.Random(5))
    for _ in range(5):
        assert partitioner.partition("t", None, ALL, [4]) == 4
        partitioner.on_new_batch("t")
    seen = set()
    for _ in range(200):
        seen.add(partitioner.partition("t", None, ALL, []))
        partitioner.on_new_batch("t")
    assert seen == set(ALL)  # nothing available: any partition


def test_sticky_partition_beyond_the_partition_list_is_replaced() -> None:
    partitioner = DefaultPartitioner(random.Random(2))
    while partitioner.partition("t", None, ALL, ALL) < 3:
        partitioner.on_new_batch("t")
    assert partitioner.partition("t", None, [0, 1, 2], [0, 1, 2]) in (0, 1, 2)


def test_round_robin_cycles_available_partitions_and_ignores_keys() -> None:
    partitioner = RoundRobinPartitioner()
    picks = [partitioner.partition("t", b"same-key", ALL, ALL) for _ in range(12)]
    assert picks == ALL + ALL
    assert [partitioner.partition("u", None, ALL, [2, 5]) for _ in range(4)] == [2, 5, 2, 5]
    assert partitioner.partition("t", None, ALL, []) == 0  # turn 12 over all six
    partitioner.on_new_batch("t")
    assert partitioner.partition("t", None, ALL, ALL) == 1


def test_custom_callables_and_as_partitioner() -> None:
    calls: list[tuple[bytes | None, Sequence[int], Sequence[int]]] = []

    def last_available(key: bytes | None, all_: Sequence[int], available: Sequence[int]) -> int:
        calls.append((key, all_, available))
        return available[-1]

    partitioner = as_partitioner(last_available)
    assert isinstance(partitioner, CallablePartitioner)
    assert isinstance(partitioner, Partitioner)
    assert partitioner.partition("t", b"k", ALL, [1, 2]) == 2
    assert calls == [(b"k", ALL, [1, 2])]
    partitioner.on_new_batch("t")
    with pytest.raises(ValueError, match="chose partition 9"):
        as_partitioner(lambda key, all_, available: 9).partition("t", None, ALL, ALL)
    assert isinstance(as_partitioner(None), DefaultPartitioner)
    round_robin = RoundRobinPartitioner()
    assert as_partitioner(round_robin) is round_robin
    with pytest.raises(TypeError):
        as_partitioner(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DefaultPartitioner().partition("t", None, [], [])
