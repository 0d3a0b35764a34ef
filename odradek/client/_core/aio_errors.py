"""The errors the aiokafka-shaped faces raise, under ``aiokafka.errors``' names.

How this works and why: aiokafka programs catch ``KafkaError``,
``KafkaConnectionError``, ``KafkaTimeoutError`` or one broker error class per code
(``TopicAlreadyExistsError``, ``UnknownTopicOrPartitionError``, ...), and read
``errno``, ``message``, ``retriable`` from them. The asyncio core raises odradek's own
errors (a confluent-shaped ``KafkaError`` carrying the code, connection errors,
``TimeoutError``); ``translate`` turns each into the class an aiokafka program
expects, at the face's boundary (``aio_boundary``), with the core's error as its
cause. Every one of them is also odradek's ``KafkaError`` and keeps the core error's
code and flags (``code()``, ``fatal()``, ``txn_requires_abort()``), a timeout is
still a ``TimeoutError``, a connection error still odradek's connection error: code
written against odradek's own faces catches and reads what it did before. The one
name both APIs want differently, ``retriable`` (aiokafka's class attribute, odradek's
method), is a ``Flag`` that reads either way.

One class per broker error code is made from kio's ``ErrorCode``: named
``<CamelCaseName>Error``, except where aiokafka's name differs (``_AIOKAFKA_NAMES``),
with Kafka's retriable flag.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core import connection
from odradek.client._core.errors import KafkaError as CoreKafkaError
from odradek.client._core.errors import LocalError

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class Flag:
    """A boolean that is also a method returning itself: ``if error.retriable:``
    (aiokafka) and ``error.retriable()`` (odradek, confluent-kafka) both work."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __bool__(self) -> bool:
        return self.value

    def __call__(self) -> bool:
        return self.value

    def __eq__(self, other: object) -> bool:
        return self.value == (other.value if isinstance(other, Flag) else other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


YES: Final = Flag(True)
NO: Final = Flag(False)


class KafkaError(RuntimeError, CoreKafkaError):
    """The base of every aiokafka error; ``retriable`` and ``invalid_metadata`` are
    class attributes, as in aiokafka. ``_default_code`` is the odradek code of one
    made without a core error behind it."""

    retriable = NO
    invalid_metadata = False
    _default_code: ErrorCode | LocalError = ErrorCode.unknown_server_error

    def __init__(self, *args: Any) -> None:
        CoreKafkaError.__init__(self, self._default_code, ", ".join(str(a) for a in args))
        self.args = args

    def __str__(self) -> str:
        text = ", ".join(str(a) for a in self.args)
        return f"{type(self).__name__}: {text}" if text else type(self).__name__


class IllegalStateError(KafkaError):
    _default_code = LocalError.state


class IllegalArgumentError(KafkaError, ValueError):
    """A bad argument (a ``ValueError`` too, as odradek raised before)."""

    _default_code = LocalError.invalid_arg


class NoBrokersAvailable(KafkaError):
    retriable = YES
    invalid_metadata = True
    _default_code = LocalError.transport


class KafkaTimeoutError(KafkaError, TimeoutError):
    _default_code = LocalError.timed_out


class KafkaConnectionError(KafkaError, connection.KafkaConnectionError):
    retriable = YES  # type: ignore[assignment]  # a Flag is a bool too
    invalid_metadata = True
    _default_code = LocalError.transport


class KafkaConfigurationError(KafkaError):
    pass


class UnsupportedCodecError(KafkaError):
    pass


class NoOffsetForPartitionError(KafkaError):
    _default_code = LocalError.no_offset


class RecordTooLargeError(KafkaError):
    pass


class ProducerClosed(KafkaError):
    pass


class ProducerFenced(KafkaError):
    _default_code = LocalError.fenced


# aiokafka's other names, so the except clauses of ported programs import; this
# client does not raise them (its connection errors are KafkaConnectionError).
class NodeNotReadyError(KafkaError):
    retriable = YES


class KafkaProtocolError(KafkaError):
    retriable = YES


class CorrelationIdError(KafkaProtocolError):
    pass


class Cancelled(KafkaError):
    retriable = YES


class TooManyInFlightRequests(KafkaError):
    retriable = YES


class StaleMetadata(KafkaError):
    retriable = YES
    invalid_metadata = True


class UnrecognizedBrokerVersion(KafkaError):
    pass


class IncompatibleBrokerVersion(KafkaError):
    pass


class AuthenticationMethodNotSupported(KafkaError):
    pass


class AuthenticationFailedError(KafkaError):
    pass


class KafkaUnavailableError(KafkaError):
    pass


class QuotaViolationError(KafkaError):
    pass


class ConsumerStoppedError(Exception):
    """``getone``/``getmany`` on a stopped consumer."""


class IllegalOperation(Exception):
    """A call the consumer's configuration does not allow (``committed`` without a
    ``group_id``, ...)."""


class BrokerResponseError(KafkaError):
    """An error code answered by a broker: ``errno``, ``message`` (Kafka's upper-case
    name) and ``description`` as aiokafka's; ``code()`` as odradek's ``KafkaError``."""

    errno: int = -1
    message: str = "UNKNOWN_SERVER_ERROR"
    description: str = ""

    def __str__(self) -> str:
        return f"[Error {self.errno}] {KafkaError.__str__(self)}"


class CommitFailedError(BrokerResponseError):
    """The group rebalanced (or this member fell out of it) before the commit."""

    errno = int(ErrorCode.rebalance_in_progress)
    message = "COMMIT_FAILED"
    _default_code = ErrorCode.rebalance_in_progress


# aiokafka's class names where they are not ``<CamelCase of Kafka's name>Error``.
_AIOKAFKA_NAMES: Final = {
    ErrorCode.none: "NoError",
    ErrorCode.unknown_server_error: "UnknownError",
    ErrorCode.corrupt_message: "CorruptRecordException",
    ErrorCode.invalid_fetch_size: "InvalidFetchRequestError",
    ErrorCode.not_leader_or_follower: "NotLeaderForPartitionError",
    ErrorCode.message_too_large: "MessageSizeTooLargeError",
    ErrorCode.network_exception: "StaleLeaderEpochCodeError",
    ErrorCode.coordinator_load_in_progress: "GroupLoadInProgressError",
    ErrorCode.coordinator_not_available: "GroupCoordinatorNotAvailableError",
    ErrorCode.not_coordinator: "NotCoordinatorForGroupError",
    ErrorCode.invalid_topic_exception: "InvalidTopicError",
    ErrorCode.invalid_replica_assignment: "InvalidReplicationAssignmentError",
    ErrorCode.invalid_config: "InvalidConfigurationError",
    ErrorCode.kafka_storage_error: "KafkaStorageError",
}
# aiokafka drops the ``Error`` suffix for the codes from 45 (sequence numbers) to 79
# (member id required), where Kafka's names were already nouns.
_NO_SUFFIX_FROM, _NO_SUFFIX_TO = 45, 79
_METADATA_CODES: Final = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
    }
)


def _class_name(code: ErrorCode) -> str:
    named = _AIOKAFKA_NAMES.get(code)
    if named is not None:
        return named
    camel = "".join(word.capitalize() for word in code.name.split("_"))
    return camel if _NO_SUFFIX_FROM <= code.value <= _NO_SUFFIX_TO else camel + "Error"


def _broker_class(code: ErrorCode) -> type[BrokerResponseError]:
    return type(
        _class_name(code),
        (BrokerResponseError,),
        {
            "__module__": __name__,
            "__doc__": f"Kafka error {code.value}, {code.name.upper()}.",
            "errno": code.value,
            "message": code.name.upper(),
            "retriable": YES if code.retriable else NO,
            "invalid_metadata": code in _METADATA_CODES,
            "_default_code": code,
        },
    )


BROKER_ERRORS: Final[dict[int, type[BrokerResponseError]]] = {
    code.value: _broker_class(code) for code in ErrorCode
}
globals().update({cls.__name__: cls for cls in BROKER_ERRORS.values()})
UnknownError: Final = BROKER_ERRORS[ErrorCode.unknown_server_error.value]


def for_code(errno: int) -> type[BrokerResponseError]:
    """The class of a broker error code (``UnknownError`` for one Kafka has not got)."""
    return BROKER_ERRORS.get(errno, UnknownError)


_LOCAL: Final[dict[LocalError, type[KafkaError]]] = {
    LocalError.timed_out: KafkaTimeoutError,
    LocalError.msg_timed_out: KafkaTimeoutError,
    LocalError.transport: KafkaConnectionError,
    LocalError.fenced: ProducerFenced,
    LocalError.state: IllegalStateError,
    LocalError.invalid_arg: IllegalArgumentError,
    LocalError.no_offset: NoOffsetForPartitionError,
    LocalError.not_configured: IllegalStateError,
}


def translate(error: BaseException) -> BaseException:
    """The aiokafka-shaped error for one the core raised (itself if it has none)."""
    if isinstance(error, KafkaError | ConsumerStoppedError | IllegalOperation):
        return error
    if isinstance(error, CoreKafkaError):
        code = error.code()
        kind = for_code(code.value) if isinstance(code, ErrorCode) else _LOCAL.get(code, KafkaError)
        return adopt(kind(error.str()), error)
    if isinstance(error, connection.KafkaConnectionError):
        return KafkaConnectionError(str(error))
    if isinstance(error, TimeoutError):  # asyncio.wait_for's, max.block.ms, ...
        return KafkaTimeoutError(str(error))
    if isinstance(error, BufferError):  # buffer.memory full for max.block.ms
        return KafkaTimeoutError(str(error))
    return error


def adopt(shaped: KafkaError, source: CoreKafkaError) -> KafkaError:
    """``shaped`` with ``source``'s code, name and flags (odradek's reading of it)."""
    shaped._code, shaped._name = source.code(), source.name()
    shaped._fatal, shaped._txn_requires_abort = source.fatal(), source.txn_requires_abort()
    shaped.retriable = YES if source.retriable() else NO
    return shaped


def aio_boundary(method: F) -> F:
    """Raise what ``method`` (a coroutine function of an aio face) raises as
    ``translate`` shapes it; cancellation passes through untouched."""

    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            shaped = translate(error)
            if shaped is error:
                raise
            raise shaped from error

    return call  # type: ignore[return-value]


def sync_boundary(method: Callable[..., Any]) -> Callable[..., Any]:
    """``aio_boundary`` for the faces' plain (non-async) methods."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as error:
            shaped = translate(error)
            if shaped is error:
                raise
            raise shaped from error

    return call
