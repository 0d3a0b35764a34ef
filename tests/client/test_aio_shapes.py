"""aiokafka's shapes in ``odradek.aio`` without a broker: errors translated from the
core's keep odradek's reading of them, a BatchBuilder refuses what aiokafka's does,
a deserialized record keeps its serialized sizes."""

from __future__ import annotations

import aiokafka.errors
import pytest
from aiokafka.producer.message_accumulator import BatchBuilder as TheirBatchBuilder
from kio.schema.errors import ErrorCode

import odradek.aio
import odradek.aio.errors as errors
from odradek.client import KafkaError as CoreKafkaError
from odradek.client._core.aio_errors import translate
from odradek.client._core.connection import ConnectionLost, KafkaConnectionError
from odradek.client._core.errors import LocalError
from odradek.client.producer.accumulator import BufferFullError


def test_every_aiokafka_error_name_is_there_with_its_errno() -> None:
    for name in aiokafka.errors.__all__:
        assert hasattr(errors, name), name
    for errno, theirs in aiokafka.errors.kafka_errors.items():
        assert errors.for_code(errno).__name__ == theirs.__name__
        assert errors.for_code(errno).errno == errno
    assert errors.for_code(99_999) is errors.UnknownError


def test_a_broker_error_keeps_code_and_flags_and_reads_both_ways() -> None:
    core = CoreKafkaError(ErrorCode.topic_authorization_failed, "produce", txn_requires_abort=True)
    shaped = translate(core)
    assert type(shaped) is errors.TopicAuthorizationFailedError
    assert isinstance(shaped, errors.BrokerResponseError)
    assert isinstance(shaped, CoreKafkaError)  # odradek's own except clauses still match
    assert shaped.code() == ErrorCode.topic_authorization_failed
    assert shaped.txn_requires_abort()
    assert str(shaped) == "[Error 29] TopicAuthorizationFailedError: produce"
    retriable = translate(CoreKafkaError(ErrorCode.not_leader_or_follower, "x"))
    assert retriable.retriable and retriable.retriable() is True  # attribute and method
    assert type(retriable).invalid_metadata


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (CoreKafkaError(LocalError.timed_out, "slow"), errors.KafkaTimeoutError),
        (CoreKafkaError(LocalError.fenced, "fenced", fatal=True), errors.ProducerFenced),
        (CoreKafkaError(LocalError.state, "not now"), errors.IllegalStateError),
        (CoreKafkaError(LocalError.purge_queue, "purged"), errors.KafkaError),
        (ConnectionLost("gone"), errors.KafkaConnectionError),
        (TimeoutError("late"), errors.KafkaTimeoutError),
        (BufferFullError("full"), errors.KafkaTimeoutError),
    ],
)
def test_local_errors_get_aiokafka_classes(error: Exception, kind: type) -> None:
    shaped = translate(error)
    assert type(shaped) is kind
    if isinstance(error, CoreKafkaError):
        assert shaped.code() == error.code() and shaped.fatal() == error.fatal()
    # still what odradek's faces raised before: its connection error, a TimeoutError
    if isinstance(error, ConnectionLost):
        assert isinstance(shaped, KafkaConnectionError)
    if isinstance(error, TimeoutError | BufferFullError) or kind is errors.KafkaTimeoutError:
        assert isinstance(shaped, TimeoutError)


def test_other_exceptions_pass_untouched() -> None:
    error = ValueError("mine")
    assert translate(error) is error
    stopped = errors.ConsumerStoppedError()
    assert translate(stopped) is stopped


def test_batch_builder_fills_and_refuses_like_aiokafkas() -> None:
    ours = odradek.aio.BatchBuilder(200)
    theirs = TheirBatchBuilder(200, 0)
    for n in range(8):
        mine = ours.append(key=b"k%d" % n, value=b"v" * 30, timestamp=1_000 + n, headers=[])
        their = theirs.append(key=b"k%d" % n, value=b"v" * 30, timestamp=1_000 + n, headers=[])
        assert (mine is None) == (their is None)
        if mine is not None:
            assert (mine.offset, mine.size, mine.timestamp) == (
                their.offset,
                their.size,
                their.timestamp,
            )
        assert (ours.size(), ours.record_count(), ours.closed()) == (
            theirs.size(),
            theirs.record_count(),
            theirs.closed(),
        )
    assert ours.closed()
    with pytest.raises(TypeError):
        odradek.aio.BatchBuilder(200).append(key="text", value=b"v", timestamp=None)


def test_a_batch_is_sent_once() -> None:
    builder = odradek.aio.BatchBuilder(1000)
    builder.append(key=None, value=b"v", timestamp=None)
    builder.to_batch("t", 0, 0.0, None)
    with pytest.raises(ValueError, match="already sent"):
        builder.to_batch("t", 0, 0.0, None)
    with pytest.raises(ValueError, match="empty"):
        odradek.aio.BatchBuilder(1000).to_batch("t", 0, 0.0, None)


def test_a_deserialized_record_keeps_its_serialized_sizes() -> None:
    fetched = ("t", 1, 7, 1_000, 0, b"key", b"value!", (("h", b"v"),), 3)
    plain = tuple.__new__(odradek.aio.ConsumerRecord, fetched)
    assert (plain.serialized_key_size, plain.serialized_value_size, plain.checksum) == (3, 6, None)
    record = odradek.aio.ConsumerRecord.deserialized(fetched, bytes.decode, len)
    assert (record.key, record.value) == ("key", 6)
    assert (record.serialized_key_size, record.serialized_value_size) == (3, 6)
    assert (record.topic, record.partition, record.offset, record.headers) == (
        "t",
        1,
        7,
        (("h", b"v"),),
    )
    assert repr(record).startswith("ConsumerRecord(topic='t', partition=1, offset=7,")
