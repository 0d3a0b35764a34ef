"""Decoding fetched record batches into ``ConsumerRecord`` for the consumer.

How this works and why: a Fetch response's records are whole v2 batches, except
that the broker may cut the last one at the size limit — that partial tail is
ignored (the next fetch starts at it). Control batches are skipped; under
read_committed, batches of aborted transactions (from the response's aborted list)
are dropped until their producer's abort marker. Offsets may have gaps (compaction).
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.storage.batch import (
    CONTROL_MASK,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    check_batch,
    parse_header,
)
from odradek.storage.records import ABORT_MARKER, decode_control_record, iter_records


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One fetched record (aiokafka's shape); timestamp_type 0 = Create, 1 = LogAppend."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    leader_epoch: int = -1

    @property
    def serialized_key_size(self) -> int:
        return -1 if self.key is None else len(self.key)

    @property
    def serialized_value_size(self) -> int:
        return -1 if self.value is None else len(self.value)


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    aborted: list[tuple[int, int]] | None,
    verify_crc: bool = False,
) -> tuple[list[ConsumerRecord], int]:
    """Records at or after ``fetch_offset`` and the offset after the last whole batch.

    ``aborted`` (read_committed only) lists (producer id, first offset) of aborted
    transactions; their records are skipped until the producer's abort marker.
    """
    buf = memoryview(data)
    out: list[ConsumerRecord] = []
    position = 0
    next_offset = fetch_offset
    pending = sorted(aborted or (), key=lambda a: a[1])
    active: set[int] = set()
    while position + LOG_OVERHEAD <= len(buf):
        length = int.from_bytes(buf[position + 8 : position + 12], "big", signed=True)
        if length <= 0 or position + LOG_OVERHEAD + length > len(buf):
            break  # the broker cut the last batch at the size limit
        header = check_batch(buf, position) if verify_crc else parse_header(buf, position)
        position += LOG_OVERHEAD + length
        last = header.base_offset + header.last_offset_delta
        if last < fetch_offset:
            continue
        next_offset = max(next_offset, last + 1)
        if aborted is not None:
            while pending and pending[0][1] <= last:
                active.add(pending.pop(0)[0])
        if header.attributes & CONTROL_MASK:
            if aborted is not None:
                for record in iter_records(buf, header):
                    if decode_control_record(record)[1] == ABORT_MARKER:
                        active.discard(header.producer_id)
            continue
        if (
            aborted is not None
            and header.attributes & TRANSACTIONAL_MASK
            and header.producer_id in active
        ):
            continue
        ts_type = 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0
        for record in iter_records(buf, header):
            if record.offset < fetch_offset:
                continue
            out.append(
                ConsumerRecord(
                    topic,
                    partition,
                    record.offset,
                    record.timestamp,
                    ts_type,
                    record.key,
                    record.value,
                    [(h.key, h.value) for h in record.headers],
                    header.partition_leader_epoch,
                )
            )
    return out, next_offset
