"""Typed errors raised by the storage layer.

Storage knows nothing about the wire protocol, but every error that a client can
cause carries the *name* of the Kafka error code it maps to (``code``), so the
handler layer can answer with ``ErrorCode[err.code]`` without a lookup table of
its own. Errors that mean "odradek has a bug" are assertions, not these.
"""

from __future__ import annotations

from odradek.records.errors import CodedError

# The records codec (odradek/records/, shared with the client and Spark) raises
# CorruptRecordError and RecordTooLargeError from the same base, so one name covers
# both and every ``except StorageError`` also catches the codec's errors.
StorageError = CodedError


class CommittedDataCorruptError(StorageError):
    """Damage in data that was flushed (below a log's recovery point) of a log that may
    not be cut there (the metadata log): the caller stops instead of truncating.

    ``path`` and ``position`` say where the first bad batch starts (the file size when
    the file ends early); ``valid_bytes`` is how much of that file before it is sound.
    """

    def __init__(self, path: object, position: int, detail: str) -> None:
        super().__init__(f"{path} position {position}: {detail}")
        self.path = path
        self.position = position
        self.detail = detail


class InvalidRecordError(StorageError):
    """A well-formed batch that breaks a rule (control batch from a client, bad count...)."""

    code = "INVALID_RECORD"


class InvalidTimestampError(StorageError):
    """A CreateTime timestamp outside ``message.timestamp.{before,after}.max.ms``."""

    code = "INVALID_TIMESTAMP"


class OffsetOutOfRangeError(StorageError):
    """A read or truncation outside [log start offset, log end offset]."""

    code = "OFFSET_OUT_OF_RANGE"


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose first offset is below the log end offset."""

    code = "UNKNOWN_SERVER_ERROR"


class OutOfOrderSequenceError(StorageError):
    """An idempotent batch whose sequence does not follow the producer's last one."""

    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(StorageError):
    """A batch from a producer epoch older than the one the log has seen (fenced)."""

    code = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is still open."""

    code = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from a coordinator epoch older than the producer last saw."""

    code = "TRANSACTION_COORDINATOR_FENCED"


class LogConfigError(StorageError):
    """A bad configuration value; the message names the key."""

    code = "INVALID_CONFIG"

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
