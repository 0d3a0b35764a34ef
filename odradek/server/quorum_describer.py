"""DescribeQuorum answered by this node's own quorum (the zero-config single node).

How this works and why: a broker listener serves DescribeQuorum by forwarding it to
the active controller (``metadata/controller_rpc.py``). The zero-config node has no
controller listener to forward to — its quorum is this process, a single voter — so
its broker listener answers from its own ``RaftDriver`` with the same encoding the
controller listener uses (``raft/wire_describe_quorum.py``): the answer is the one a controller
listener would give.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.metadata.errors import ControllerError
from odradek.raft import wire_describe_quorum
from odradek.raft.driver import RaftDriver


class LocalQuorumDescriber:
    def __init__(self, driver: Callable[[], RaftDriver | None]) -> None:
        self._driver = driver

    async def describe_quorum(self, request: Any) -> Any:
        driver = self._driver()
        if driver is None:
            raise ControllerError("COORDINATOR_NOT_AVAILABLE", "the quorum has not started")
        description, wall_offset_ms = driver.describe_quorum()
        nodes = [(v.node_id, v.host, v.port) for v in driver.voters if v.port > 0]
        return wire_describe_quorum.describe_quorum_to_kio(
            description, request.__version__, wall_offset_ms, nodes
        )


__all__ = ["LocalQuorumDescriber"]
