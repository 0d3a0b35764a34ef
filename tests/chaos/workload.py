"""Workload runners: what clients do while the faults happen, recorded into a history.

- ``ProducerRunner``: one confluent-kafka producer (idempotent, acks=all) in a thread,
  sending seq 0, 1, 2, ... at a steady rate, seq ``n`` to partition ``n % partitions``;
  its delivery callbacks fill an ``AckTable`` (seq -> acknowledged partition/offset).
- ``GroupMember``: a consumer of one group (subscribe, no auto-commit) that marks every
  offset it is handed (and, given a ``ReadLog``, the record's seq there) and commits
  synchronously after each batch; commits it is told succeeded are recorded.
- ``Observer``: polls the group's committed offsets and the high watermarks, one call at
  a time, so its samples are in a true order the checkers can compare.
- ``read_log``: the topic read back from log start to high watermark, each record
  reduced to its seq (or ``SEQ_UNREADABLE``).

librdkafka retries through the faults on its own; the runners only count errors.
"""

from __future__ import annotations

import random
import threading
import time
from array import array
from collections import Counter
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.history import (
    SEQ_UNREADABLE,
    AckTable,
    OffsetSet,
    PartitionLog,
    ReadLog,
    Sample,
    decode_key,
    encode_key,
    expected_value,
)

# librdkafka retries a message until this expires; far beyond any fault's duration, so
# a delivery failure means something other than "the broker was down a while".
MESSAGE_TIMEOUT_MS = 300_000
SESSION_TIMEOUT_MS = 6_000
POLL_BATCH = 500
RATE_TICK_S = 0.01
# librdkafka's own log lines (every refused reconnect while the broker is down) would
# bury the table; errors reach the runners through error_cb and are counted instead.
QUIET = {"log_level": 0}


class Runner(threading.Thread):
    """A workload thread whose exception is kept (``crash``) for the result, not lost."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.crash = ""
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.work()
        except Exception as exc:
            self.crash = f"{self.name}: {type(exc).__name__}: {exc}"

    def work(self) -> None:
        raise NotImplementedError

    def stop(self, timeout_s: float) -> None:
        self.stopping.set()
        self.join(timeout_s)


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout_s: float = 30.0,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    new_topic = NewTopic(topic, partitions, replication_factor, config=config or {})
    futures = admin.create_topics([new_topic], request_timeout=timeout_s)
    futures[topic].result(timeout=timeout_s)


class ProducerRunner(Runner):
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate_per_s: int,
        value_bytes: int,
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__("chaos-producer")
        self.topic = topic
        self.partitions = partitions
        self.rate_per_s = rate_per_s
        self.value_bytes = value_bytes
        self.acked = AckTable()
        self.failed: dict[int, str] = {}  # seq -> the error its delivery report carried
        self.errors: Counter[str] = Counter()
        self.fatal = ""
        self.abandon = threading.Event()  # stop waiting for delivery reports too
        self.unflushed = -1
        self.config = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
            "queue.buffering.max.messages": 500_000,
            "error_cb": self._error,
            **QUIET,
            **(extra_config or {}),
        }

    def _error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = str(error)
        self.errors[error.name()] += 1

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        seq = decode_key(message.key())
        assert seq is not None
        if error is None and message.offset() is not None and message.offset() >= 0:
            self.acked.acked(seq, message.partition(), message.offset())
        elif error is None:
            self.errors[f"delivered at offset {message.offset()}"] += 1
        else:
            self.failed[seq] = error.name()
            self.errors[f"delivery:{error.name()}"] += 1

    def work(self) -> None:
        producer = Producer(self.config)
        began = time.monotonic()
        seq = 0
        while not self.stopping.is_set() and not self.fatal:
            due = int((time.monotonic() - began) * self.rate_per_s)
            while seq < due and not self.stopping.is_set():
                partition = seq % self.partitions
                try:
                    producer.produce(
                        self.topic,
                        expected_value(seq, self.value_bytes),
                        encode_key(seq),
                        partition=partition,
                        on_delivery=self._delivered,
                    )
                except BufferError:
                    producer.poll(0.1)
                    continue
                except KafkaException as exc:  # fatal: librdkafka refuses everything after it
                    self._error(exc.args[0])
                    break
                self.acked.sent(seq, partition)
                seq += 1
            try:
                producer.poll(RATE_TICK_S)
            except KafkaException as exc:
                self._error(exc.args[0])
        deadline = time.monotonic() + MESSAGE_TIMEOUT_MS / 1000
        self.unflushed = len(producer)
        while self.unflushed and time.monotonic() < deadline and not self.abandon.is_set():
            try:
                self.unflushed = producer.flush(1.0)
            except KafkaException as exc:
                self._error(exc.args[0])
                self.unflushed = len(producer)
                break

    def stop(self, timeout_s: float) -> None:
        """Stop sending and wait for every sent record's delivery report."""
        self.stopping.set()
        self.join(timeout_s)
        if self.is_alive():
            self.abandon.set()
            self.join(10)


class GroupMember(Runner):
    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        group: str,
        consumed: dict[int, OffsetSet],
        commit_acks: list[tuple[int, int]],
        group_protocol: str = "classic",
        reads: ReadLog | None = None,
        value_bytes: int = 0,
    ) -> None:
        super().__init__(f"chaos-{name}")
        self.topic = topic
        self.consumed = consumed
        self.reads = reads  # (partition, offset) -> seq of every record handed, if kept
        self.value_bytes = value_bytes
        self.commit_acks = commit_acks
        self.errors: Counter[str] = Counter()
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "reconnect.backoff.max.ms": 1000,
            **QUIET,
        }
        if group_protocol == "classic":
            self.config.update({"session.timeout.ms": SESSION_TIMEOUT_MS})
            self.config.update({"heartbeat.interval.ms": 1000})
        else:  # KIP-848: the broker owns session and heartbeat timing
            self.config["group.protocol"] = group_protocol

    def work(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.topic])
            uncommitted = False
            while not self.stopping.is_set():
                messages = consumer.consume(POLL_BATCH, 0.5)
                handed = 0
                for message in messages:
                    error = message.error()
                    if error is not None:
                        self.errors[f"consume:{error.name()}"] += 1
                        continue
                    partition, offset = message.partition(), message.offset()
                    assert partition is not None and offset is not None
                    self.consumed[partition].add(offset)
                    if self.reads is not None:
                        self.reads.add(partition, offset, _seq_of(message, self.value_bytes))
                    handed += 1
                if handed or uncommitted:
                    # A commit that failed (the broker died under it) is retried on the
                    # next round even when nothing new arrives, as an application that
                    # commits what it processed must: else the last records before a
                    # crash stay uncommitted for ever once the producer has stopped.
                    uncommitted = not self._commit(consumer)
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer) -> bool:
        """Commit the positions handed so far; False if it must be tried again."""
        try:
            committed = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0]
            self.errors[f"commit:{error.name()}"] += 1
            # _NO_OFFSET: nothing handed since the last commit that took (the
            # assignment moved, or this retry's offsets were committed already).
            return bool(error.code() == KafkaError._NO_OFFSET)
        ok = True
        for tp in committed or ():
            if tp.error is None and tp.offset >= 0:
                self.commit_acks.append((tp.partition, tp.offset))
            elif tp.error is not None:
                self.errors[f"commit:{tp.error.name()}"] += 1
                ok = False
        return ok


def _error_name(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.name() if isinstance(error, KafkaError) else type(exc).__name__


def _seq_of(message: Any, value_bytes: int) -> int:
    """The seq a record carries, or SEQ_UNREADABLE if its key or value is not one sent."""
    seq = decode_key(message.key())
    if seq is None or message.value() != expected_value(seq, value_bytes):
        return SEQ_UNREADABLE
    return seq


class Observer(Runner):
    """Samples committed offsets and high watermarks every ``interval_s``.

    Every failed sample is counted in ``errors`` (``observe:<error>``), so the run's
    table shows it. A consumer whose ``committed()`` has failed for ``renew_after_s``
    is replaced by a new one (``observe:renewed``): librdkafka's group handle can stay
    stuck after its coordinator went away (confluentinc/librdkafka#5586 and its
    kin) while the group's own members commit fine; a broker that really stopped
    answering OffsetFetch fails the new consumer too, and the drain with it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        partitions: int,
        interval_s: float = 0.5,
        renew_after_s: float = 15.0,
    ) -> None:
        super().__init__("chaos-observer")
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.renew_after_s = renew_after_s
        self.committed: list[Sample] = []
        self.high_watermarks: list[Sample] = []
        self.errors: Counter[str] = Counter()
        self.began = time.monotonic()
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 1000,
            **QUIET,
        }
        self.consumer = Consumer(self.config)
        self.answered_at = time.monotonic()  # the last committed() that answered

    def latest_committed(self) -> dict[int, int]:
        latest: dict[int, int] = {}
        for sample in self.committed:
            latest[sample.partition] = sample.offset
        return latest

    def sample(self) -> None:
        now = time.monotonic() - self.began
        partitions = [TP(self.topic, p) for p in range(self.partitions)]
        try:
            committed = self.consumer.committed(partitions, timeout=5)
        except KafkaException as exc:
            self.errors[f"observe:{_error_name(exc)}"] += 1
            committed = []
        for tp in committed:
            if tp.error is not None:
                self.errors[f"observe:{tp.error.name()}"] += 1
            elif tp.offset >= 0:
                self.committed.append(Sample(now, tp.partition, tp.offset))
        if committed and all(tp.error is None for tp in committed):
            self.answered_at = time.monotonic()
        elif time.monotonic() - self.answered_at > self.renew_after_s:
            self.errors["observe:renewed"] += 1
            self.consumer.close()
            self.consumer = Consumer(self.config)
            self.answered_at = time.monotonic()
        for tp in partitions:
            try:
                _, high = self.consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            except KafkaException:
                continue
            self.high_watermarks.append(Sample(now, tp.partition, high))

    def work(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.sample()

    def close(self) -> None:
        self.consumer.close()


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-watermarks", **QUIET})
    try:
        return {
            p: consumer.get_watermark_offsets(TP(topic, p), timeout=30, cached=False)
            for p in range(partitions)
        }
    finally:
        consumer.close()


def read_log(
    bootstrap: str, topic: str, partitions: int, value_bytes: int, timeout_s: float
) -> dict[int, PartitionLog]:
    """Every record of the topic from log start to the high watermark, as seqs."""
    marks = watermarks(bootstrap, topic, partitions)
    logs = {p: PartitionLog(low, high, array("q"), array("q")) for p, (low, high) in marks.items()}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 16 * 1024 * 1024,
            **QUIET,
        }
    )
    pending = {p for p, log in logs.items() if log.high_watermark > log.log_start}
    try:
        consumer.assign([TP(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(POLL_BATCH * 4, 1.0):
                if message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                log = logs[partition]
                if offset >= log.high_watermark:
                    continue
                seq = _seq_of(message, value_bytes)
                log.offsets.append(offset)  # type: ignore[attr-defined]
                log.seqs.append(seq)  # type: ignore[attr-defined]
                if offset + 1 >= log.high_watermark:
                    pending.discard(partition)
    finally:
        consumer.close()
    return logs


# -- the quorum's admin workload -----------------------------------------------------------

ADMIN_TIMEOUT_S = 10.0
ADMIN_GIVE_UP_S = 120.0  # re-asking an operation this long before it counts as unanswered
# Errors that mean "ask again": the controller moved or is being elected, the request
# did not get an answer in time (it may or may not have been done), or no broker is
# registered and unfenced to place a replica on right now (INVALID_REPLICATION_FACTOR,
# as Kafka answers while every broker is fenced: the killed ones come back).
RETRIABLE_ADMIN = frozenset(
    {
        "INVALID_REPLICATION_FACTOR",
        "NOT_CONTROLLER",
        "REQUEST_TIMED_OUT",
        "_TIMED_OUT",
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        # librdkafka drops a broker Metadata stops listing (a node killed is fenced,
        # and fenced brokers are not listed, as Kafka's): its in-flight request fails so.
        "_DESTROY_BROKER",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "COORDINATOR_NOT_AVAILABLE",
        "LEADER_NOT_AVAILABLE",
        "UNKNOWN_SERVER_ERROR",
        "_WAIT_COORD",
        "_DESTROY",
    }
)


class AdminRunner(Runner):
    """Creates topics ``admin-<n>`` (RF=1, one partition) one after the other with a
    confluent-kafka AdminClient and deletes some it was told exist, re-asking each
    operation until the cluster answers it (librdkafka sends admin requests to the
    controller Metadata names; NOT_CONTROLLER or a timeout make it ask again).

    What is recorded is what the cluster acknowledged: ``created`` (success, or
    TOPIC_ALREADY_EXISTS: an earlier attempt was done, ours or the forwarding broker's
    resend), ``deleted`` (success, or UNKNOWN_TOPIC_OR_PART likewise), and every name a
    delete was sent for
    (``delete_sent``: such a topic may be gone even without an answer)."""

    def __init__(self, bootstrap: str, interval_s: float, seed: int, delete_every: int = 3):
        super().__init__("chaos-admin")
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.delete_every = delete_every
        self.rng = random.Random(seed)
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.delete_sent: set[str] = set()
        self.unanswered: list[str] = []
        self.attempts = 0
        self.errors: Counter[str] = Counter()

    def _ask(self, admin: AdminClient, operation: str, name: str) -> bool:
        """Re-ask until answered; True when the cluster confirmed it."""
        deadline = time.monotonic() + ADMIN_GIVE_UP_S
        while time.monotonic() < deadline:
            self.attempts += 1
            if operation == "create":
                futures = admin.create_topics(
                    [NewTopic(name, 1, 1)], request_timeout=ADMIN_TIMEOUT_S
                )
            else:
                self.delete_sent.add(name)
                futures = admin.delete_topics([name], request_timeout=ADMIN_TIMEOUT_S)
            try:
                futures[name].result(timeout=ADMIN_TIMEOUT_S + 5)
                return True
            except KafkaException as exc:
                error = exc.args[0]
                code = error.name() if isinstance(error, KafkaError) else str(error)
            except Exception as exc:  # the future's own timeout
                code = type(exc).__name__
            self.errors[f"{operation}:{code}"] += 1
            # The repeat's answer means an earlier attempt was done — ours, or the
            # forwarding broker's own resend after the controller's answer was lost
            # (so even a first ask may get it). Names are never reused, and the checks
            # verify every confirmed create and delete on every node at the end.
            if (operation == "create" and code == "TOPIC_ALREADY_EXISTS") or (
                operation == "delete" and code == "UNKNOWN_TOPIC_OR_PART"
            ):
                return True
            if code not in RETRIABLE_ADMIN and code != "TimeoutError":
                raise RuntimeError(f"{operation} {name}: {code}")
            time.sleep(0.2)
        self.unanswered.append(f"{operation} {name}")
        return False

    def work(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        count = 0
        while not self.stopping.is_set():
            name = f"admin-{count}"
            count += 1
            if self._ask(admin, "create", name):
                self.created.append(name)
            live = [t for t in self.created if t not in self.delete_sent]
            if live and count % self.delete_every == 0:
                victim = self.rng.choice(live)
                if self._ask(admin, "delete", victim):
                    self.deleted.append(victim)
            self.stopping.wait(self.interval_s)


def create_topic_retrying(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout_s: float = 120.0,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    """``create_topic`` asked again (a new client each time) until it is answered: a
    client whose first Metadata came from a node that had not yet applied the
    controller's registration waits for a controller it never re-asks for."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            create_topic(bootstrap, topic, partitions, 15.0, replication_factor, config)
            return
        except KafkaException as exc:
            error = exc.args[0]
            # An earlier attempt was done (ours, or the forwarding broker's resend).
            if isinstance(error, KafkaError) and error.name() == "TOPIC_ALREADY_EXISTS":
                return
            if time.monotonic() > deadline:
                raise
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def topics_on(address: str, timeout_s: float = 30.0) -> set[str]:
    """The topic names one broker's Metadata lists (all topics), asked of it alone."""
    from tests.support.wire import WireClient, cluster_metadata

    with WireClient(address, timeout_s=timeout_s) as client:
        response = cluster_metadata(client, all_topics=True)
    return {topic.name for topic in response.topics if topic.error_code == 0}
