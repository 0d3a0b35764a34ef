"""Real odradek brokers inside the user's tests (issue 15).

``EmbeddedBroker`` (embedded.py) is one combined broker+controller, in this process on
a background thread or as a ``serve`` child process; ``EmbeddedCluster`` (cluster.py) is
a KRaft quorum of ``serve`` processes; the pytest plugin (pytest_plugin.py, registered
by the ``pytest11`` entry point) gives tests ``odradek_broker``, ``odradek_bootstrap``
and a fresh ``odradek_topic`` each. Nothing here is imported by the broker itself.

The two classes are imported on first use (PEP 562): the entry point loads the plugin,
and so this package, into every pytest session of an environment odradek is installed
in, which should not pay for asyncio and the rest until a test asks for a broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.testing.cluster import EmbeddedCluster
    from odradek.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker", "EmbeddedCluster"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedBroker":
        from odradek.testing.embedded import EmbeddedBroker

        return EmbeddedBroker
    if name == "EmbeddedCluster":
        from odradek.testing.cluster import EmbeddedCluster

        return EmbeddedCluster
    raise AttributeError(f"module 'odradek.testing' has no attribute {name!r}")
