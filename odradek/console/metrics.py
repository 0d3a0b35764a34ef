"""Prometheus ``/metrics`` for a broker: Kafka's metric names, read at scrape time.

How this works and why: operators point Prometheus and their Kafka dashboards at the
names the JMX exporter's standard Kafka rules give Kafka's MBeans (lower-cased,
``kafka_<domain>_<type>_<name>``, a ``PerSec`` meter's count as ``..._total``, the
MBean's other keys as labels), so odradek exports the same names:

- ``kafka_server_brokertopicmetrics_{messagesin,bytesin,bytesout}_total`` with a
  ``topic`` label, plus one sample without it for all topics (Kafka's two MBeans), and
  ``kafka_server_brokertopicmetrics_replication{bytesout,bytesin}_total``;
- ``kafka_network_requestmetrics_totaltimems`` a histogram (ms) by ``request``
  (``Produce``, ``FetchConsumer``, ``FetchFollower``, ``Metadata``, ...);
- ``kafka_server_replicamanager_{partitioncount,leadercount,underreplicatedpartitions,
  underminisrpartitioncount,offlinereplicacount}``;
- on a node with the controller role, ``kafka_controller_kafkacontroller_{
  activecontrollercount,offlinepartitionscount,globaltopiccount,globalpartitioncount,
  activebrokercount,fencedbrokercount}``;
- ``kafka_log_log_{size,logstartoffset,logendoffset,numlogsegments}`` by ``topic``
  and ``partition`` for every replica hosted here;
- consumer lag as kafka_exporter names it: ``kafka_consumergroup_current_offset`` and
  ``kafka_consumergroup_lag`` by ``consumergroup``, ``topic``, ``partition``.

Nothing is kept in step with the broker: the hot paths bump plain integers
(replica/topic_stats.py, server/request_metrics.py) and ``BrokerCollector`` reads
them, and the partition, controller and group state, only when scraped
(``prometheus_client``'s custom-collector pattern). The HTTP side is a few lines on the
broker's own event loop (``asyncio.start_server``): one request per connection, with
the request line and headers bounded in size and time, so a scraper costs the broker
one short callback and no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from odradek.replica.topic_stats import BYTES_IN, BYTES_OUT, MESSAGES_IN, BrokerTopicStats
from odradek.server.request_metrics import BUCKET_BOUNDS_MS, RequestTimes

logger = logging.getLogger(__name__)

METRICS_PATH: Final = "/metrics"
# A scraper's request: its line and headers fit in this (Prometheus sends ~300 bytes),
# and arrive within this; past either the connection is closed without an answer.
MAX_REQUEST_HEAD_BYTES: Final = 16 * 1024
REQUEST_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class PartitionSample:
    """One replica hosted here, as the collector reads it."""

    topic: str
    partition: int
    leader: bool
    replicas: int
    isr: int
    min_insync_replicas: int
    size: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    segments: int


@dataclass(frozen=True, slots=True)
class ControllerSample:
    active: bool
    offline_partitions: int
    topics: int
    partitions: int
    active_brokers: int
    fenced_brokers: int


class MetricsSource(Protocol):
    """What the collector reads; console/broker_metrics.py gives it for a Broker."""

    @property
    def topic_stats(self) -> BrokerTopicStats: ...

    @property
    def request_times(self) -> RequestTimes: ...

    def partitions(self) -> Iterable[PartitionSample]: ...

    def offline_replicas(self) -> int: ...

    def controller(self) -> ControllerSample | None:
        """None on a node without the controller role."""
        ...

    def group_offsets(self) -> Iterable[tuple[str, str, int, int]]:
        """(group, topic, partition, committed offset) of the groups coordinated here."""
        ...


class BrokerCollector(Collector):
    def __init__(self, source: MetricsSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_metrics()
        yield self._request_times()
        partitions = list(self.source.partitions())
        yield from self._replica_manager(partitions)
        controller = self.source.controller()
        if controller is not None:
            yield from _controller(controller)
        yield from _logs(partitions)
        yield from self._consumer_lag(partitions)

    def _topic_metrics(self) -> Iterator[Metric]:
        stats = self.source.topic_stats
        described = (
            (MESSAGES_IN, "messagesin", "Records appended as leader (batch record counts)"),
            (BYTES_IN, "bytesin", "Record batch bytes appended as leader"),
            (BYTES_OUT, "bytesout", "Record batch bytes sent to consumers"),
        )
        for slot, name, doc in described:
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"]
            )
            for topic, row in sorted(stats.topics.items()):
                family.add_metric([topic], row[slot])
            # Kafka's all-topics MBean has no topic key: the same name without the label.
            family.samples.append(Sample(f"{family.name}_total", {}, stats.total[slot]))
            yield family
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Record batch bytes sent to follower replicas",
            value=stats.replication_bytes_out,
        )
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesin",
            "Record batch bytes appended here as a follower",
            value=stats.replication_bytes_in,
        )

    def _request_times(self) -> Metric:
        family = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request's frame to its response, in milliseconds",
            labels=["request"],
        )
        bounds = [floatToGoString(b) for b in BUCKET_BOUNDS_MS] + ["+Inf"]
        for name, histogram in sorted(self.source.request_times.by_request.items()):
            cumulative = histogram.cumulative()
            family.add_metric([name], list(zip(bounds, cumulative, strict=True)), histogram.sum_ms)
        return family

    def _replica_manager(self, partitions: list[PartitionSample]) -> Iterator[Metric]:
        leaders = [p for p in partitions if p.leader]
        values = (
            ("partitioncount", "Replicas hosted on this broker", len(partitions)),
            ("leadercount", "Partitions this broker leads", len(leaders)),
            (
                "underreplicatedpartitions",
                "Partitions led here whose ISR is smaller than their replica set",
                sum(1 for p in leaders if p.isr < p.replicas),
            ),
            (
                "underminisrpartitioncount",
                "Partitions led here whose ISR is smaller than min.insync.replicas",
                sum(1 for p in leaders if p.isr < p.min_insync_replicas),
            ),
            (
                "offlinereplicacount",
                "Replicas here taken offline by a storage error",
                self.source.offline_replicas(),
            ),
        )
        for name, doc, value in values:
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=value)

    def _consumer_lag(self, partitions: list[PartitionSample]) -> Iterator[Metric]:
        """kafka_exporter's lag: the partition's high watermark (the end a consumer
        reads to) minus the group's committed offset, for the groups coordinated here
        and the partitions hosted here (leader or follower: a follower learns the HW
        from its leader); a partition hosted elsewhere gets its offset, not its lag."""
        ends = {(p.topic, p.partition): p.high_watermark for p in partitions}
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "Committed offset of a consumer group on a partition",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the consumer group's committed offset",
            labels=labels,
        )
        for group, topic, index, offset in sorted(self.source.group_offsets()):
            key = [group, topic, str(index)]
            current.add_metric(key, offset)
            end = ends.get((topic, index))
            if end is not None and end >= 0:
                lag.add_metric(key, max(end - offset, 0))
        yield current
        yield lag


def _controller(sample: ControllerSample) -> Iterator[Metric]:
    values = (
        ("activecontrollercount", "1 on the active controller, else 0", int(sample.active)),
        ("offlinepartitionscount", "Partitions without a leader", sample.offline_partitions),
        ("globaltopiccount", "Topics in the cluster", sample.topics),
        ("globalpartitioncount", "Partitions in the cluster", sample.partitions),
        ("activebrokercount", "Registered brokers not fenced", sample.active_brokers),
        ("fencedbrokercount", "Registered brokers fenced", sample.fenced_brokers),
    )
    for name, doc, value in values:
        yield GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}", doc, value=value)


def _logs(partitions: list[PartitionSample]) -> Iterator[Metric]:
    described = (
        ("size", "Bytes of the replica's local log segments", "size"),
        ("logstartoffset", "The replica's log start offset", "log_start_offset"),
        ("logendoffset", "The replica's log end offset", "log_end_offset"),
        ("numlogsegments", "Local segments of the replica's log", "segments"),
    )
    ordered = sorted(partitions, key=lambda p: (p.topic, p.partition))
    for name, doc, field in described:
        family = GaugeMetricFamily(f"kafka_log_log_{name}", doc, labels=["topic", "partition"])
        for p in ordered:
            family.add_metric([p.topic, str(p.partition)], getattr(p, field))
        yield family


def metrics_registry(source: MetricsSource) -> CollectorRegistry:
    """The broker's metrics and the process's (CPU, memory, open files)."""
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(source))
    ProcessCollector(registry=registry)
    return registry


class MetricsEndpoint:
    """HTTP ``GET /metrics`` on the running event loop (``asyncio.start_server``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self, host: str, port: int) -> str:
        """Bind (port 0: any free port); returns the URL scrapers use. OSError if the
        address cannot be bound."""
        try:
            self.server = await asyncio.start_server(
                self._serve, host, port, limit=MAX_REQUEST_HEAD_BYTES
            )
        except OSError as error:  # the loop's text wraps the system's; keep the latter
            reason = os.strerror(error.errno) if error.errno else str(error)
            raise OSError(error.errno, reason) from None
        bound_port = self.server.sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound_port}{METRICS_PATH}"
        return self.url

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), REQUEST_TIMEOUT_S)
            if head is not None:
                writer.write(self._answer(*head))
                await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            pass  # a scraper that went away or sent garbage: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _answer(self, method: str, path: str, headers: dict[str, str]) -> bytes:
        if method not in ("GET", "HEAD"):
            return _response(405, "text/plain; charset=utf-8", b"only GET\n", method)
        if path.split("?", 1)[0] != METRICS_PATH:
            body = f"not found: the metrics are at {METRICS_PATH}\n".encode()
            return _response(404, "text/plain; charset=utf-8", body, method)
        # Prometheus asks for OpenMetrics when it can; the classic text format else.
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        try:
            body = encoder(self.registry)
        except Exception:  # a bug in a collector: the scrape fails, the broker goes on
            logger.exception("collecting metrics failed")
            return _response(500, "text/plain; charset=utf-8", b"collecting failed\n", method)
        return _response(200, content_type, body, method)


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    """(method, path, headers) of an HTTP/1.x request; None if it is not one."""
    line = await reader.readline()  # ValueError past the reader's limit
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    headers: dict[str, str] = {}
    size = len(line)
    while True:
        line = await reader.readline()
        size += len(line)
        if size > MAX_REQUEST_HEAD_BYTES:
            return None
        if line in (b"\r\n", b"\n", b""):
            return parts[0], parts[1], headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


_REASONS: Final = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Error"}


def _response(status: int, content_type: str, body: bytes, method: str) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    return head if method == "HEAD" else head + body
