"""MetadataView: what a broker-side component may know about the cluster.

How this works and why: handlers and coordinators read the cluster through this
Protocol — the current image, who this node is, the cluster id, the brokers'
endpoints on a listener and the active controller — instead of reaching into the
Broker. The image is immutable, so a caller reads ``image`` once and works on that
snapshot. The view is read-only: changes go through the ``ControllerChannel``
(controller_channel.py), and a change is in ``image`` once the channel returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from odradek.metadata.image import MetadataImage


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    rack: str | None
    fenced: bool = False


class MetadataView(Protocol):
    @property
    def image(self) -> MetadataImage:
        """The newest image this node has applied."""
        ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int:
        """The active controller (this node in combined mode; the quorum leader later)."""
        ...

    @property
    def default_listener(self) -> str:
        """The listener a request without one is answered for (the first configured)."""
        ...

    def endpoints(
        self, image: MetadataImage, listener: str, *, include_fenced: bool = False
    ) -> list[Endpoint]:
        """Each unfenced broker of ``image`` (every one with ``include_fenced``) with an
        endpoint on ``listener``, by node id."""
        ...


def endpoints_for_listener(
    image: MetadataImage, listener: str, *, include_fenced: bool = False
) -> list[Endpoint]:
    """The live brokers' endpoints on ``listener``: a fenced broker (registered but not
    caught up, or silent past ``broker.session.timeout.ms``) is left out, as Kafka's
    metadata cache lists only alive brokers (Metadata, DescribeCluster, FindCoordinator);
    DescribeCluster v2 may ask for them too (``include_fenced``, KIP-1073)."""
    endpoints = []
    for broker in sorted(image.brokers.values(), key=lambda b: b.broker_id):
        if broker.fenced and not include_fenced:
            continue
        for name, host, port in broker.endpoints:
            if name == listener:
                endpoints.append(Endpoint(broker.broker_id, host, port, broker.rack, broker.fenced))
                break
    return endpoints
