"""``aiokafka.abc``'s name: the rebalance listener base class."""

from odradek.client.consumer.aio import ConsumerRebalanceListener

__all__ = ["ConsumerRebalanceListener"]
