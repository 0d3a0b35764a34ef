"""Readable text for ``__consumer_offsets`` records (``dump-log --offsets-decoder``).

Like Kafka's DumpLogSegments offsets decoder: the key and value of each record are
decoded with the coordinator's schemas (odradek/coordinator/group/records.py) and
printed as ``key: offset_commit::group=...,partition=topic-0`` and a payload with the
committed offset, or the group's generation, protocol and members. Records that do
not decode are shown as such rather than stopping the dump.
"""

from __future__ import annotations

from odradek.coordinator.group.records import (
    OffsetKey,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
)

OFFSETS_TOPIC_PREFIX = "__consumer_offsets-"


def describe(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """(key text, payload text) for one record of __consumer_offsets."""
    if key is None:
        return "null", "<record without a key>"
    try:
        decoded = decode_key(key)
    except RecordFormatError as error:
        return f"<undecodable key: {error}>", "?"
    if isinstance(decoded, OffsetKey):
        key_text = (
            f"offset_commit::group={decoded.group},partition={decoded.topic}-{decoded.partition}"
        )
        return key_text, _offset_payload(value)
    return f"group_metadata::group={decoded.group}", _group_payload(value)


def _offset_payload(value: bytes | None) -> str:
    if value is None:
        return "<DELETE>"
    try:
        v = decode_offset_value(value)
    except RecordFormatError as error:
        return f"<undecodable value: {error}>"
    return (
        f"offset={v.offset},leaderEpoch={v.leader_epoch},metadata={v.metadata},"
        f"commitTimestamp={v.commit_timestamp}"
    )


def _group_payload(value: bytes | None) -> str:
    if value is None:
        return "<DELETE>"
    try:
        v = decode_group_value(value)
    except RecordFormatError as error:
        return f"<undecodable value: {error}>"
    members = ",".join(
        f"{m.member_id}"
        + (f"[{m.group_instance_id}]" if m.group_instance_id else "")
        + f"({m.client_id}@{m.client_host},session={m.session_timeout_ms},"
        f"rebalance={m.rebalance_timeout_ms},assignment={len(m.assignment)}B)"
        for m in v.members
    )
    return (
        f"protocolType={v.protocol_type},generation={v.generation},protocol={v.protocol},"
        f"leader={v.leader},members=[{members}]"
    )
