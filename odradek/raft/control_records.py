"""The metadata log's control batches: LeaderChange, as Kafka writes and reads it.

How this works and why: a new leader's first entry in its epoch is a control batch
(attributes bit 5 set) holding one control record. Kafka's control record key is two
int16s, a version (0) and a type (``ControlRecordType``: 0 ABORT, 1 COMMIT, 2
LEADER_CHANGE, 3 SNAPSHOT_HEADER, 4 SNAPSHOT_FOOTER, ...); the LeaderChange value is a
``LeaderChangeMessage`` (kio's entity, v0: version, leader id, voters, granting voters)
serialized by kio. Written with baseOffset 0 and no leader epoch: the log stamps both
when the leader appends it (see ``odradek.raft.log``'s payload contract), so the same
bytes are valid at any offset.

``leader_change_entry`` is the ``control_entry`` callable ``RaftNode`` takes for a disk
log; ``decode_leader_change`` reads one back (the wire layer, dump-log, tests), and
raises ``CorruptRecordError`` for anything that is not exactly one such record.
"""

from __future__ import annotations

import io
import struct
import time
from typing import Final

from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from odradek.records.codec import Record, decode_batch, decode_control_record, encode_batch
from odradek.records.errors import CorruptRecordError

# ControlRecordType.LEADER_CHANGE in Kafka's numbering (0 and 1 are the txn markers).
LEADER_CHANGE_TYPE: Final = 2
CONTROL_KEY_VERSION: Final = 0
LEADER_CHANGE_VERSION: Final = 0
_CONTROL_KEY = struct.Struct(">hh")  # version, type


def encode_leader_change(
    leader_id: int,
    voters: frozenset[int],
    granting_voters: frozenset[int],
    *,
    timestamp_ms: int | None = None,
) -> bytes:
    """One v2 control batch holding one LeaderChange control record (count 1)."""
    message = LeaderChangeMessage(
        version=i16(LEADER_CHANGE_VERSION),
        leader_id=BrokerId(leader_id),
        voters=tuple(Voter(voter_id=i32(voter)) for voter in sorted(voters)),
        granting_voters=tuple(Voter(voter_id=i32(voter)) for voter in sorted(granting_voters)),
    )
    value = io.BytesIO()
    entity_writer(LeaderChangeMessage)(value, message)
    if timestamp_ms is None:
        timestamp_ms = time.time_ns() // 1_000_000
    record = Record(
        0,
        timestamp_ms,
        _CONTROL_KEY.pack(CONTROL_KEY_VERSION, LEADER_CHANGE_TYPE),
        value.getvalue(),
    )
    return encode_batch([record], is_control=True)


def leader_change_entry(
    epoch: int, leader_id: int, voters: frozenset[int], granting_voters: frozenset[int]
) -> tuple[bytes, int]:
    """``RaftNode``'s ``control_entry`` for a disk log: the batch and its offset count."""
    return encode_leader_change(leader_id, voters, granting_voters), 1


def decode_leader_change(payload: bytes) -> LeaderChangeMessage:
    """The LeaderChangeMessage of a control batch (CRC checked); CorruptRecordError if
    the batch is not a control batch of exactly one LeaderChange record."""
    decoded = decode_batch(payload)
    if not decoded.header.is_control:
        raise CorruptRecordError("not a control batch")
    if len(decoded.records) != 1:
        raise CorruptRecordError(f"{len(decoded.records)} records in a LeaderChange batch")
    record = decoded.records[0]
    _, control_type = decode_control_record(record)
    if control_type != LEADER_CHANGE_TYPE:
        raise CorruptRecordError(f"control record type {control_type}, not LeaderChange")
    if record.value is None:
        raise CorruptRecordError("LeaderChange record without a value")
    try:
        message, _ = entity_reader(LeaderChangeMessage)(record.value, 0)
    except Exception as error:  # kio raises assorted errors on short or garbled input
        raise CorruptRecordError(f"LeaderChange value: {type(error).__name__}: {error}") from None
    assert isinstance(message, LeaderChangeMessage)
    return message


__all__ = [
    "LEADER_CHANGE_TYPE",
    "decode_leader_change",
    "encode_leader_change",
    "leader_change_entry",
]
