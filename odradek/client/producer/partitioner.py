"""Producer partitioners: which partition a record without an explicit one goes to.

How this works and why: a record with a key must land where every other Kafka client
would put it, so that records with the same key — from a Java producer, librdkafka
(``partitioner=murmur2_random``) or this client — end up in one partition and stay in
order. That is Kafka's rule: ``toPositive(murmur2(key)) % partitions``, where
``murmur2`` is the 32-bit MurmurHash2 variant of Java's ``Utils.murmur2`` (seed
``0x9747b28c``, little-endian 4-byte blocks, signed result) and ``toPositive`` clears
the sign bit. Keyed records ignore availability: the partition depends on the key and
the partition count only.

Records without a key are spread, not hashed:

- ``DefaultPartitioner`` — uniform sticky (KIP-480): all keyless records of a topic go
  to one partition until the producer reports with ``on_new_batch(topic)`` that the
  batch for it was sent (or is full); then it switches to another partition chosen at
  random among the available ones (those with a leader). Batches fill up instead of
  going out half-empty when linger expires.
- ``RoundRobinPartitioner`` — every record (keyed or not) goes to the next available
  partition of the topic in turn, like Java's ``RoundRobinPartitioner``.
- any callable ``(key, all_partitions, available_partitions) -> partition``, the
  signature kafka-python uses; ``as_partitioner`` wraps it.

librdkafka's ``partitioner`` values (``librdkafka_partitioner``), each checked key by
key against confluent-kafka in tests/client/test_partitioner_names_interop.py. The
hashed partition is ``hash % partitions`` for keyed records:

- ``consistent_random`` (librdkafka's default): CRC-32 (zlib's) of the key, unsigned;
  null *and empty* keys are spread (sticky).
- ``consistent``: CRC-32 for every key; null and empty keys hash as empty (CRC 0:
  partition 0).
- ``murmur2_random`` (the Java client's default): Kafka's murmur2 with the sign bit
  cleared; null keys spread (sticky), empty keys hashed.
- ``murmur2``: the same, and null keys hash as the empty key.
- ``fnv1a_random`` / ``fnv1a``: 32-bit FNV-1a read as a signed int32, partition
  ``|h| % partitions`` (so the same as Sarama's default hasher); null keys spread /
  hashed as empty.
- ``random``: every record to a random available partition, keyed or not (keyless
  records sticky).

aiokafka's default (``AIOKAFKA_DEFAULT``) is murmur2 for keyed records and a fresh
random available partition for every keyless one (no stickiness), as aiokafka does.

``all_partitions`` lists the topic's partition ids in ascending order;
``available_partitions`` those with a live leader (a subset, possibly empty).
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Final, Protocol, runtime_checkable

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK: Final = 0xFFFFFFFF
_BLOCKS = struct.Struct("<I")

PartitionerFunction = Callable[[bytes | None, Sequence[int], Sequence[int]], int]


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2, seed 0x9747b28c, signed result."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length & ~3
    for (k,) in _BLOCKS.iter_unpack(memoryview(data)[:body]):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: the value with its sign bit cleared (not ``abs``)."""
    return number & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's murmur2) picks."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


def fnv1a(data: bytes | bytearray | memoryview) -> int:
    """32-bit FNV-1a (offset basis 0x811c9dc5, prime 0x01000193), unsigned."""
    h = 0x811C9DC5
    for byte in bytes(data):
        h = ((h ^ byte) * 0x01000193) & _MASK
    return h


def crc32_partition(key: bytes, num_partitions: int) -> int:
    """librdkafka's ``consistent`` hash: unsigned CRC-32 of the key mod partitions."""
    return zlib.crc32(key) % num_partitions


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


def fnv1a_partition(key: bytes, num_partitions: int) -> int:
    """librdkafka's ``fnv1a``: the hash as a signed int32, ``|h| % partitions``."""
    h = fnv1a(key)
    signed = h - 0x1_0000_0000 if h & 0x8000_0000 else h
    return abs(signed) % num_partitions


@runtime_checkable
class Partitioner(Protocol):
    """What the producer asks: a partition per record, and news of each new batch."""

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int: ...

    def on_new_batch(self, topic: str, previous_partition: int | None = None) -> None: ...


def _check(all_partitions: Sequence[int]) -> None:
    if not all_partitions:
        raise ValueError("cannot partition a record for a topic without partitions")


class DefaultPartitioner:
    """murmur2 for keyed records; uniform sticky (KIP-480) for keyless ones."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._sticky: dict[str, int] = {}
        self._moved_from: dict[str, int] = {}  # topic -> sticky partition just left

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        _check(all_partitions)
        if key is not None:
            return all_partitions[default_partition(key, len(all_partitions))]
        current = self._sticky.get(topic)
        if current is None or current > all_partitions[-1]:  # partition ids ascend
            current = self._next(topic, all_partitions, available_partitions)
        return current

    def sticky_partition(self, topic: str) -> int | None:
        """The partition keyless records of ``topic`` currently go to (None: not chosen)."""
        return self._sticky.get(topic)

    def on_new_batch(self, topic: str, previous_partition: int | None = None) -> None:
        """The batch keyless records were going into is sent or full: switch partition.

        With ``previous_partition`` (the partition of that batch), a stale report — the
        sticky partition already moved on — changes nothing, as in Kafka.
        """
        current = self._sticky.get(topic)
        if previous_partition is not None and current != previous_partition:
            return
        # The next partition is chosen lazily, when the next keyless record arrives and
        # the partition lists are at hand; remember which one to move away from.
        self._sticky.pop(topic, None)
        if current is not None:
            self._moved_from[topic] = current

    def _next(
        self, topic: str, all_partitions: Sequence[int], available_partitions: Sequence[int]
    ) -> int:
        old = self._moved_from.pop(topic, self._sticky.get(topic))
        if len(available_partitions) == 1:
            chosen = available_partitions[0]
        elif available_partitions:
            choices = [p for p in available_partitions if p != old] or list(available_partitions)
            chosen = self._rng.choice(choices)
        else:
            chosen = self._rng.choice(list(all_partitions))
        self._sticky[topic] = chosen
        return chosen


KeyHash = Callable[[bytes, int], int]  # (key, partition count) -> index


class HashPartitioner(DefaultPartitioner):
    """A librdkafka-style partitioner: ``key_hash`` for keyed records; keyless ones
    (and, with ``empty_is_null``, empty keys) hashed as the empty key when
    ``hash_null``, else spread — sticky like ``DefaultPartitioner``, or a fresh random
    available partition per record when ``sticky`` is false (aiokafka)."""

    def __init__(
        self,
        key_hash: KeyHash | None,
        *,
        hash_null: bool = False,
        empty_is_null: bool = False,
        sticky: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(rng)
        self.key_hash = key_hash
        self.hash_null = hash_null
        self.empty_is_null = empty_is_null
        self.sticky = sticky

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        _check(all_partitions)
        if key is not None and not key and self.empty_is_null:
            key = None
        if key is None and self.hash_null:
            key = b""
        if key is not None:
            if self.key_hash is None:  # "random": keys are ignored
                return self._rng.choice(list(available_partitions or all_partitions))
            return all_partitions[self.key_hash(key, len(all_partitions))]
        if not self.sticky:
            return self._rng.choice(list(available_partitions or all_partitions))
        return super().partition(topic, None, all_partitions, available_partitions)


def librdkafka_partitioner(name: str) -> HashPartitioner | None:
    """The partitioner librdkafka's ``partitioner`` property names; None: unknown."""
    factories: dict[str, Callable[[], HashPartitioner]] = {
        "consistent_random": lambda: HashPartitioner(crc32_partition, empty_is_null=True),
        "consistent": lambda: HashPartitioner(crc32_partition, hash_null=True),
        "murmur2_random": lambda: HashPartitioner(murmur2_partition),
        "murmur2": lambda: HashPartitioner(murmur2_partition, hash_null=True),
        "fnv1a_random": lambda: HashPartitioner(fnv1a_partition),
        "fnv1a": lambda: HashPartitioner(fnv1a_partition, hash_null=True),
        "random": lambda: HashPartitioner(None),
        AIOKAFKA_DEFAULT: lambda: HashPartitioner(murmur2_partition, sticky=False),
    }
    factory = factories.get(name)
    return None if factory is None else factory()


AIOKAFKA_DEFAULT: Final = "aiokafka_default"  # murmur2; keyless: random per record
LIBRDKAFKA_PARTITIONERS: Final = (
    "consistent_random",
    "consistent",
    "murmur2_random",
    "murmur2",
    "fnv1a_random",
    "fnv1a",
    "random",
)


class RoundRobinPartitioner:
    """Every record to the next available partition in turn; keys are ignored."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        _check(all_partitions)
        turn = self._counters.get(topic, 0)
        self._counters[topic] = (turn + 1) & _MASK
        choices = available_partitions or all_partitions
        return choices[to_positive(turn) % len(choices)]

    def on_new_batch(self, topic: str, previous_partition: int | None = None) -> None:
        return None


class CallablePartitioner:
    """A kafka-python style ``(key, all_partitions, available_partitions)`` callable."""

    def __init__(self, function: PartitionerFunction) -> None:
        self.function = function

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        _check(all_partitions)
        chosen = self.function(key, all_partitions, available_partitions)
        if chosen not in all_partitions:
            raise ValueError(
                f"partitioner {self.function!r} chose partition {chosen!r} of topic "
                f"{topic!r}, which has partitions {list(all_partitions)}"
            )
        return int(chosen)

    def on_new_batch(self, topic: str, previous_partition: int | None = None) -> None:
        return None


def as_partitioner(partitioner: Partitioner | PartitionerFunction | None) -> Partitioner:
    """A ``Partitioner`` from one, from a plain callable, or the default (None)."""
    if partitioner is None:
        return DefaultPartitioner()
    if isinstance(partitioner, Partitioner):
        return partitioner
    if callable(partitioner):
        return CallablePartitioner(partitioner)
    raise TypeError(f"not a partitioner: {partitioner!r}")
