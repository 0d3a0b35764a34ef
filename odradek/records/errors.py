"""Errors of the records codec, and the base of every error that names a Kafka code.

How this works and why: the codec (batch headers, records, compression) is shared by
the broker's storage, the client and the Spark reader, so its errors live here, below
all of them. Every error a peer can cause carries the *name* of the Kafka error code it
maps to (``code``); the storage layer's ``StorageError`` is this same base, so an
``except StorageError`` also catches a corrupt or oversized batch found by the codec.
"""

from __future__ import annotations


class CodedError(Exception):
    """Base class; ``code`` names the Kafka protocol error it maps to."""

    code = "KAFKA_STORAGE_ERROR"


class CorruptRecordError(CodedError):
    """A batch failed its length, magic or CRC check (the peer sent bad bytes)."""

    code = "CORRUPT_MESSAGE"


class RecordTooLargeError(CodedError):
    """A batch, or what it decompresses to, larger than allowed."""

    code = "MESSAGE_TOO_LARGE"
