"""odradek.client's transactions side by side with confluent-kafka's and aiokafka's.

The same script runs against a fresh scripted fake broker (txn_fake_broker.py) with
each client. With confluent-kafka (librdkafka): calls made in the wrong state, a
coordinator that is busy or moved, a group member fenced in TxnOffsetCommit, a failed
produce, offsets with nothing consumed, an abort held up by an AddPartitionsToTxn in
flight. Every error must come out the same (code, fatal, retriable,
txn_requires_abort), as must the delivery reports, and the broker must see the same
transactional requests in the same order. With aiokafka: the ``transaction()``
context manager's commits and aborts, the same requests and batches.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import AIOKafkaProducer, ConsumerGroupMetadata, Producer, TopicPartition
from odradek.client import KafkaException as OurException
from tests.client.txn_fake_broker import FakeBroker

ck = pytest.importorskip("confluent_kafka")

Outcome = tuple[str, int, bool, bool, bool]


def script(
    make_producer: Callable[[dict[str, Any]], Any],
    exception: type[Exception],
    group_metadata: Callable[[str], Any],
    tp: Callable[..., Any],
) -> tuple[list[Outcome], list[str], list[int], list[Any]]:
    broker = FakeBroker({"out": 3})
    outcomes: list[Outcome] = []
    delivered: list[int] = []

    def attempt(tag: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except exception as raised:
            error = raised.args[0]
            outcomes.append(
                (
                    tag,
                    int(error.code()),
                    error.fatal(),
                    error.retriable(),
                    error.txn_requires_abort(),
                )
            )
        else:
            outcomes.append((tag, 0, False, False, False))

    def report(error: Any, message: Any) -> None:
        delivered.append(0 if error is None else int(error.code()))

    producer = make_producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "side-by-side"}
    )
    try:
        attempt("produce before init", lambda: producer.produce("out", b"v", partition=0))
        attempt("commit before init", lambda: producer.commit_transaction(1))
        attempt("init", lambda: producer.init_transactions(10))
        attempt("produce outside", lambda: producer.produce("out", b"v", partition=0))
        attempt("abort outside", lambda: producer.abort_transaction(1))
        attempt("empty txn", producer.begin_transaction)
        attempt("empty commit", lambda: producer.commit_transaction(10))
        attempt("begin", producer.begin_transaction)
        attempt("begin twice", producer.begin_transaction)
        broker.errors[24] = [ErrorCode.concurrent_transactions, ErrorCode.not_coordinator]
        producer.produce("out", b"a", partition=0, on_delivery=report)
        producer.produce("out", b"b", partition=1, on_delivery=report)
        attempt("commit", lambda: producer.commit_transaction(10))
        attempt("begin 2", producer.begin_transaction)
        attempt(
            "offsets, none valid",
            lambda: producer.send_offsets_to_transaction(
                [tp("in", 0, -1001)], group_metadata("g"), 10
            ),
        )
        broker.errors[28] = [ErrorCode.illegal_generation]
        attempt(
            "offsets, illegal generation",
            lambda: producer.send_offsets_to_transaction(
                [tp("in", 0, 5), tp("in", 1, -1001)], group_metadata("g"), 10
            ),
        )
        attempt("commit abortable", lambda: producer.commit_transaction(10))
        attempt("abort", lambda: producer.abort_transaction(10))
        attempt("begin 3", producer.begin_transaction)
        # (not an authorization error: librdkafka remembers those per topic)
        broker.errors[0] = [ErrorCode.invalid_record]
        producer.produce("out", b"c", partition=2, on_delivery=report)
        attempt("commit failed produce", lambda: producer.commit_transaction(10))
        attempt("abort 2", lambda: producer.abort_transaction(10))
        attempt("begin 4", producer.begin_transaction)
        producer.produce("out", b"d", partition=0, on_delivery=report)
        broker.errors[26] = [ErrorCode.producer_fenced]
        attempt("commit fenced", lambda: producer.commit_transaction(10))
        attempt("begin after fenced", producer.begin_transaction)
        attempt("abort after fenced", lambda: producer.abort_transaction(1))
        attempt("poll raises the fatal error", lambda: producer.poll(0))
        attempt("once", lambda: producer.poll(0))
        requests = [n for n in broker.names() if n != "FindCoordinator"]
        commits = [e for e in broker.events if e[0] == "TxnOffsetCommit"]
        return outcomes, requests, delivered, commits
    finally:
        producer.close()
        broker.close()


@pytest.mark.filterwarnings("ignore:Producer abort_transaction failed during close")
def test_errors_and_requests_match_confluent_kafka() -> None:
    ours = script(Producer, OurException, lambda g: ConsumerGroupMetadata(g), TopicPartition)

    def their_metadata(group: str) -> Any:
        consumer = ck.Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": group})
        try:
            return consumer.consumer_group_metadata()
        finally:
            consumer.close()

    theirs = script(ck.Producer, ck.KafkaException, their_metadata, ck.TopicPartition)
    assert ours[0] == theirs[0]
    assert ours[2] == theirs[2]
    assert ours[3] == theirs[3]  # group, generation, member, instance id, offsets
    # librdkafka rewinds the failed batch's sequence and keeps the epoch; odradek
    # bumps the epoch after such an abort (one more InitProducerId). How many Produce
    # requests carry a transaction's batches is timing.
    assert ours[1].count("InitProducerId") == 2 and theirs[1].count("InitProducerId") == 1
    assert squeeze(ours[1], drop_reinit=True) == squeeze(theirs[1])


def squeeze(requests: list[str], drop_reinit: bool = False) -> list[str]:
    out: list[str] = []
    for i, name in enumerate(requests):
        if drop_reinit and name == "InitProducerId" and i > 0:
            continue
        if name == "Produce" and out and out[-1] == "Produce":
            continue
        out.append(name)
    return out


def abort_while_adding(
    make_producer: Callable[[dict[str, Any]], Any], exception: type[Exception]
) -> tuple[list[Outcome], list[str], list[int], list[tuple[int, int, int]]]:
    """An abort that must wait for an AddPartitionsToTxn in flight: it times out
    (retriable), a commit meanwhile conflicts, calling abort again finishes it; the
    record never sent is purged, and the next transaction starts at sequence 0."""
    broker = FakeBroker({"out": 3})
    outcomes: list[Outcome] = []
    delivered: list[int] = []

    def attempt(tag: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except exception as raised:
            error = raised.args[0]
            outcomes.append(
                (
                    tag,
                    int(error.code()),
                    error.fatal(),
                    error.retriable(),
                    error.txn_requires_abort(),
                )
            )
        else:
            outcomes.append((tag, 0, False, False, False))

    def report(error: Any, message: Any) -> None:
        delivered.append(0 if error is None else int(error.code()))

    producer = make_producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "held"})
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        hold = threading.Event()
        broker.holds[24] = hold
        producer.produce("out", b"v", partition=1, on_delivery=report)
        time.sleep(0.2)
        attempt("abort, timed out", lambda: producer.abort_transaction(0.3))
        attempt("commit meanwhile", lambda: producer.commit_transaction(0.1))
        hold.set()
        attempt("abort again", lambda: producer.abort_transaction(10))
        producer.poll(1)
        del broker.holds[24]
        producer.begin_transaction()
        producer.produce("out", b"w", partition=1, on_delivery=report)
        attempt("commit", lambda: producer.commit_transaction(10))
        producer.poll(1)
        requests = [n for n in broker.names() if n != "FindCoordinator"]
        produced = [(b.partition, b.base_sequence, b.producer_epoch) for b in broker.produced]
        return outcomes, requests, delivered, produced
    finally:
        producer.close()
        broker.close()


def test_a_held_abort_matches_confluent_kafka() -> None:
    ours = abort_while_adding(Producer, OurException)
    theirs = abort_while_adding(ck.Producer, ck.KafkaException)
    assert ours == theirs
    assert ours[0][1][1] == ck.KafkaError._CONFLICT


def aio_script(make_producer: Callable[..., Any], tp: Callable[..., Any]) -> tuple[Any, ...]:
    """aiokafka's transaction() flow: empty, with records and offsets, aborted by an
    exception in the block."""
    broker = FakeBroker({"out": 3})

    async def scenario() -> None:
        producer = make_producer(bootstrap_servers=broker.bootstrap, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                pass
            async with producer.transaction():
                await producer.send("out", b"x", partition=0)
                await producer.send("out", b"y", partition=1)
                await producer.send_offsets_to_transaction({tp("in", 0): 3}, "g")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await (await producer.send("out", b"z", partition=2))
                    raise RuntimeError("abort")
        finally:
            await producer.stop()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 20))
        return (
            Counter(n for n in broker.names() if n not in ("FindCoordinator", "Produce")),
            sorted((b.partition, b.base_sequence, b.producer_epoch) for b in broker.produced),
            [e for e in broker.events if e[0] in ("TxnOffsetCommit", "EndTxn", "InitProducerId")],
            broker.violations,
        )
    finally:
        broker.close()


def test_aio_face_matches_aiokafka() -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.structs import TopicPartition as TheirTopicPartition

    ours = aio_script(AIOKafkaProducer, TopicPartition)
    theirs = aio_script(aiokafka.AIOKafkaProducer, TheirTopicPartition)
    assert ours == theirs
    assert ours[3] == []
