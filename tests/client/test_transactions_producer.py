"""The transactional producer against a scripted fake broker (tests/client/txn_fake_broker.py).

Each test runs real client code (both faces) and checks the requests the broker saw:
their order (no batch before its partition's AddPartitionsToTxn, EndTxn only after
every batch was answered), their contents (transactional batches with the id and
epoch from InitProducerId, sequences restarting at 0 with a new epoch) and how the
errors librdkafka calls fatal, abortable and retriable come out of the API.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import (
    AIOKafkaProducer,
    ConsumerGroupMetadata,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from odradek.client._core.errors import LocalError
from odradek.client.producer.transactions import TxnState
from tests.client.txn_fake_broker import PRODUCER_ID, FakeBroker

T = TypeVar("T")
TIMEOUT_S = 20.0


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker({"out": 3, "other": 1})
    yield fake
    fake.close()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


async def started(broker: FakeBroker, **kwargs: Any) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id="txn-a",
        retry_backoff_ms=5,
        **kwargs,
    )
    await producer.start()
    return producer


def index(names: list[str], name: str, nth: int = 0) -> int:
    return [i for i, n in enumerate(names) if n == name][nth]


def test_commit_adds_partitions_before_sending_and_ends_after_every_ack(
    broker: FakeBroker,
) -> None:
    async def scenario() -> list[Any]:
        producer = await started(broker, transaction_timeout_ms=30_000)
        await producer.begin_transaction()
        futures = [await producer.send("out", b"%d" % i, partition=i % 3) for i in range(9)]
        futures.append(await producer.send("other", b"x", partition=0))
        await producer.commit_transaction()
        results = [f.result() for f in futures]  # all resolved before the commit returned
        await producer.stop()
        return results

    results = run(scenario())
    assert [r.partition for r in results[:3]] == [0, 1, 2]
    names = broker.names()
    assert names[:2] == ["FindCoordinator", "InitProducerId"]
    assert broker.events[0] == ("FindCoordinator", "txn-a", 1)
    assert broker.events[1][1:3] == ("txn-a", 30_000)
    assert broker.violations == []
    added = {tp for e in broker.events if e[0] == "AddPartitionsToTxn" for tp in e[1]}
    assert added == {("out", 0), ("out", 1), ("out", 2), ("other", 0)}
    # every batch transactional, with the id and epoch InitProducerId gave, from sequence 0
    assert broker.produced and all(
        b.transactional and b.producer_id == PRODUCER_ID and b.producer_epoch == 0
        for b in broker.produced
    )
    firsts = {(b.topic, b.partition): b.base_sequence for b in reversed(broker.produced)}
    assert set(firsts.values()) == {0}
    assert names[-1] == "EndTxn" and broker.events[-1] == ("EndTxn", True, 0)
    assert index(names, "EndTxn") > max(i for i, n in enumerate(names) if n == "Produce")
    assert sum(b.count for b in broker.produced) == 10


def test_commit_waits_for_the_batches_in_flight(broker: FakeBroker) -> None:
    release = threading.Event()

    async def scenario() -> None:
        producer = await started(broker)
        await producer.begin_transaction()
        broker.holds[0] = release  # Produce answers wait
        future = await producer.send("out", b"v", partition=0)
        commit = asyncio.ensure_future(producer.commit_transaction())
        await asyncio.sleep(0.3)
        assert "EndTxn" not in broker.names() and not commit.done()
        release.set()
        await commit
        assert future.done() and future.result().offset == 0
        await producer.stop()

    run(scenario())
    assert broker.names()[-1] == "EndTxn"


def test_an_empty_transaction_commits_without_end_txn(broker: FakeBroker) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        async with producer.transaction():
            pass
        async with producer.transaction():
            await producer.send("out", b"v", partition=1)
        await producer.stop()

    run(scenario())
    assert broker.names().count("EndTxn") == 1


def test_abort_drops_unsent_batches_and_waits_for_add_partitions(broker: FakeBroker) -> None:
    hold = threading.Event()

    async def scenario() -> None:
        producer = await started(broker)
        await producer.begin_transaction()
        broker.holds[24] = hold  # AddPartitionsToTxn answers wait: nothing can be sent
        futures = [await producer.send("out", b"v", partition=p) for p in (0, 1)]
        await asyncio.sleep(0.2)
        abort = asyncio.ensure_future(producer.abort_transaction())
        await asyncio.sleep(0.2)
        assert not abort.done()  # the partitions may be in the transaction: wait
        hold.set()
        await abort
        for future in futures:
            error = future.exception()
            assert isinstance(error, KafkaError)
            assert error.code() == KafkaError._PURGE_QUEUE and error.txn_requires_abort()
        # the next transaction goes on with the same epoch and sequences from 0
        del broker.holds[24]
        async with producer.transaction():
            await (await producer.send("out", b"w", partition=0))
        await producer.stop()

    run(scenario())
    assert broker.violations == []
    assert [e for e in broker.events if e[0] == "EndTxn"] == [
        ("EndTxn", False, 0),
        ("EndTxn", True, 0),
    ]
    assert [(b.partition, b.base_sequence, b.producer_epoch) for b in broker.produced] == [
        (0, 0, 0)
    ]


def test_a_failed_produce_makes_the_transaction_abortable_and_abort_bumps_the_epoch(
    broker: FakeBroker,
) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        await producer.begin_transaction()
        broker.errors[0] = [ErrorCode.topic_authorization_failed]
        future = await producer.send("out", b"v", partition=2)
        with pytest.raises(KafkaError) as raised:
            await future
        assert raised.value.code() == ErrorCode.topic_authorization_failed
        with pytest.raises(KafkaError) as raised:
            await producer.commit_transaction()
        assert raised.value.txn_requires_abort() and not raised.value.fatal()
        with pytest.raises(KafkaError):  # no sending until aborted
            await producer.send("out", b"v", partition=2)
        await producer.abort_transaction()
        async with producer.transaction():
            await (await producer.send("out", b"w", partition=2))
        await producer.stop()

    run(scenario())
    inits = [e for e in broker.events if e[0] == "InitProducerId"]
    # KIP-360: the second InitProducerId names the current id and epoch to bump it
    assert len(inits) == 2 and inits[1][3:] == (PRODUCER_ID, 0)
    good = broker.produced[-1]
    assert (good.producer_epoch, good.base_sequence) == (1, 0)


def test_fenced_end_txn_is_fatal_and_stays_fatal(broker: FakeBroker) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        await producer.begin_transaction()
        await producer.send("out", b"v", partition=0)
        broker.errors[26] = [ErrorCode.producer_fenced]
        with pytest.raises(KafkaError) as raised:
            await producer.commit_transaction()
        assert raised.value.fatal() and raised.value.code() == KafkaError._FENCED
        assert not raised.value.txn_requires_abort()
        with pytest.raises(KafkaError) as again:
            await producer.begin_transaction()
        assert again.value.fatal()
        with pytest.raises(KafkaError):
            await producer.abort_transaction()
        assert producer._core.transactions is not None
        assert producer._core.transactions.txn.state is TxnState.FATAL_ERROR
        await producer.stop()

    run(scenario())


def test_coordinator_errors_are_retried_and_the_coordinator_found_again(
    broker: FakeBroker,
) -> None:
    broker.errors[10] = [ErrorCode.coordinator_not_available]
    broker.errors[22] = [ErrorCode.not_coordinator, ErrorCode.concurrent_transactions]

    async def scenario() -> None:
        producer = await started(broker)
        broker.errors[24] = [
            ErrorCode.concurrent_transactions,
            ErrorCode.coordinator_load_in_progress,
        ]
        broker.errors[26] = [ErrorCode.concurrent_transactions, ErrorCode.not_coordinator]
        async with producer.transaction():
            await producer.send("out", b"v", partition=0)
        await producer.stop()

    run(scenario())
    names = broker.names()
    assert names.count("InitProducerId") == 3
    assert names.count("AddPartitionsToTxn") == 3
    assert names.count("EndTxn") == 3
    # found at start, after COORDINATOR_NOT_AVAILABLE, after each NOT_COORDINATOR
    assert names.count("FindCoordinator") == 4
    assert broker.violations == []


def test_send_offsets_goes_to_both_coordinators_with_the_group_metadata(
    broker: FakeBroker,
) -> None:
    metadata = ConsumerGroupMetadata("group-1", 7, "member-x", "instance-1")

    async def scenario() -> None:
        producer = await started(broker)
        async with producer.transaction():
            await producer.send_offsets_to_transaction(
                {TopicPartition("in", 0): 42, TopicPartition("in", 1): 7}, metadata
            )
        async with producer.transaction():  # aiokafka's form: just the group id
            await producer.send_offsets_to_transaction({TopicPartition("in", 0): 43}, "group-1")
        await producer.stop()

    run(scenario())
    events = [e for e in broker.events if e[0] != "FindCoordinator" or e[2] == 0]
    assert ("FindCoordinator", "group-1", 0) in events
    commits = [e for e in broker.events if e[0] == "TxnOffsetCommit"]
    assert commits[0] == (
        "TxnOffsetCommit",
        "group-1",
        7,
        "member-x",
        "instance-1",
        {("in", 0): 42, ("in", 1): 7},
    )
    assert commits[1][2:5] == (-1, "", None)
    names = broker.names()
    assert index(names, "AddOffsetsToTxn") < index(names, "TxnOffsetCommit")
    assert [e for e in broker.events if e[0] == "EndTxn"] == [
        ("EndTxn", True, 0),
        ("EndTxn", True, 0),
    ]
    assert broker.violations == []


def test_group_member_errors_in_txn_offset_commit_are_abortable(broker: FakeBroker) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        await producer.begin_transaction()
        broker.errors[28] = [ErrorCode.illegal_generation]
        with pytest.raises(KafkaError) as raised:
            await producer.send_offsets_to_transaction(
                {TopicPartition("in", 0): 1}, ConsumerGroupMetadata("g", 3, "m")
            )
        assert raised.value.txn_requires_abort()
        await producer.abort_transaction()
        await producer.stop()

    run(scenario())
    assert [e for e in broker.events if e[0] == "EndTxn"] == [("EndTxn", False, 0)]


def test_calls_out_of_order_are_state_errors(broker: FakeBroker) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        for call in (producer.commit_transaction, producer.abort_transaction):
            with pytest.raises(KafkaError) as raised:
                await call()
            assert raised.value.code() == KafkaError._STATE
        with pytest.raises(KafkaError) as raised:
            await producer.send("out", b"outside", partition=0)
        assert raised.value.code() == KafkaError._STATE
        await producer.begin_transaction()
        with pytest.raises(KafkaError):
            await producer.begin_transaction()
        await producer.stop()  # closing inside a transaction aborts it: nothing was added

    run(scenario())
    assert "EndTxn" not in broker.names()


def test_transaction_context_aborts_when_the_block_raises(broker: FakeBroker) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        with pytest.raises(RuntimeError):
            async with producer.transaction():
                await (await producer.send("out", b"v", partition=0))
                raise RuntimeError("boom")
        await producer.stop()

    run(scenario())
    assert broker.events[-1] == ("EndTxn", False, 0)


def test_blocking_producer_has_confluent_kafkas_transactional_api(broker: FakeBroker) -> None:
    delivered: list[tuple[Any, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "txn-b",
            "transaction.timeout.ms": 10_000,
            "retry.backoff.ms": 5,
        }
    )
    try:
        with pytest.raises(KafkaException) as raised:
            producer.produce("out", b"before init", partition=0)
        assert raised.value.args[0].code() == KafkaError._STATE
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(5):
            producer.produce(
                "out", b"%d" % i, partition=i % 3, on_delivery=lambda e, m: delivered.append((e, m))
            )
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, 10)], ConsumerGroupMetadata("g", 1, "m1"), 10
        )
        producer.commit_transaction(10)
        assert len(delivered) == 5 and all(e is None for e, _ in delivered)
        assert len(producer) == 0

        producer.begin_transaction()
        broker.errors[26] = [ErrorCode.producer_fenced]
        producer.produce("out", b"z", partition=0)
        with pytest.raises(KafkaException) as raised:
            producer.commit_transaction(10)
        error = raised.value.args[0]
        assert error.fatal() and error.code() == KafkaError._FENCED
    finally:
        producer.close(5)
    assert broker.events[1][1:3] == ("txn-b", 10_000)
    assert broker.violations == []


def test_blocking_abort_reports_purged_records_and_timeouts_resume(broker: FakeBroker) -> None:
    delivered: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-c", "retry.backoff.ms": 5}
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        hold = threading.Event()
        broker.holds[24] = hold
        producer.produce("out", b"v", partition=1, on_delivery=lambda e, m: delivered.append(e))
        time.sleep(0.2)
        with pytest.raises(KafkaException) as raised:
            producer.abort_transaction(0.2)  # waits for AddPartitionsToTxn
        assert raised.value.args[0].code() == KafkaError._TIMED_OUT
        assert raised.value.args[0].retriable()
        with pytest.raises(KafkaException) as conflict:
            producer.commit_transaction(0.1)
        assert conflict.value.args[0].code() == KafkaError._CONFLICT
        assert conflict.value.args[0].retriable()
        hold.set()
        producer.abort_transaction(10)  # resumes the same abort
        producer.poll(1)
        assert len(delivered) == 1 and delivered[0].code() == LocalError.purge_queue
    finally:
        producer.close(5)


def test_non_transactional_producer_refuses_transactional_calls(broker: FakeBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        with pytest.raises(KafkaException) as raised:
            producer.init_transactions(1)
        assert raised.value.args[0].code() == KafkaError._NOT_CONFIGURED
    finally:
        producer.close(5)


def test_transactional_id_requires_idempotence(broker: FakeBroker) -> None:
    from odradek.client import ConfigError

    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "x",
                "enable.idempotence": False,
            }
        )
    with pytest.raises(ConfigError, match="acks"):
        Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "x", "acks": 1})


def test_consumer_group_metadata_carries_the_members_identity() -> None:
    from odradek.client import Consumer

    consumer = Consumer(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.instance.id": "static-1"}
    )
    try:
        assert consumer.consumer_group_metadata() == ConsumerGroupMetadata("g", -1, "", "static-1")
        assert consumer._member is not None
        consumer._member.generation_id, consumer._member.member_id = 5, "m-5"
        assert consumer.consumer_group_metadata() == ConsumerGroupMetadata(
            "g", 5, "m-5", "static-1"
        )
    finally:
        consumer.close()
    loner = Consumer({"bootstrap.servers": "127.0.0.1:1"})
    try:
        with pytest.raises(KafkaException):
            loner.consumer_group_metadata()
    finally:
        loner.close()


def test_a_timed_out_commit_goes_on_and_the_next_commit_is_a_new_one(broker: FakeBroker) -> None:
    async def scenario() -> None:
        producer = await started(broker)
        await producer.begin_transaction()
        release = threading.Event()
        broker.holds[26] = release  # EndTxn answers wait
        await producer.send("out", b"a", partition=0)
        core = producer._core
        with pytest.raises(KafkaError) as raised:
            await core.commit_transaction(0.3)
        assert raised.value.code() == KafkaError._TIMED_OUT and raised.value.retriable()
        release.set()
        await asyncio.sleep(0.3)  # the commit completes in the background
        await producer.begin_transaction()
        del broker.holds[26]
        await producer.send("out", b"b", partition=0)
        await producer.commit_transaction()  # a real second commit, not the first's result
        await producer.stop()

    run(scenario())
    assert [e for e in broker.events if e[0] == "EndTxn"] == [
        ("EndTxn", True, 0),
        ("EndTxn", True, 0),
    ]
    assert len(broker.produced) == 2
