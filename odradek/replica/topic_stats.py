"""BrokerTopicStats: the per-topic traffic counters of Kafka's BrokerTopicMetrics.

How this works and why: Kafka counts, per topic and for all topics together, the
messages and bytes a leader appends (MessagesInPerSec, BytesInPerSec) and the bytes it
sends to consumers (BytesOutPerSec; bytes sent to followers are ReplicationBytesOut, and
those a follower appends ReplicationBytesIn, for all topics only). Here they are plain
integers in a dict, bumped once per partition of a request — the record count comes from
the batch headers the append already read (``AppendInfo.record_count``), never from the
records — so the produce and fetch paths pay a dict lookup and a few additions. Nothing
here knows Prometheus: the exporter (console/metrics.py) reads the counters when it is
scraped.

The counters only grow while the process runs (a Prometheus counter's contract); a
deleted topic's row is dropped (``forget``) as Kafka removes its metrics, so a
topic re-created under the same name starts again from zero, and the all-topics
totals keep what it had counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from odradek.replica.reads import PartitionRead

# Slots of a topic's row: the counters the exporter names messagesin, bytesin, bytesout.
MESSAGES_IN: Final = 0
BYTES_IN: Final = 1
BYTES_OUT: Final = 2


class BrokerTopicStats:
    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}  # topic -> [messages in, bytes in, bytes out]
        self.total = [0, 0, 0]  # the same, for all topics (Kafka's allTopicsStats)
        self.replication_bytes_out = 0  # sent to follower replicas
        self.replication_bytes_in = 0  # appended here as a follower

    def _row(self, topic: str) -> list[int]:
        row = self.topics.get(topic)
        if row is None:
            row = self.topics[topic] = [0, 0, 0]
        return row

    def record_append(self, topic: str, messages: int, size: int) -> None:
        """A leader appended ``messages`` records in ``size`` bytes of batches."""
        row = self._row(topic)
        row[MESSAGES_IN] += messages
        row[BYTES_IN] += size
        total = self.total
        total[MESSAGES_IN] += messages
        total[BYTES_IN] += size

    def record_replication_in(self, size: int) -> None:
        """A follower appended ``size`` bytes of its leader's batches."""
        self.replication_bytes_in += size

    def record_fetch(
        self, results: Iterable[tuple[str, Sequence[tuple[int, PartitionRead]]]], follower: bool
    ) -> None:
        """The record bytes a Fetch answers with (the batches, not the response framing):
        BytesOut by topic for a consumer, ReplicationBytesOut for a follower."""
        if follower:
            sent = 0
            for _, reads in results:
                for _, read in reads:
                    for piece in read.ranges:
                        sent += piece.length
            self.replication_bytes_out += sent
            return
        for topic, reads in results:
            size = 0
            for _, read in reads:
                for piece in read.ranges:
                    size += piece.length
            if size:
                self._row(topic)[BYTES_OUT] += size
                self.total[BYTES_OUT] += size

    def forget(self, topic: str) -> None:
        """A deleted topic's row goes (Kafka's removeMetrics); the totals keep it."""
        self.topics.pop(topic, None)
