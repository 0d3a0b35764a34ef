"""The broker's views handed to handlers: ``BrokerMetadata`` (a ``MetadataView``) and
``BrokerConfigs`` (a ``ConfigView``).

How this works and why: handlers see narrow interfaces (services.py), never the
``Broker``; these two read through to the broker's image, identity, quorum leader and
config tables, so a handler sees the newest image without holding the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from odradek.metadata.image import MetadataImage
from odradek.metadata.view import Endpoint, endpoints_for_listener
from odradek.server.config import BrokerConfig
from odradek.storage.log_config import LogConfig

if TYPE_CHECKING:
    from odradek.server.broker import Broker


class BrokerMetadata:
    """The broker's ``MetadataView``: the controller's image, this node's identity."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def image(self) -> MetadataImage:
        return self._broker.image

    @property
    def node_id(self) -> int:
        return self._broker.node_id

    @property
    def cluster_id(self) -> str:
        return self._broker.cluster_id

    @property
    def controller_id(self) -> int:
        # The quorum's leader is the active controller (the one every broker forwards
        # its changes to) when it is also a broker clients can reach (combined nodes).
        # A controller-only leader is not in Metadata's broker list, so, as Kafka's
        # KRaft brokers do, clients are given a live broker instead — this one, which
        # forwards their admin requests to the active controller.
        broker = self._broker
        driver = broker.raft_driver
        leader = None if driver is None else driver.leader_id
        if leader is None:
            return broker.node_id
        registered = broker.image.brokers.get(leader)
        if registered is None or registered.fenced:
            return broker.node_id
        return leader

    @property
    def default_listener(self) -> str:
        return self._broker.default_listener_name

    def endpoints(
        self, image: MetadataImage, listener: str, *, include_fenced: bool = False
    ) -> list[Endpoint]:
        return endpoints_for_listener(image, listener, include_fenced=include_fenced)


class BrokerConfigs:
    """The broker's ``ConfigView``: static properties, with the image's dynamic ones."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def static(self) -> BrokerConfig:
        return self._broker.config

    def dynamic_defaults(self) -> dict[str, int]:
        return self._broker.dynamic_defaults()

    def topic_defaults(self) -> LogConfig:
        return self._broker.topic_defaults()

    def effective_topic_config(
        self, topic: str, explicit: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return self._broker.effective_topic_config(topic, explicit)


__all__ = ["BrokerConfigs", "BrokerMetadata"]
