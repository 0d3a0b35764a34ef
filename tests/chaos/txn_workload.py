"""Transactional workload runners (confluent-kafka), recorded for ``txn_checks.py``.

- ``TransactionalRunner``: one ``transactional.id`` in a thread, running transactions
  back to back: begin, a seeded number of records spread over every partition of the
  topic (each value says its transaction, its intended outcome and its number,
  ``txn_checks.encode_value``), optionally the offsets of a group sent with it
  (``send_offsets_to_transaction``, offset = transaction index + 1 on partition 0 of a
  source topic), then commit or abort as seeded. Errors are handled as librdkafka's
  documentation tells an application to: a retriable one retries the call, one that
  requires an abort aborts (the transaction counts as aborted only once
  abort_transaction returned), a fatal one (or a call still failing at its deadline)
  leaves the transaction in doubt (``FAILED``), and the producer is replaced by a new
  one with the same id, whose init_transactions fences the old one. Each
  transaction's intent and result go to ``outcomes``; ``on_end(key)`` is called just
  before each commit/abort call (a test kills a node there: "mid-commit").
  ``send_offsets_to_transaction`` runs under a watchdog: librdkafka can block in it
  forever, past its timeout, when the group coordinator's broker left the metadata
  (a fenced node; confluentinc/librdkafka#5456 and #5511). A call still blocked
  ``HANG_S`` later is given up: the transaction, never ended by its producer, counts
  as ``ABANDONED`` (it must stay invisible), the blocked producer is left to its
  thread, and a new producer with the same id fences it (``client_hangs``).
- ``ReadCommittedReader``: a read_committed consumer of every partition from the start,
  keeping (partition, offset, value) of everything it is handed.
- ``read_topic``: the topic read back at one isolation level, from the start to its
  end at that level (the last stable offset for read_committed).
- ``group_offsets``: each group's committed offset of the source partition.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as TP

from tests.chaos.txn_checks import (
    ABANDONED,
    ABORTED,
    COMMITTED,
    FAILED,
    UNANSWERED,
    Read,
    TxnKey,
    TxnOutcome,
    encode_value,
)
from tests.chaos.workload import QUIET, Runner

CALL_TIMEOUT_S = 10.0  # one librdkafka call; retried (retriable errors) until END_DEADLINE_S
END_DEADLINE_S = 90.0  # a commit/abort still failing after this leaves the txn in doubt
TRANSACTION_TIMEOUT_MS = 20_000
HANG_S = CALL_TIMEOUT_S + 20.0  # a librdkafka call blocked this long is given up


class ClientHang(Exception):
    """A librdkafka call that did not return long after its own timeout."""


def _watched(call: Callable[[], None], name: str) -> Callable[[], None]:
    """``call`` run in a daemon thread: its exception re-raised here, ClientHang if it
    has not returned within ``HANG_S`` (the thread is then left blocked)."""

    def run() -> None:
        failure: list[BaseException] = []

        def target() -> None:
            try:
                call()
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=target, name=f"watched-{name}", daemon=True)
        thread.start()
        thread.join(HANG_S)
        if thread.is_alive():
            raise ClientHang(f"{name} blocked for {HANG_S:g} s")
        if failure:
            raise failure[0]

    return run


def _error(exc: KafkaException) -> KafkaError:
    error = exc.args[0]
    assert isinstance(error, KafkaError), exc
    return error


class TransactionalRunner(Runner):
    def __init__(
        self,
        txn_id: str,
        bootstrap: str,
        topic: str,
        partitions: int,
        seed: int,
        *,
        records: tuple[int, int] = (3, 9),
        abort_ratio: float = 0.3,
        source: str | None = None,
        group: str | None = None,
        gap_s: float = 0.0,
        end_deadline_s: float = END_DEADLINE_S,
        on_end: Callable[[TxnKey], None] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"txn-{txn_id}")
        self.txn_id = txn_id
        self.topic = topic
        self.partitions = partitions
        self.rng = random.Random(seed)
        self.records = records
        self.abort_ratio = abort_ratio
        self.source = source
        self.group = group
        self.gap_s = gap_s
        self.end_deadline_s = end_deadline_s
        self.on_end = on_end
        self.outcomes: dict[TxnKey, TxnOutcome] = {}
        self.errors: Counter[str] = Counter()
        self.producers = 0  # how many producers this id had (1 + replacements)
        self.commits = 0  # acknowledged commits (read by other threads as it runs)
        self.client_hangs = 0  # librdkafka calls given up (see ClientHang)
        self.phase = "starting"  # what it is doing now (a stuck runner's report)
        self.began = time.monotonic()
        self.trace: deque[str] = deque(maxlen=40)  # the last calls and errors, timed
        self.config = {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 2,
            "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
            "socket.timeout.ms": 10_000,
            "error_cb": self._on_error,
            **QUIET,
            **(config or {}),
        }
        self.group_metadata: Any = None
        if group is not None:
            self._group_consumer = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": group, **QUIET}
            )
            self.group_metadata = self._group_consumer.consumer_group_metadata()

    # -- callbacks -------------------------------------------------------------------
    def _on_error(self, error: KafkaError) -> None:
        self.errors[error.name()] += 1

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            self.errors[f"delivery:{error.name()}"] += 1

    # -- the loop ----------------------------------------------------------------------
    def work(self) -> None:
        producer = self._new_producer()
        index = 0
        try:
            while producer is not None and not self.stopping.is_set():
                if not self._transaction(producer, index):
                    # not close(): it aborts the transaction first, which raises on a
                    # fatal producer (and then hangs when called again)
                    del producer
                    # even when stopping: the new producer's init fences the old one and
                    # ends its transaction, which would hold the LSO until it timed out
                    producer = self._new_producer(fence=True)
                    if producer is None:
                        self.errors["gave up: no producer could init"] += 1
                index += 1
                if self.gap_s:
                    self.stopping.wait(self.gap_s)
        finally:
            if producer is not None:
                try:
                    producer.close()
                except KafkaException as exc:
                    self.errors[f"close:{_error(exc).name()}"] += 1
            if self.group is not None:
                self._group_consumer.close()

    def _new_producer(self, fence: bool = False) -> Producer | None:
        """A producer whose init_transactions succeeded; None if stopped first (or, to
        ``fence``, which goes on while stopping, after ``end_deadline_s``)."""
        deadline = time.monotonic() + self.end_deadline_s if fence else float("inf")

        def going() -> bool:
            return (fence or not self.stopping.is_set()) and time.monotonic() < deadline

        while going():
            producer = Producer(self.config)
            self.producers += 1
            while going():
                self.phase = f"init_transactions (producer {self.producers})"
                try:
                    producer.init_transactions(CALL_TIMEOUT_S)
                    return producer
                except KafkaException as exc:
                    error = _error(exc)
                    self.errors[f"init:{error.name()}"] += 1
                    self._trace(f"init raised {error.name()}")
                    if error.fatal():
                        break
                    time.sleep(0.2)
            del producer
        return None

    def _transaction(self, producer: Producer, index: int) -> bool:
        """One transaction; False when the producer must be replaced."""
        key = (self.txn_id, index)
        commit = self.rng.random() >= self.abort_ratio
        size = self.rng.randint(*self.records)
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            self.errors[f"begin:{_error(exc).name()}"] += 1
            return False
        self.outcomes[key] = TxnOutcome(commit, size, UNANSWERED)
        try:
            self.phase = f"producing transaction {index}"
            for number in range(size):
                self._produce(producer, index, commit, number, size)
            if self.group is not None:
                assert self.source is not None
                self._call(
                    _watched(
                        lambda: producer.send_offsets_to_transaction(
                            [TP(self.source, 0, index + 1)], self.group_metadata, CALL_TIMEOUT_S
                        ),
                        f"{self.txn_id} send_offsets_to_transaction",
                    ),
                    "offsets",
                )
        except ClientHang as hang:
            self.client_hangs += 1
            self._trace(str(hang))
            self.outcomes[key] = TxnOutcome(commit, size, ABANDONED, "send_offsets blocked")
            return False
        except KafkaException as exc:
            error = _error(exc)
            if error.fatal() or not error.txn_requires_abort():
                self.outcomes[key] = TxnOutcome(commit, size, FAILED, error.name())
                return False
            return self._abort(producer, key, commit, size)
        if self.on_end is not None:
            self.on_end(key)
        if not commit:
            return self._abort(producer, key, commit, size)
        try:
            self._call(lambda: producer.commit_transaction(CALL_TIMEOUT_S), "commit")
        except KafkaException as exc:
            error = _error(exc)
            if error.txn_requires_abort() and not error.fatal():
                return self._abort(producer, key, commit, size)
            self.outcomes[key] = TxnOutcome(commit, size, FAILED, error.name())
            return False
        self.outcomes[key] = TxnOutcome(commit, size, COMMITTED)
        self.commits += 1
        return True

    def _abort(self, producer: Producer, key: TxnKey, commit: bool, size: int) -> bool:
        try:
            self._call(lambda: producer.abort_transaction(CALL_TIMEOUT_S), "abort")
        except KafkaException as exc:
            self.outcomes[key] = TxnOutcome(commit, size, FAILED, _error(exc).name())
            return False
        self.outcomes[key] = TxnOutcome(commit, size, ABORTED)
        return True

    def _call(self, call: Callable[[], None], what: str) -> None:
        """``call()`` again while it raises a retriable error, until the deadline."""
        deadline = time.monotonic() + self.end_deadline_s
        began = time.monotonic()
        while True:
            self.phase = f"{what} ({time.monotonic() - began:.0f} s)"
            self._trace(what)
            try:
                call()
                return
            except KafkaException as exc:
                error = _error(exc)
                self.errors[f"{what}:{error.name()}"] += 1
                self._trace(f"{what} raised {error.name()}")
                if not error.retriable() or error.fatal() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _trace(self, event: str) -> None:
        self.trace.append(f"{time.monotonic() - self.began:6.1f} s {event}")

    def _produce(
        self, producer: Producer, index: int, commit: bool, number: int, size: int
    ) -> None:
        value = encode_value(self.txn_id, index, commit, number, size)
        partition = (index + number) % self.partitions
        while True:
            try:
                producer.produce(
                    self.topic, value=value, partition=partition, on_delivery=self._delivered
                )
                producer.poll(0)
                return
            except BufferError:
                producer.poll(0.1)

    # -- after the run -----------------------------------------------------------------
    def committed(self) -> int:
        return self.commits


class ReadCommittedReader(Runner):
    """Everything a read_committed consumer of the whole topic is handed, as it runs."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__("txn-reader")
        self.reads: list[Read] = []
        self.errors: Counter[str] = Counter()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "txn-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "reconnect.backoff.max.ms": 1000,
                "error_cb": lambda error: self.errors.update([error.name()]),
                **QUIET,
            }
        )
        self.consumer.assign([TP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

    def work(self) -> None:
        try:
            while not self.stopping.is_set():
                for message in self.consumer.consume(500, 0.5):
                    if message.error() is not None:
                        self.errors[f"read:{message.error().name()}"] += 1
                        continue
                    self.reads.append((message.partition(), message.offset(), message.value()))
        finally:
            self.consumer.close()


def wait_stable(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> None:
    """Return once no transaction is open in the topic: each partition's last stable
    offset (ListOffsets under read_committed) is its high watermark. A final read
    taken before would cut committed transactions at an open one's first offset."""
    consumers = {
        isolation: Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"txn-ends-{isolation}",
                "isolation.level": isolation,
                **QUIET,
            }
        )
        for isolation in ("read_committed", "read_uncommitted")
    }
    ends: dict[str, list[int]] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ends = {
                    isolation: [
                        consumer.get_watermark_offsets(TP(topic, p), timeout=10, cached=False)[1]
                        for p in range(partitions)
                    ]
                    for isolation, consumer in consumers.items()
                }
            except KafkaException:
                ends = {}
            if ends and ends["read_committed"] == ends["read_uncommitted"]:
                return
            time.sleep(0.5)
    finally:
        for consumer in consumers.values():
            consumer.close()
    raise AssertionError(f"transactions still open in {topic} after {timeout_s} s: {ends}")


def read_topic(
    bootstrap: str, topic: str, partitions: int, isolation: str, timeout_s: float = 60.0
) -> list[Read]:
    """Every record visible at ``isolation`` from each partition's start to its end at
    that level (the LSO for read_committed, taken first), in partition-offset order.
    Raises AssertionError if the end is not reached in ``timeout_s``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-read-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **QUIET,
        }
    )
    reads: list[Read] = []
    try:
        ends = {
            p: consumer.get_watermark_offsets(TP(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        }
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TP(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                partition, offset = message.partition(), message.offset()
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and offset >= ends[partition]:
                        pending.discard(partition)
                    continue
                if offset < ends[partition]:
                    reads.append((partition, offset, message.value()))
                if offset + 1 >= ends[partition]:
                    pending.discard(partition)
        assert not pending, f"{isolation}: partitions {sorted(pending)} not read to {ends}"
    finally:
        consumer.close()
    return sorted(reads)


def group_offsets(bootstrap: str, groups: Mapping[str, str], source: str) -> dict[str, int]:
    """producer -> its group's committed offset of ``source``-0 (absent: none)."""
    found = {}
    for producer, group in groups.items():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
        try:
            (tp,) = consumer.committed([TP(source, 0)], timeout=30)
        finally:
            consumer.close()
        if tp.error is None and tp.offset >= 0:
            found[producer] = tp.offset
    return found
