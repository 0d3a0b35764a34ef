"""The write side of ``format("odradek")``: batch and streaming writes.

How this works and why: Spark calls ``writer()`` / ``streamWriter()`` on the driver while
it plans the query; ``plan_write`` checks the DataFrame's schema and the options there,
so a missing ``value`` column, a column of the wrong type, a bad ``kafka.*`` producer
property or a save mode the sink cannot honour fails at planning with one line naming
the column or option. The writer it returns is plain picklable data (a ``WritePlan``);
Spark ships it to the executors, where ``write`` receives the task's rows as Arrow
record batches (``DataSourceArrowWriter`` / ``DataSourceStreamArrowWriter``: no
per-row ``Row`` objects), turns each column into a Python list once per batch and
hands every record to one odradek ``Producer`` per task. Before returning its commit
message a task flushes the producer and checks every delivery report: a record the
broker did not acknowledge fails the task (Spark then retries it), so a committed
write means every record is in the log.

Columns, as in Spark's Kafka sink: ``value`` (required; binary or string, null is a
tombstone), ``key`` (binary or string), ``topic`` (string; the ``topic`` option wins
over it), ``partition`` (int; null means the producer's partitioner), ``headers``
(``array<struct<key:string,value:binary>>``). Other columns are ignored. A null
``topic`` (without the option), a negative ``partition`` or a header with a null key
fails the task, naming the column. Only append is possible: a topic cannot be
truncated, so batch ``mode("overwrite")`` and streaming ``outputMode("complete")``
(both reach the sink as ``overwrite``) are refused.

Delivery guarantee (option ``deliveryGuarantee``): ``at-least-once`` by default. A
retried task or a replayed micro-batch sends its records again, so readers may see
duplicates - the same guarantee as Spark's own Kafka sink. ``exactly-once`` (streaming
writes only) makes every task of a micro-batch one Kafka transaction with a batch marker
and skips tasks a replayed batch already committed; see ``write_exactly_once``. A batch
(non-streaming) write cannot be exactly-once: Spark gives its tasks no identity that
survives a re-run of the job, so a re-run could not tell what an earlier run committed,
and it is refused at planning. ``TaskDelivery`` is the seam between the two: a task knows
its ``(queryId, batchId, partitionId)`` (``TaskIdentity``), and the driver learns about a
batch in ``commit(messages, batchId)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from odradek.client._core.config import ClientConfig, ConfigError
from odradek.spark import options as opts

if TYPE_CHECKING:
    import pyarrow as pa

    from odradek.client._core.types import Message

logger = logging.getLogger(__name__)

# Spark's local properties for the running micro-batch (set by its streaming engine on
# the driver thread and shipped with every task): the query's id and the batch id.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"

AT_LEAST_ONCE: Final = "at-least-once"
EXACTLY_ONCE: Final = "exactly-once"

# How long close() may wait for the producer after a failed task (it already failed;
# do not hold the executor slot for delivery.timeout.ms).
ABANDON_TIMEOUT_S: Final = 5.0

_TEXT_OR_BINARY: Final = (BinaryType(), StringType())


class WriteError(RuntimeError):
    """Records of a write task were not acknowledged; the message says which and why."""


# -- planning (driver) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Everything an executor needs to write, checked at planning; picklable."""

    config: dict[str, str]  # producer config (Kafka property names)
    topic: str | None  # the ``topic`` option: wins over the column
    value: str  # column names as they appear in the DataFrame
    key: str | None
    topic_column: str | None
    partition: str | None
    headers: str | None
    guarantee: str = AT_LEAST_ONCE
    marker_topic: str | None = None  # exactly-once: where the batch markers are kept


def _describe(data_type: DataType) -> str:
    return data_type.simpleString()


def _headers_type_ok(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType):
        return False
    element = data_type.elementType
    if not isinstance(element, StructType) or len(element.fields) != 2:
        return False
    key, value = element.fields
    return (
        key.name.lower() == "key"
        and isinstance(key.dataType, StringType)
        and value.name.lower() == "value"
        and isinstance(value.dataType, BinaryType)
    )


def _column(schema: StructType, name: str) -> tuple[str, DataType] | None:
    """The DataFrame's column ``name`` (any case, like Spark's resolution), or None."""
    for column in schema.fields:
        if column.name.lower() == name:
            return column.name, column.dataType
    return None


def _typed_column(schema: StructType, name: str, allowed: tuple[DataType, ...]) -> str | None:
    found = _column(schema, name)
    if found is None:
        return None
    real_name, data_type = found
    if data_type not in allowed:
        kinds = " or ".join(_describe(t) for t in allowed)
        raise opts.OptionError(
            f"column '{real_name}' must be {kinds} for the odradek sink, got {_describe(data_type)}"
        )
    return real_name


SPARK_PARTITIONER = "murmur2_random"
CLUSTER_CHECK_S = 60.0  # the Java producer's max.block.ms default


def plan_write(
    options: Mapping[str, str], schema: StructType, overwrite: bool, streaming: bool = True
) -> WritePlan:
    """Check the schema, options and mode of a write; raise ``OptionError`` naming the culprit."""
    if overwrite:
        raise opts.OptionError(
            "the odradek sink only appends: a topic cannot be truncated, so batch "
            "mode('overwrite') and streaming outputMode('complete') are not supported; "
            "use mode('append') / outputMode('append')"
        )
    guarantee = str(opts.get(options, "deliveryGuarantee", AT_LEAST_ONCE)).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise opts.OptionError(
            f"option 'deliveryGuarantee' must be 'at-least-once' or 'exactly-once', "
            f"got {guarantee!r}"
        )
    if guarantee == EXACTLY_ONCE and not streaming:
        raise opts.OptionError(
            "option 'deliveryGuarantee': exactly-once is for streaming writes only (a batch "
            "job has no identity a re-run could check); use 'at-least-once' here"
        )
    config = opts.client_config(options, for_producer=True)
    # Spark's own Kafka sink partitions as the Java client does (murmur2 of the key,
    # keyless records sticky): not the odradek Producer's confluent-kafka default.
    config.setdefault("partitioner", SPARK_PARTITIONER)
    try:
        ClientConfig(config, "producer")
    except ConfigError as error:
        detail = str(error).split(": ", 1)[-1]
        raise opts.OptionError(f"option 'kafka.{error.key}': {detail}") from None

    value = _typed_column(schema, "value", _TEXT_OR_BINARY)
    if value is None:
        names = ", ".join(schema.fieldNames()) or "none"
        raise opts.OptionError(
            f"the odradek sink needs a column 'value' (binary or string); columns: {names}"
        )
    topic_option = opts.get(options, "topic")
    if topic_option is not None and not str(topic_option).strip():
        raise opts.OptionError("option 'topic' must not be empty")
    topic_column = _typed_column(schema, "topic", (StringType(),))
    if topic_option is None and topic_column is None:
        raise opts.OptionError(
            "the odradek sink needs a topic: set the option 'topic' or add a string column 'topic'"
        )
    headers = None
    found = _column(schema, "headers")
    if found is not None:
        headers, data_type = found
        if not _headers_type_ok(data_type):
            raise opts.OptionError(
                f"column '{headers}' must be array<struct<key:string,value:binary>> for "
                f"the odradek sink, got {_describe(data_type)}"
            )
    marker_topic = None
    if guarantee == EXACTLY_ONCE:
        marker_topic = topic_option or opts.get(options, "exactlyOnceMarkerTopic")
        if marker_topic is None or not str(marker_topic).strip():
            raise opts.OptionError(
                "option 'exactlyOnceMarkerTopic' must name an existing topic when "
                "deliveryGuarantee=exactly-once writes rows to their 'topic' column "
                "(partition 0 of it keys the batch markers); or set the option 'topic'"
            )
    return WritePlan(
        config=config,
        topic=None if topic_option is None else str(topic_option),
        value=value,
        key=_typed_column(schema, "key", _TEXT_OR_BINARY),
        topic_column=topic_column,
        partition=_typed_column(schema, "partition", (IntegerType(),)),
        headers=headers,
        guarantee=guarantee,
        marker_topic=None if marker_topic is None else str(marker_topic),
    )


# -- delivery (executors) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which task wrote: Spark's partition id and attempt, plus query/batch when streaming."""

    partition_id: int
    attempt: int
    query_id: str | None = None
    batch_id: int | None = None

    @classmethod
    def current(cls) -> TaskIdentity:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:  # not inside a Spark task (a direct call, e.g. a unit test)
            return cls(partition_id=0, attempt=0)
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        return cls(
            partition_id=context.partitionId(),
            attempt=context.attemptNumber(),
            query_id=context.getLocalProperty(QUERY_ID_PROPERTY),
            batch_id=int(batch) if batch is not None else None,
        )


@dataclass(slots=True)
class PartitionWritten:
    """What one task wrote to one topic-partition (offsets as acknowledged)."""

    records: int = 0
    first_offset: int = -1
    last_offset: int = -1

    def add(self, offset: int) -> None:
        self.records += 1
        if offset >= 0:
            if self.first_offset < 0 or offset < self.first_offset:
                self.first_offset = offset
            self.last_offset = max(self.last_offset, offset)


class DeliveryTally:
    """One task's delivery reports: records sent, failed (with the first error) and
    written per partition (their offsets), for the commit message or the task's error."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0
        self.first_error: tuple[str, int, str] | None = None
        self.written: dict[tuple[str, int], PartitionWritten] = {}

    def on_delivery(self, error: Any, message: Message) -> None:
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = (message.topic(), message.partition(), str(error))
            return
        where = (message.topic(), message.partition())
        written = self.written.get(where)
        if written is None:
            written = self.written[where] = PartitionWritten()
        written.add(message.offset())


@dataclass
class OdradekCommitMessage(WriterCommitMessage):
    """A task's report to the driver: who wrote, and how many records went where."""

    task: TaskIdentity
    records: int
    written: dict[tuple[str, int], PartitionWritten] = field(default_factory=dict)
    replayed: bool = False  # exactly-once: this task had committed the batch before


class TaskDelivery:
    """The seam between a write task and the broker: how records go out and are confirmed.

    An executor task calls ``send`` for each record, then ``finish`` (which returns the
    commit message only once every record is safely delivered under the guarantee) or
    ``abandon`` if the task fails. The driver calls ``commit_batch``/``abort_batch``
    with all tasks' messages. ``AtLeastOnceDelivery`` is here; ``ExactlyOnceDelivery``
    (transactional) is in ``write_exactly_once``.
    """

    def __init__(self, plan: WritePlan, task: TaskIdentity) -> None:
        self.plan = plan
        self.task = task

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        raise NotImplementedError

    @property
    def wants_records(self) -> bool:
        """False when the task has nothing to write (a replay): rows are not converted."""
        return True

    def after_batch(self) -> None:
        """Called after each Arrow batch of the task (a chance to serve reports)."""

    def finish(self) -> OdradekCommitMessage:
        raise NotImplementedError

    def abandon(self) -> None:
        raise NotImplementedError

    @staticmethod
    def commit_batch(messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Driver: every task of the batch finished. At-least-once: nothing left to do."""
        records = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        logger.info("odradek sink: batch %s committed, %d records", batch_id, records)

    @staticmethod
    def abort_batch(messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Driver: a task failed. Records of the tasks that finished stay in their topics."""
        delivered = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        if delivered:
            logger.warning(
                "odradek sink: batch %s aborted; %d records of its finished tasks were "
                "already delivered and stay (at-least-once: a retry sends them again)",
                batch_id,
                delivered,
            )


class AtLeastOnceDelivery(TaskDelivery):
    """One odradek ``Producer`` per task; ``finish`` flushes and checks every report."""

    def __init__(self, plan: WritePlan, task: TaskIdentity) -> None:
        from odradek.client import Producer

        super().__init__(plan, task)
        self._producer = Producer(dict(plan.config))
        self._tally = DeliveryTally()
        # The Producer starts without a broker (as confluent-kafka's); fail the task
        # now on an unreachable cluster, as before, not after delivery.timeout.ms.
        try:
            self._producer.list_topics(timeout=CLUSTER_CHECK_S)
        except BaseException:
            self._producer.close(0)
            raise

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        self._producer.produce(
            topic, value, key, partition, on_delivery=self._tally.on_delivery, headers=headers
        )
        self._tally.sent += 1

    def after_batch(self) -> None:
        """Serve delivery reports so far (keeps the report queue short on big tasks)."""
        self._producer.poll(0)

    def finish(self) -> OdradekCommitMessage:
        left = self._producer.flush()
        self._producer.close(ABANDON_TIMEOUT_S)
        if left or self._tally.failed:
            reason = (
                "first error on {}-{}: {}".format(*self._tally.first_error)
                if self._tally.first_error
                else "no acknowledgement within delivery.timeout.ms"
            )
            raise WriteError(
                f"odradek sink: {self._tally.failed + left} of {self._tally.sent} records of task "
                f"{self.task.partition_id} (attempt {self.task.attempt}) were not delivered; "
                f"{reason}"
            )
        assert sum(w.records for w in self._tally.written.values()) == self._tally.sent
        return OdradekCommitMessage(self.task, self._tally.sent, self._tally.written)

    def abandon(self) -> None:
        self._producer.close(ABANDON_TIMEOUT_S)


def delivery_class(guarantee: str) -> type[TaskDelivery]:
    """The ``TaskDelivery`` of a guarantee (the transactional one imported on demand)."""
    if guarantee == EXACTLY_ONCE:
        from odradek.spark.write_exactly_once import ExactlyOnceDelivery

        return ExactlyOnceDelivery
    return AtLeastOnceDelivery


# -- Arrow batches to records (executors) ----------------------------------------------


def _headers_list(raw: list[dict[str, Any]] | None) -> list[tuple[str, bytes | None]] | None:
    if not raw:
        return None
    headers = []
    for header in raw:
        name = header["key"]
        if name is None:
            raise WriteError("odradek sink: column 'headers' holds a header with a null key")
        headers.append((name, header["value"]))
    return headers


def write_batches(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> OdradekCommitMessage:
    """Executor: send every row of ``batches``; the commit message once all are delivered."""
    delivery = delivery_class(plan.guarantee)(plan, TaskIdentity.current())
    try:
        for batch in batches:
            if delivery.wants_records:
                _send_batch(plan, delivery, batch)
                delivery.after_batch()
            # else: drain the input unread, so the worker's stream ends where Spark expects
        return delivery.finish()
    except BaseException:
        delivery.abandon()
        raise


def _send_batch(plan: WritePlan, delivery: TaskDelivery, batch: pa.RecordBatch) -> None:
    rows = batch.num_rows
    if rows == 0:
        return
    # One conversion per column and batch (C code); the loop below only zips lists.
    values = batch.column(plan.value).to_pylist()
    keys = batch.column(plan.key).to_pylist() if plan.key else [None] * rows
    partitions = batch.column(plan.partition).to_pylist() if plan.partition else [None] * rows
    headers = batch.column(plan.headers).to_pylist() if plan.headers else [None] * rows
    if plan.topic is not None:
        topics: list[str | None] = [plan.topic] * rows
    else:
        assert plan.topic_column is not None
        topics = batch.column(plan.topic_column).to_pylist()
    send = delivery.send
    for topic, value, key, partition, header in zip(
        topics, values, keys, partitions, headers, strict=True
    ):
        if topic is None:
            raise WriteError(
                "odradek sink: a row has a null 'topic' column and no option 'topic' is set"
            )
        if partition is None:
            partition = -1  # the producer's partitioner picks
        elif partition < 0:
            raise WriteError(f"odradek sink: column 'partition' holds {partition}; must be >= 0")
        send(topic, value, key, partition, _headers_list(header))


# -- the writers Spark sees -------------------------------------------------------------


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("odradek").mode("append")``."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        delivery_class(self.plan.guarantee).commit_batch(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        delivery_class(self.plan.guarantee).abort_batch(messages, None)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("odradek").outputMode("append")``; one call per micro-batch."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        delivery_class(self.plan.guarantee).commit_batch(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        delivery_class(self.plan.guarantee).abort_batch(messages, batchId)


def batch_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> BatchWriter:
    return BatchWriter(plan_write(options, schema, overwrite, streaming=False))


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> StreamWriter:
    return StreamWriter(plan_write(options, schema, overwrite, streaming=True))
