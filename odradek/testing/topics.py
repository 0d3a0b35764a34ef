"""Topics created on demand for tests: idempotent, and usable the moment they return.

How this works and why: a test asks for the topic it needs rather than arranging it
beforehand, so creating one that exists (with the same partition count) is not an
error — a test rerun against a session-wide broker, or two fixtures asking for the
same name, both get it. A different partition count is a mistake in the test and
raises ``ValueError``. CreateTopics is answered once the controller committed the
topic; the partitions' leaders may reach the broker's metadata a moment later, so
this waits until every partition has one: a producer started right after sees the
topic, not UNKNOWN_TOPIC_OR_PARTITION. One AdminClient (odradek's own, over the wire
like any client) per bootstrap is kept while its broker runs: a topic per test then
costs one CreateTopics and a Metadata poll, not a client's start-up.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from odradek.client import AdminClient

METADATA_POLL_S: Final = 0.01
# Kafka's rule for topic names (Topic.validate): legal characters, at most 249 long.
_LEGAL_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")

_admins: dict[str, AdminClient] = {}
_admins_lock = threading.Lock()


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> str:
    """Create ``name`` on the cluster at ``bootstrap`` unless it exists; returns ``name``."""
    from odradek.client import KafkaException, NewTopic
    from odradek.client._core.errors import KafkaError

    if not _LEGAL_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-]")
    admin = _admin(bootstrap)
    topic = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
    future = admin.create_topics([topic], request_timeout=timeout_s)[name]
    try:
        future.result(timeout_s)
    except KafkaException as failure:
        error = failure.args[0]
        code = error.code() if isinstance(error, KafkaError) else None
        if code is None or code.name.lower() != "topic_already_exists":
            raise ValueError(f"cannot create topic {name!r}: {error}") from None
    _wait_for_leaders(admin, name, partitions, timeout_s)
    return name


def _wait_for_leaders(admin: AdminClient, name: str, partitions: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        topic = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if topic is not None and topic.error is None and topic.partitions:
            if len(topic.partitions) != partitions:
                raise ValueError(
                    f"topic {name!r} exists with {len(topic.partitions)} partitions, "
                    f"not {partitions}"
                )
            if all(p.leader >= 0 and p.error is None for p in topic.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} has no leader for every partition yet")
        time.sleep(METADATA_POLL_S)


def _admin(bootstrap: str) -> AdminClient:
    from odradek.client import AdminClient

    with _admins_lock:
        admin = _admins.get(bootstrap)
        if admin is None:
            admin = _admins[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
        return admin


def close_admin(bootstrap: str) -> None:
    """Close the AdminClient kept for ``bootstrap`` (its broker is stopping)."""
    with _admins_lock:
        admin = _admins.pop(bootstrap, None)
    if admin is not None:
        admin.close()
