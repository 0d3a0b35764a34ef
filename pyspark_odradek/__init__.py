"""Static discovery hook: Spark imports every top-level ``pyspark_*`` module it finds on
the Python path and registers its ``DefaultSource`` under ``DefaultSource.name()``, so an
installed odradek provides ``format("odradek")`` without a ``spark.dataSource.register``
call.
"""

from odradek.spark.datasource import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
