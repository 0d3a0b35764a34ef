"""The odradek AdminClient against a real ``odradek serve``, checked with confluent-kafka."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient as CKAdmin

from odradek.client.admin import AdminClient, NewPartitions, NewTopic
from odradek.client.types import KafkaException
from tests.support.broker import BrokerProcess


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("admin") / "data").start()
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture
def admin(kafka: BrokerProcess) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    try:
        yield client
    finally:
        client.close()


def their_topics(kafka: BrokerProcess) -> dict[str, int]:
    metadata = CKAdmin({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def wait_for(check: object, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_create_and_delete_topics_visible_to_confluent(
    kafka: BrokerProcess, admin: AdminClient
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


def test_validate_only_creates_nothing(kafka: BrokerProcess, admin: AdminClient) -> None:
    name = f"v-{uuid.uuid4().hex[:8]}"
    assert admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)[name].result(10) is None
    assert name not in their_topics(kafka)
