"""The client's error types: ``KafkaError`` (a broker's ErrorCode or a client-side
``LocalError``), shaped like confluent-kafka's, and the classification helpers every
layer of the client uses to decide whether to retry.

They live apart from the cluster view so producer, consumer and admin modules can
name an error without importing the connection machinery.
"""

from __future__ import annotations

import enum
from typing import Final

from kio.schema.errors import ErrorCode


class LocalError(enum.IntEnum):
    """Errors the client reports itself, never a broker: librdkafka's negative codes,
    so code written for confluent-kafka compares them alike (printed ``_NAME``)."""

    application = -143  # raised by the application (confluent's KafkaError(_APPLICATION))
    assignment_lost = -142
    fenced = -144  # a newer producer instance with the same transactional.id
    not_configured = -145  # a transactional call on a producer without transactional.id
    max_poll_exceeded = -147
    fatal = -150
    purge_queue = -152  # a queued record dropped by abort_transaction
    state = -172  # the call is not allowed in the producer's transaction state
    conflict = -173  # another transactional call is in progress
    timed_out = -185
    invalid_arg = -186
    no_offset = -168
    partition_eof = -191  # librdkafka's end-of-partition event (never raised here yet)
    msg_timed_out = -192  # a record not delivered within message.timeout.ms
    transport = -195  # no broker could be reached (reported through error_cb)
    authentication = -169  # SASL failed (client/_core/sasl.py; reported through error_cb)


class KafkaError(Exception):
    """An error answered by a broker (``code()`` is kio's ErrorCode) or found by the
    client itself (a ``LocalError``, e.g. ``KafkaError._MAX_POLL_EXCEEDED``).

    Shaped like confluent-kafka's KafkaError — ``code()``, ``name()``, ``str()``,
    ``retriable()``, ``fatal()`` are methods — so code written for it, such as
    ``msg.error().code() == KafkaError._PARTITION_EOF``, runs unchanged.
    """

    _APPLICATION: Final = LocalError.application
    _ASSIGNMENT_LOST: Final = LocalError.assignment_lost
    _CONFLICT: Final = LocalError.conflict
    _FATAL: Final = LocalError.fatal
    _FENCED: Final = LocalError.fenced
    _INVALID_ARG: Final = LocalError.invalid_arg
    _MAX_POLL_EXCEEDED: Final = LocalError.max_poll_exceeded
    _NOT_CONFIGURED: Final = LocalError.not_configured
    _NO_OFFSET: Final = LocalError.no_offset
    _PARTITION_EOF: Final = LocalError.partition_eof
    _PURGE_QUEUE: Final = LocalError.purge_queue
    _MSG_TIMED_OUT: Final = LocalError.msg_timed_out
    _TRANSPORT: Final = LocalError.transport
    _AUTHENTICATION: Final = LocalError.authentication
    _STATE: Final = LocalError.state
    _TIMED_OUT: Final = LocalError.timed_out

    def __init__(
        self,
        code: ErrorCode | LocalError,
        message: str = "",
        fatal: bool = False,
        retriable: bool | None = None,
        txn_requires_abort: bool = False,
    ) -> None:
        """``fatal``/``retriable``/``txn_requires_abort`` as confluent-kafka's keywords;
        ``retriable`` None means the broker code's own classification."""
        self._name = code.name.upper() if isinstance(code, ErrorCode) else f"_{code.name.upper()}"
        super().__init__(f"{self._name}{': ' + message if message else ''}")
        self._code = code
        self._message = message
        self._fatal = fatal
        self._retriable = retriable
        self._txn_requires_abort = txn_requires_abort

    def code(self) -> ErrorCode | LocalError:
        return self._code

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._message or self._name

    def retriable(self) -> bool:
        if self._retriable is not None:
            return self._retriable
        return isinstance(self._code, ErrorCode) and self._code.retriable

    def fatal(self) -> bool:
        """The producer can do nothing more (fenced, say): close it and make a new one."""
        return self._fatal

    def txn_requires_abort(self) -> bool:
        """The current transaction failed: abort it and start again."""
        return self._txn_requires_abort


def error_code(error: BaseException) -> ErrorCode | LocalError | None:
    """The code of a client error (``KafkaError``), None for anything else."""
    return error.code() if isinstance(error, KafkaError) else None


def is_retriable(error: BaseException) -> bool:
    """A retriable broker error, or a lost connection (``retriable = True`` on it)."""
    if isinstance(error, KafkaError):
        return error.retriable()
    return bool(getattr(error, "retriable", False))
