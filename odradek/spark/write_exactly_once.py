"""The exactly-once streaming sink: one transaction and one batch marker per task.

How this works and why: with ``deliveryGuarantee=exactly-once`` every write task of a
micro-batch is one Kafka transaction. A task knows its ``(queryId, batchId,
partitionId)``: Spark's query id is stored in the checkpoint, so it is the same after a
restart, and a replayed micro-batch keeps its batch id. From them:

- *Fencing.* The task's producer has ``transactional.id =
  odradek-spark-<queryId>-<partitionId>`` and calls ``init_transactions`` before
  anything else. The coordinator bumps the producer epoch: any earlier attempt of the
  same task (a retried task, a speculative copy, an executor that lost contact, or a
  process that was killed mid-batch) can no longer produce or commit, and its open
  transaction is aborted. ``init_transactions`` returns only once that earlier
  transaction is complete (committed if it had already asked to commit, else aborted),
  so what the task reads next is final.
- *The marker.* Records go into the transaction; ``finish`` adds, in the SAME
  transaction, an offset commit (``send_offsets_to_transaction``) for the group
  ``odradek-spark-<queryId>-<partitionId>`` (one group per task, so tasks never
  contend): offset ``batchId + 1`` on partition 0 of the marker topic (the ``topic``
  option, or ``exactlyOnceMarkerTopic`` when rows carry their topic; the broker keeps
  offsets only for partitions that exist), with metadata naming query, batch and
  partition. The commit marker makes the records and the offset visible together or
  not at all.
- *Replay detection.* After ``init_transactions`` the task reads that group's offset
  with OffsetFetch ``require_stable`` (UNSTABLE_OFFSET_COMMIT, an offset still inside
  a transaction, is retried). If it is ``>= batchId + 1`` this task already committed
  this batch: it writes nothing and reports ``replayed``.

Why the check survives a crash anywhere: before the transaction commits, nothing of
the task is visible to read_committed readers and the marker is absent, so a replay
writes the batch once. Once the coordinator has the commit decision, records and
marker are committed together and are durable in the logs (``__transaction_state``,
the output partitions, ``__consumer_offsets``); a crash after that, before Spark writes
its commit log, makes Spark replay the batch, and the replayed task (after its own
``init_transactions`` has waited for that commit to complete) finds the marker and
skips. Spark only starts batch N+1 once batch N is in its commit log, so the marker
only moves forward.

Guarantee: every row of a micro-batch appears exactly once to ``isolation.level=
read_committed`` readers (odradek's source: ``kafka.isolation.level=read_committed``).
read_uncommitted readers still see records of aborted attempts. Assumption: a replayed
batch is re-planned with the same partitions holding the same rows - true for
replayable sources (odradek/Kafka, files) and deterministic plans. If not (a
non-deterministic repartition, a source that cannot replay), a replayed task with
different rows under the same partition id is skipped or written according to what
that partition id wrote before, so rows may be lost or duplicated: then use
at-least-once with idempotent readers.

Cost per task and micro-batch: one InitProducerId, one OffsetFetch, and (for a task
with rows) AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and the
coordinator's commit markers in every written partition; readers under read_committed
see records only after the commit. A task with no rows writes no transaction (its
replay writes no rows either). A replayed task still reads its input (the iterator is
drained) but does not convert or send it. bench/spark_sink.py measures the sink beside
at-least-once on the same input: on 2 cores, within noise of at-least-once both at
10,000-record and at 500-record micro-batches (Spark's own per-batch overhead, about a
second, dwarfs the transactions' few round trips).

Caveat: the marker is a committed group offset, so it expires like one: if a query is
stopped for longer than the broker's ``offsets.retention.minutes`` (Kafka's default is
7 days) and its last batch was written but not recorded in Spark's commit log, the
replay after the restart finds no marker and writes that batch again. Keep retention
above the longest expected outage, or delete old groups with the checkpoint.

Test hook: ``ODRADEK_SPARK_EOS_TEST_PAUSE`` (see ``TEST_PAUSE_ENV``) stops the sink at a
named point so that tests/spark/test_stream_exactly_once.py can SIGKILL a query exactly
there. It is read only when set; nothing else uses it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from odradek.spark.write import (
    ABANDON_TIMEOUT_S,
    DeliveryTally,
    OdradekCommitMessage,
    TaskDelivery,
    TaskIdentity,
    WriteError,
    WritePlan,
)

if TYPE_CHECKING:
    from pyspark.sql.datasource import WriterCommitMessage

    from odradek.client import Producer

logger = logging.getLogger(__name__)

PREFIX: Final = "odradek-spark-"
# Used when the user does not set kafka.transaction.timeout.ms: long enough for a big
# micro-batch task, short enough that a crashed task does not hold read_committed
# readers at the LSO for long if its query is never restarted (brokers allow up to
# transaction.max.timeout.ms, 15 minutes by default).
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 300_000
# How long a task waits for a stable marker (an earlier attempt's commit completing).
MARKER_FETCH_TIMEOUT_S: Final = 60.0


# -- test-only pause points -------------------------------------------------------------
# Unset outside tests/spark/test_stream_exactly_once.py. Value "<point>:<batch id>:<flag
# file>": at <point> of micro-batch <batch id> the sink writes <flag file> (one JSON
# object: what had been done) and sleeps until it is killed. Points:
#   "open"      - the task with partition id 0, after its first Arrow batch is produced
#                 and flushed: records in the log inside an open, uncommitted transaction;
#   "committed" - the driver's commit of the batch: every task's transaction (records
#                 and marker) committed, Spark's commit log not yet written.
TEST_PAUSE_ENV: Final = "ODRADEK_SPARK_EOS_TEST_PAUSE"
TEST_PAUSE_POINTS: Final = ("open", "committed")


def _test_pause_wanted(point: str, batch_id: int | None) -> str | None:
    """The flag file if the test hook asks to pause at ``point`` of ``batch_id``."""
    raw = os.environ.get(TEST_PAUSE_ENV)
    if not raw:
        return None
    wanted, batch, flag = raw.split(":", 2)
    if wanted not in TEST_PAUSE_POINTS:
        raise ValueError(f"{TEST_PAUSE_ENV}: unknown point {wanted!r}")
    return flag if wanted == point and batch_id == int(batch) else None


def _test_pause(flag: str, detail: dict[str, Any]) -> None:
    """Announce the pause in ``flag`` (written whole: temp file, then rename); sleep."""
    logger.warning("odradek sink: %s: pausing at %s until killed", TEST_PAUSE_ENV, detail)
    temporary = f"{flag}.tmp-{os.getpid()}"
    with open(temporary, "w") as out:
        json.dump(detail, out)
    os.replace(temporary, flag)
    while True:
        time.sleep(60)


class _Mark(NamedTuple):
    """An offset with metadata, as ``send_offsets_to_transaction`` reads it."""

    offset: int
    metadata: str


def transactional_id(query_id: str, partition_id: int) -> str:
    """The transactional id (and marker group) of one task of one query."""
    return f"{PREFIX}{query_id}-{partition_id}"


def marker_metadata(task: TaskIdentity) -> str:
    return (
        f"odradek-spark query={task.query_id} batch={task.batch_id} partition={task.partition_id}"
    )


def consumer_side(config: dict[str, str]) -> dict[str, str]:
    """The connection properties of a producer config that a consumer accepts too."""
    from odradek.client._core.config import PROPERTIES

    allowed = {p.name for p in PROPERTIES if "consumer" in p.roles}
    return {k: v for k, v in config.items() if k in allowed}


def read_marker(config: dict[str, str], group: str, topic: str) -> int:
    """The offset the marker group committed on ``topic``-0 (-1: none), read stably."""
    from odradek.client import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            **consumer_side(config),
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        deadline = time.monotonic() + MARKER_FETCH_TIMEOUT_S
        while True:
            try:
                found = consumer.committed([TopicPartition(topic, 0)])
                return max(found[0].offset, -1)
            except KafkaException as failure:
                # committed() retries UNSTABLE_OFFSET_COMMIT within request.timeout.ms;
                # a coordinator still loading can take longer.
                error = failure.args[0]
                retriable = getattr(error, "retriable", lambda: False)()
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def _describe(error: BaseException) -> str:
    from odradek.client import KafkaException

    inner = error.args[0] if isinstance(error, KafkaException) and error.args else error
    fatal = getattr(inner, "fatal", None)
    if callable(fatal) and fatal():
        return f"{inner} (fenced or fatal: a newer attempt of this task took over)"
    return str(inner)


class ExactlyOnceDelivery(TaskDelivery):
    """One transactional ``Producer`` per task: fence, check the marker, write, commit."""

    def __init__(self, plan: WritePlan, task: TaskIdentity) -> None:
        super().__init__(plan, task)
        if task.query_id is None or task.batch_id is None:
            raise WriteError(
                "odradek sink: deliveryGuarantee=exactly-once needs a streaming query "
                "(no query id or batch id in this task)"
            )
        marker_topic = plan.marker_topic or plan.topic
        assert marker_topic is not None  # plan_write guarantees one
        self.marker_topic = marker_topic
        self.txn_id = transactional_id(task.query_id, task.partition_id)
        self.batch_id = task.batch_id
        self._tally = DeliveryTally()
        self._in_transaction = False
        self._producer: Producer | None = None
        config = dict(plan.config)
        config.setdefault("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
        config["transactional.id"] = self.txn_id
        self._timeout_s = int(config["transaction.timeout.ms"]) / 1000
        self.replayed = False
        self._start(config)

    def _where(self) -> str:
        return (
            f"task {self.task.partition_id} (attempt {self.task.attempt}) of batch "
            f"{self.batch_id}, transactional.id {self.txn_id}"
        )

    def _start(self, config: dict[str, str]) -> None:
        from odradek.client import KafkaException, Producer

        self._producer = Producer(config)
        try:
            self._producer.init_transactions(self._timeout_s)
            committed = read_marker(config, self.txn_id, self.marker_topic)
        except KafkaException as error:
            self.abandon()
            raise WriteError(
                f"odradek sink: {self._where()}: could not start: {_describe(error)}"
            ) from error
        except BaseException:
            self.abandon()
            raise
        if committed >= self.batch_id + 1:
            self.replayed = True
            logger.info(
                "odradek sink: %s already committed (marker offset %d); writing nothing",
                self._where(),
                committed,
            )

    @property
    def wants_records(self) -> bool:
        return not self.replayed

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        if self.replayed:
            return
        producer = self._producer
        assert producer is not None
        if not self._in_transaction:
            producer.begin_transaction()
            self._in_transaction = True
        producer.produce(
            topic, value, key, partition, on_delivery=self._tally.on_delivery, headers=headers
        )
        self._tally.sent += 1

    def after_batch(self) -> None:
        if self._producer is not None and self._in_transaction:
            self._producer.poll(0)
            if self.task.partition_id == 0:
                flag = _test_pause_wanted("open", self.batch_id)
                if flag is not None:
                    left = self._producer.flush(self._timeout_s)
                    detail = {"point": "open", "batch": self.batch_id, "records": self._tally.sent}
                    _test_pause(flag, {**detail, "unflushed": left})

    def finish(self) -> OdradekCommitMessage:
        from odradek.client import ConsumerGroupMetadata, KafkaException

        producer = self._producer
        assert producer is not None
        if not self._in_transaction:  # replayed, or no rows: nothing to commit
            self._close()
            return OdradekCommitMessage(self.task, 0, {}, replayed=self.replayed)
        marker = {(self.marker_topic, 0): _Mark(self.batch_id + 1, marker_metadata(self.task))}
        try:
            producer.send_offsets_to_transaction(
                marker, ConsumerGroupMetadata(self.txn_id), self._timeout_s
            )
            producer.commit_transaction(self._timeout_s)
        except KafkaException as error:
            raise WriteError(
                f"odradek sink: {self._where()}: transaction not committed "
                f"({self._tally.sent} records): {self._delivery_detail() or _describe(error)}"
            ) from error
        self._in_transaction = False
        self._close()
        if self._tally.failed:  # cannot happen after a successful commit; be loud if it does
            raise WriteError(f"odradek sink: {self._where()}: {self._delivery_detail()}")
        assert sum(w.records for w in self._tally.written.values()) == self._tally.sent
        return OdradekCommitMessage(self.task, self._tally.sent, self._tally.written)

    def _delivery_detail(self) -> str:
        if not self._tally.first_error:
            return ""
        return "{} of {} records failed; first error on {}-{}: {}".format(
            self._tally.failed, self._tally.sent, *self._tally.first_error
        )

    def _close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(ABANDON_TIMEOUT_S)

    def abandon(self) -> None:
        """The task failed: abort its transaction (a fenced producer cannot; the
        coordinator already aborted it), then close."""
        producer = self._producer
        if producer is not None and self._in_transaction:
            self._in_transaction = False
            try:
                producer.abort_transaction(ABANDON_TIMEOUT_S)
            except Exception as error:  # fenced/fatal, or the broker is gone
                logger.warning("odradek sink: %s: abort failed: %s", self._where(), error)
        self._close()

    @staticmethod
    def commit_batch(messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        done = [m for m in messages if isinstance(m, OdradekCommitMessage)]
        replayed = sum(1 for m in done if m.replayed)
        flag = _test_pause_wanted("committed", batch_id)
        if flag is not None:
            records = sum(m.records for m in done)
            _test_pause(flag, {"point": "committed", "batch": batch_id, "records": records})
        logger.info(
            "odradek sink: batch %s committed exactly once: %d records, %d of %d tasks "
            "had committed before (replay)",
            batch_id,
            sum(m.records for m in done),
            replayed,
            len(done),
        )

    @staticmethod
    def abort_batch(messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        done = sum(1 for m in messages if isinstance(m, OdradekCommitMessage))
        logger.warning(
            "odradek sink: batch %s aborted; %d tasks had committed their transactions, "
            "a replay of the batch finds their markers and does not write them again",
            batch_id,
            done,
        )
