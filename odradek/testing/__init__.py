"""Real odradek brokers inside the user's tests (issue 15).

``EmbeddedBroker`` (embedded.py) is one combined broker+controller, in this process on
a background thread or as a ``serve`` child process; ``EmbeddedCluster`` (cluster.py) is
a KRaft quorum of ``serve`` processes; the pytest plugin (pytest_plugin.py, registered
by the ``pytest11`` entry point) gives tests ``odradek_broker``, ``odradek_bootstrap``
and a fresh ``odradek_topic`` each. Nothing here is imported by the broker itself.
"""

from odradek.testing.cluster import EmbeddedCluster
from odradek.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker", "EmbeddedCluster"]
