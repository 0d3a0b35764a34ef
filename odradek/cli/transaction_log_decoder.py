"""Readable text for ``__transaction_state`` records (``dump-log --transaction-log-decoder``).

How this works and why: each record of the transaction log is one transactional id's
state as its coordinator last wrote it, in Kafka's TransactionLogKey/Value layout. The
key and value are decoded with the coordinator's own codec
(odradek/coordinator/transaction/records.py), so the dump shows exactly what a
coordinator would replay, and printed as Kafka's DumpLogSegments prints them:
``key: transaction_metadata::transactionalId=X`` and a payload
``producerId:..,producerEpoch:..,state=Ongoing,partitions=[t-0,t-1],
txnLastUpdateTimestamp=..,txnTimeoutMs=..``. A null value (the id expired) is
``<DELETE>``. A record that does not decode is shown as unreadable, with the reason,
and the dump goes on: one bad record should not hide the rest of the log.
"""

from __future__ import annotations

from typing import Final

from odradek.coordinator.transaction.records import (
    RecordFormatError,
    TransactionValue,
    decode_key,
    decode_value,
)

TRANSACTION_TOPIC_PREFIX: Final = "__transaction_state-"
# Kafka's transaction state ids, as written in the value's status byte.
STATE_NAMES: Final = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


def describe(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """(key text, payload text) for one record of __transaction_state."""
    if key is None:
        return "null", "<unreadable transaction log record: no key>"
    try:
        transactional_id = decode_key(key)
    except (RecordFormatError, ValueError) as error:
        return f"<unreadable transaction log key: {error}>", "?"
    key_text = f"transaction_metadata::transactionalId={transactional_id}"
    if value is None:
        return key_text, "<DELETE>"
    try:
        decoded = decode_value(value)
    except (RecordFormatError, ValueError) as error:
        return key_text, f"<unreadable transaction log value: {error}>"
    return key_text, payload(decoded)


def payload(value: TransactionValue) -> str:
    partitions = ",".join(
        f"{topic}-{index}" for topic, indexes in value.partitions or () for index in indexes
    )
    return (
        f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
        f"state={STATE_NAMES.get(value.status, f'Unknown({value.status})')},"
        f"partitions=[{partitions}],txnLastUpdateTimestamp={value.last_update_ms},"
        f"txnTimeoutMs={value.timeout_ms}"
    )
