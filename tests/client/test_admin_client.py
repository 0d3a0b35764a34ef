"""The odradek AdminClient's topic calls against a real ``odradek serve``, checked with
confluent-kafka's AdminClient on the same broker."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import TopicCollection as CKTopicCollection
from confluent_kafka.admin import AdminClient as CKAdmin

from odradek.client._core.types import KafkaException
from odradek.client.admin.blocking import AdminClient, NewPartitions, NewTopic, TopicCollection
from odradek.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def kafka(odradek_broker: EmbeddedBroker) -> EmbeddedBroker:
    """The session's broker (odradek.testing's pytest plugin), in this process: these
    tests only add their own uniquely named topics and groups."""
    return odradek_broker


@pytest.fixture
def admin(kafka: EmbeddedBroker) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    try:
        yield client
    finally:
        client.close()


def their_topics(kafka: EmbeddedBroker) -> dict[str, int]:
    metadata = CKAdmin({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def wait_for(check: object, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_create_and_delete_topics_visible_to_confluent(
    kafka: EmbeddedBroker, admin: AdminClient
) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics(
        [NewTopic(a, 3, 1), NewTopic(b, 1, 1, config={"cleanup.policy": "compact"})]
    )
    assert set(futures) == {a, b}
    for future in futures.values():
        assert future.result(10) is None
    wait_for(lambda: {a: 3, b: 1}.items() <= their_topics(kafka).items())
    assert len(admin.list_topics(a).topics[a].partitions) == 3
    assert {a, b} <= set(admin.list_topics().topics)

    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(a, 1, 1)])[a].result(10)
    with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
        admin.create_topics([NewTopic(f"c-{a}", 0, 1)])[f"c-{a}"].result(10)

    assert admin.create_partitions([NewPartitions(a, 5)])[a].result(10) is None
    wait_for(lambda: their_topics(kafka).get(a) == 5)

    for future in admin.delete_topics([a, b]).values():
        assert future.result(10) is None
    wait_for(lambda: not {a, b} & set(their_topics(kafka)))
    assert a not in admin.list_topics().topics
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PARTITION"):
        admin.delete_topics([a])[a].result(10)


def test_validate_only_creates_nothing(kafka: EmbeddedBroker, admin: AdminClient) -> None:
    name = f"v-{uuid.uuid4().hex[:8]}"
    assert admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)[name].result(10) is None
    assert name not in their_topics(kafka)


def test_describe_topics_matches_confluent(kafka: EmbeddedBroker, admin: AdminClient) -> None:
    name = f"d-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(10)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    ours = admin.describe_topics(TopicCollection([name, missing]))
    assert set(ours) == {name, missing}
    mine = ours[name].result(10)
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})
    theirs_futures = ck.describe_topics(CKTopicCollection([name, missing]))
    theirs = theirs_futures[name].result(10)
    assert mine.name == theirs.name == name
    assert mine.topic_id is not None
    their_id = theirs.topic_id
    assert mine.topic_id.int == (their_id.get_most_significant_bits() % 2**64) << 64 | (
        their_id.get_least_significant_bits() % 2**64
    )
    assert mine.is_internal is theirs.is_internal is False
    assert mine.authorized_operations is None and theirs.authorized_operations is None

    def shape(partitions: list[Any]) -> list[tuple[int, int, list[int], list[int]]]:
        return [
            (p.id, p.leader.id, [n.id for n in p.replicas], [n.id for n in p.isr])
            for p in partitions
        ]

    assert shape(mine.partitions) == shape(theirs.partitions)
    assert [p.id for p in mine.partitions] == [0, 1, 2]
    leader = mine.partitions[0].leader
    assert (
        leader is not None
        and leader.port == kafka.port
        and leader.host == theirs.partitions[0].leader.host
    )
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PARTITION"):
        ours[missing].result(10)
    with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC"):
        theirs_futures[missing].result(10)
    # Asking about a topic never creates it.
    assert missing not in their_topics(kafka)
    with pytest.raises(TypeError):
        admin.describe_topics([name])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        TopicCollection([name, ""])


def test_describe_internal_topic(kafka: EmbeddedBroker, admin: AdminClient) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    name = f"i-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:  # a commit makes the broker create __consumer_offsets
        consumer.commit(offsets=[confluent_kafka.TopicPartition(name, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    internal = "__consumer_offsets"
    mine = admin.describe_topics(TopicCollection([internal]))[internal].result(10)
    ck = CKAdmin({"bootstrap.servers": kafka.bootstrap})  # kept alive while waiting
    theirs = ck.describe_topics(CKTopicCollection([internal]))[internal].result(10)
    assert mine.is_internal is theirs.is_internal is True
    assert len(mine.partitions) == len(theirs.partitions) > 0


def test_list_topics_of_unknown_topic_reports_it_without_creating_it(
    kafka: EmbeddedBroker, admin: AdminClient
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    metadata = admin.list_topics(missing, timeout=10)
    entry = metadata.topics[missing]
    assert entry.error is not None and "UNKNOWN_TOPIC_OR_PARTITION" in str(entry.error)
    assert entry.partitions == {}
    assert [b.port for b in metadata.brokers.values()] == [kafka.port]
    assert missing not in admin.list_topics(timeout=10).topics


def test_request_timeout_bounds_an_unanswered_call() -> None:
    """A broker that accepts connections but never answers: ``request_timeout`` (not the
    30 s ``request.timeout.ms``) ends the call with REQUEST_TIMED_OUT."""
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts, nobody reads
    try:
        port = silent.getsockname()[1]
        client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        try:
            started = time.monotonic()
            future = client.describe_cluster(request_timeout=0.5)
            with pytest.raises(KafkaException, match="REQUEST_TIMED_OUT"):
                future.result(20)
            assert time.monotonic() - started < 20
            futures = client.create_topics([NewTopic("never", 1, 1)], request_timeout=0.5)
            with pytest.raises(KafkaException, match="REQUEST_TIMED_OUT"):
                futures["never"].result(20)
            # The connections cancelled mid-handshake are closed, not left open.
            deadline = time.monotonic() + 10
            while _established_to(port) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _established_to(port) == 0
        finally:
            client.close()
    finally:
        silent.close()


def _established_to(port: int) -> int:
    """Client-side TCP connections to ``port`` still established (Linux /proc/net/tcp)."""
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote, state = fields[2], fields[3]
            if int(remote.rsplit(":", 1)[1], 16) == port and state == "01":
                count += 1
    return count
