"""What one Spark read task is given: a picklable range spec, and the data-loss rule.

Kept apart from the reader (``read_fetch``, ``read_arrow``) so that the driver's
planning workers — a fresh Python process per streaming query — build partitions
without importing pyarrow, numpy and the decoder.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

logger = logging.getLogger("odradek.spark")


@dataclass(frozen=True, slots=True)
class TimestampBounds:
    """Pushed-down ``timestamp`` filters, in microseconds (Spark's unit); None = unbounded."""

    low_us: int | None = None
    low_inclusive: bool = True
    high_us: int | None = None
    high_inclusive: bool = True


class DataLossError(RuntimeError):
    """Records the query needed are gone from the partition (failOnDataLoss=true)."""


@dataclass(frozen=True)
class RangeSpec:
    """Everything a task needs to read ``topic``-``partition`` offsets [start, end)."""

    topic: str
    partition: int
    start: int
    end: int
    client: Mapping[str, str]
    include_headers: bool = False
    fail_on_data_loss: bool = True
    timestamps: TimestampBounds = field(default_factory=TimestampBounds)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def data_loss(spec: RangeSpec, detail: str) -> None:
    """Fail (failOnDataLoss=true) or warn."""
    if spec.fail_on_data_loss:
        raise DataLossError(
            f"{spec.name}: {detail}. Some data may have been lost because it is no longer "
            "available in Kafka (deleted by retention or DeleteRecords, or the topic was "
            "deleted); set the source option 'failOnDataLoss' to 'false' to skip it"
        )
    logger.warning("odradek: %s: %s; skipped (failOnDataLoss=false)", spec.name, detail)
