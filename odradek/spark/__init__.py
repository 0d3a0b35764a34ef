"""odradek's PySpark connector: ``format("odradek")`` for batch and streaming reads and writes.

The source is pure Python on Spark's Python Data Source API (pyspark >= 4.2), with the
options and schema of Spark's own Kafka connector, and talks to any Kafka-compatible
broker through odradek's client. ``register(spark)`` registers it on a session (an
installed odradek needs no call: Spark finds the ``pyspark_odradek`` module by itself);
``use_as_kafka(spark)`` makes ``format("kafka")`` in the Python API resolve to it.

Importing this package needs pyspark (``pip install odradek[spark]``); the rest of
odradek never imports it.
"""

from odradek.spark.datasource import OdradekDataSource, register, use_as_kafka

__all__ = ["OdradekDataSource", "register", "use_as_kafka"]
