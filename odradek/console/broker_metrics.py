"""A running Broker as the metrics collector's ``MetricsSource``, and its endpoint.

How this works and why: the collector (console/metrics.py) knows nothing of the
broker's parts; this adapter reads them when a scrape asks — the replica manager's
hosted partitions and counters, the dispatchers' request times, the controller's
image and whether this node is the active controller, the group coordinator's
committed offsets. It reads only what exists: the endpoint is bound before the broker
starts (so a port in use fails first, and a node waiting for its quorum can be
scraped), when there is no controller, image or metadata writer yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from odradek.console.metrics import (
    ControllerSample,
    MetricsEndpoint,
    PartitionSample,
    metrics_registry,
)
from odradek.replica.topic_stats import BrokerTopicStats
from odradek.server.config import CONTROLLER_ROLE
from odradek.server.request_metrics import RequestTimes

if TYPE_CHECKING:
    from odradek.server.broker import Broker


class BrokerMetricsSource:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def topic_stats(self) -> BrokerTopicStats:
        return self._broker.replica_manager.topic_stats

    @property
    def request_times(self) -> RequestTimes:
        return self._broker.request_times

    def partitions(self) -> Iterator[PartitionSample]:
        for (topic, index), partition in list(self._broker.replica_manager.partitions.items()):
            log = partition.log
            if log.closed:  # being deleted or moved between log dirs
                continue
            yield PartitionSample(
                topic,
                index,
                partition.is_leader,
                len(partition.replicas),
                len(partition.isr),
                log.config.min_insync_replicas,
                log.size,
                log.log_start_offset,
                log.log_end_offset,
                log.high_watermark,
                len(log.segments),
            )

    def offline_replicas(self) -> int:
        return len(self._broker.replica_manager.offline)

    def controller(self) -> ControllerSample | None:
        broker = self._broker
        if CONTROLLER_ROLE not in broker.config.roles:
            return None
        writer = broker.metadata_writer
        image = broker.image
        partitions = [p for t in image.topics.values() for p in t.partitions.values()]
        fenced = sum(1 for b in image.brokers.values() if b.fenced)
        return ControllerSample(
            active=writer is not None and writer.is_active,
            offline_partitions=sum(1 for p in partitions if p.leader < 0),
            topics=len(image.topics),
            partitions=len(partitions),
            active_brokers=len(image.brokers) - fenced,
            fenced_brokers=fenced,
        )

    def group_offsets(self) -> Iterable[tuple[str, str, int, int]]:
        return self._broker.group_coordinator.committed_offsets()


async def start_metrics_endpoint(broker: Broker) -> MetricsEndpoint | None:
    """Serve ``metrics.listener`` if it is set; None if not. OSError if it cannot bind."""
    listener = broker.config["metrics.listener"]
    if listener is None:
        return None
    endpoint = MetricsEndpoint(metrics_registry(BrokerMetricsSource(broker)))
    await endpoint.start(listener.host, listener.port)
    return endpoint
