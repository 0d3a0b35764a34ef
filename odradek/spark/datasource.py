"""The ``odradek`` Python data source: Spark's Kafka connector options and schema, in Python.

How this works and why: Spark creates one ``OdradekDataSource`` per query from the
user's options (a case-insensitive dict), asks it for the schema, then for a reader
(batch), a stream reader, a writer or a stream writer. Each of those lives in its own
module and is imported only when asked for, so a write never loads the read side and
the other way round. The schema is fixed (that of Spark's Kafka source), with
``headers`` when ``includeHeaders`` is true; a user-specified schema is refused as
Spark's connector refuses it.

``use_as_kafka(spark)``: Spark will not register a Python source under the name
``kafka`` (the provider name must equal the source's own name, and ``kafka`` is Spark's
built-in short name), so the opt-in works one level up, in PySpark's builders: the
``format`` methods of ``DataFrameReader``, ``DataStreamReader``, ``DataFrameWriter``
and ``DataStreamWriter`` are wrapped once per process to replace ``"kafka"`` by
``"odradek"`` when the builder's session has opted in (a session conf flag). Every
Python route to a format goes through those methods (``load(format=...)``,
``save(format=...)``, ``start(format=...)`` call ``self.format``), so existing
Python pipeline code runs unchanged. SQL (``USING kafka``), Scala/Java code and
the Spark Connect client classes are not affected.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.spark import options as opts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )

NAME: Final = "odradek"
USE_AS_KAFKA_CONF: Final = "spark.odradek.useAsKafka"

HEADERS_TYPE: Final = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def read_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source (plus ``headers`` when asked for)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class OdradekDataSource(DataSource):
    """``spark.read.format("odradek")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        """Spark's Kafka schema. Asked for by reads only (``load()``), so the options every
        read needs are checked here and a bad one fails ``load()`` rather than the action."""
        _check_worker_interpreter()
        from odradek.spark.read_options import consumer_config, parse_subscription

        parse_subscription(self.options)
        consumer_config(self.options)
        return read_schema(opts.get_bool(self.options, "includeHeaders", False))

    def _check_schema(self, schema: StructType) -> None:
        expected = read_schema(opts.get_bool(self.options, "includeHeaders", False))
        if schema != expected:
            raise opts.OptionError(
                "the odradek source has a fixed schema and cannot be given a custom one "
                f"(expected {expected.simpleString()}, got {schema.simpleString()})"
            )

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_worker_interpreter()
        from odradek.spark.read_batch import BatchReader

        self._check_schema(schema)
        return BatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_worker_interpreter()
        from odradek.spark.read_stream import RefusedStreamReader, StreamReader

        try:
            self._check_schema(schema)
            return StreamReader(dict(self.options), schema)
        except Exception as error:  # raised from Spark's first call (see the class)
            return RefusedStreamReader(error)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _check_worker_interpreter()
        from odradek.spark.write import batch_writer

        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _check_worker_interpreter()
        from odradek.spark.write import stream_writer

        return stream_writer(self.options, schema, overwrite)


def _check_worker_interpreter() -> None:
    """The source runs in Spark's Python workers: one started with an interpreter that
    lacks odradek's dependencies fails here with one line that says what to set,
    instead of a ModuleNotFoundError traceback from deep inside an import."""
    try:
        import odradek.client  # noqa: F401 - imports everything the source needs below
    except ImportError as error:
        raise opts.OptionError(
            f"Spark started its Python worker with {sys.executable}, which cannot import "
            f"{error.name or error}: set PYSPARK_PYTHON to the Python odradek is installed "
            f"in (or call odradek.spark.register(spark) in a local session)"
        ) from None


def register(spark: SparkSession) -> None:
    """Register ``format("odradek")`` on this session (idempotent).

    In local mode, when ``PYSPARK_PYTHON`` is not set, Spark starts its Python workers
    with whatever ``python3`` is on the ``PATH``, which is not the virtualenv a program
    run as ``.venv/bin/python job.py`` has odradek in: the workers then fail on their
    first import. Registering makes this session's workers use the driver's own
    interpreter instead (the one that just imported odradek). A cluster's executors
    run elsewhere, where the driver's path may not exist: there, set
    ``PYSPARK_PYTHON`` (or ``spark.pyspark.python``) as Spark's docs say.
    """
    _workers_use_this_interpreter(spark)
    spark.dataSource.register(OdradekDataSource)


def _workers_use_this_interpreter(spark: SparkSession) -> None:
    if os.environ.get("PYSPARK_PYTHON"):
        return  # the user chose
    try:
        context = spark.sparkContext
        chosen = context.getConf().get("spark.pyspark.python")
    except Exception:  # a Spark Connect session has no SparkContext here
        return
    if chosen or not str(context.master).startswith("local"):
        return
    if sys.executable:
        context.pythonExec = sys.executable


def use_as_kafka(spark: SparkSession, enabled: bool = True) -> None:
    """Opt in (or out): ``format("kafka")`` in this session's Python API means ``odradek``.

    Covers ``spark.read``, ``spark.readStream``, ``df.write`` and ``df.writeStream``
    (also through ``load``/``save``/``start``'s ``format=`` argument). Not covered: SQL
    ``CREATE TABLE ... USING kafka`` and other SQL, Scala/Java code in the same
    application, and Spark Connect clients (they build plans in another process).
    """
    register(spark)
    _install_format_hooks()
    spark.conf.set(USE_AS_KAFKA_CONF, "true" if enabled else "false")


def _uses_kafka_alias(builder: Any) -> bool:
    session = getattr(builder, "_spark", None)
    if session is None:
        return False
    try:
        return str(session.conf.get(USE_AS_KAFKA_CONF, "false")).lower() == "true"
    except Exception:  # a stopped session: no alias
        return False


def _wrap_format(method: Any) -> Any:
    @functools.wraps(method)
    def format(self: Any, source: str) -> Any:
        if isinstance(source, str) and source.lower() == "kafka" and _uses_kafka_alias(self):
            source = NAME
        return method(self, source)

    format._odradek_alias = True  # type: ignore[attr-defined]
    return format


_hooks_installed = False


def _install_format_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    for cls in (DataFrameReader, DataFrameWriter, DataStreamReader, DataStreamWriter):
        if not getattr(cls.format, "_odradek_alias", False):
            cls.format = _wrap_format(cls.format)  # type: ignore[method-assign]
    _hooks_installed = True
