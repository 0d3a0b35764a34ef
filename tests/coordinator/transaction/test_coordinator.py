"""The TransactionCoordinator facade on the runtime with a fake partition writer and a
fake marker channel: the two phases of a commit, retries and dropped partitions,
resuming after a failover, fencing, timeouts, listing, and creating the topic."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.coordinator.group.records import partition_for_group
from odradek.coordinator.transaction.coordinator import (
    TRANSACTION_STATE_TOPIC,
    InitResult,
    TransactionCoordinator,
    TransactionSettings,
)
from odradek.coordinator.transaction.markers import MarkerEntry
from odradek.coordinator.transaction.records import decode_key, decode_value
from odradek.metadata.controller_channel import ControllerError
from odradek.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from tests.coordinator.runtime_support import FakeWriter

TP0, TP1, TP2 = ("t", 0), ("t", 1), ("gone", 0)
STATE = (TRANSACTION_STATE_TOPIC, 0)


class Markers:
    """Answers per partition from ``script`` (default NONE); records every call."""

    def __init__(self) -> None:
        self.calls: list[MarkerEntry] = []
        self.script: dict[tuple[str, int], list[str]] = {}

    async def write_markers(self, entries: Sequence[MarkerEntry]) -> Mapping[tuple[str, int], str]:
        answers = {}
        for entry in entries:
            self.calls.append(entry)
            for tp in entry.partitions:
                queue = self.script.get(tp)
                answers[tp] = queue.pop(0) if queue else "NONE"
        return answers


class ProducerIds:
    def __init__(self) -> None:
        self.next = 500
        self.fail: str | None = None

    async def next_producer_id(self) -> int:
        if self.fail:
            raise ControllerError(self.fail, "no block")
        self.next += 1
        return self.next


class Topics:
    def __init__(self) -> None:
        self.created: list[tuple[str, int, int, dict[str, str]]] = []

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> str | None:
        self.created.append((name, partitions, replication_factor, dict(configs)))
        return None


@dataclass
class Metadata:
    image: MetadataImage
    node_id: int = 1


class Env:
    def __init__(self, **settings: Any) -> None:
        self.now = [10_000]
        self.writer = FakeWriter()
        self.markers = Markers()
        self.ids = ProducerIds()
        self.topics = Topics()
        topic = TopicImage("t", uuid.uuid4(), {0: PartitionImage(0, (1,), (1,), 1, 0)})
        self.metadata = Metadata(
            MetadataImage(brokers={1: BrokerImage(1, ())}, topics={"t": topic})
        )
        options = {
            "partitions": 1,
            "replication_factor": 1,
            "marker_retry_backoff_ms": 1,
            **settings,
        }
        self.settings = TransactionSettings(**options)
        self.coordinator = TransactionCoordinator(
            self.metadata,  # type: ignore[arg-type]
            self.writer,
            self.topics,
            self.settings,
            lambda: self.now[0],
            self.ids,
            self.markers,
        )

    async def lead(self, epoch: int = 1) -> None:
        self.coordinator.on_leadership(0, epoch)
        for _ in range(2_000):
            if any(True for _ in self.coordinator.runtime.active_shards()):
                return
            await asyncio.sleep(0.001)
        raise AssertionError("not loaded")

    async def settle(self) -> None:
        for _ in range(500):
            await asyncio.sleep(0.001)
            if not self.coordinator.finishing():
                return
        raise AssertionError("transactions still finishing")

    def states(self, txn: str = "a") -> list[tuple[int, int, int]]:
        """(status, producer id, epoch) of each record of ``txn`` in the log."""
        found = []
        for batch in self.writer.log(STATE).batches:
            for record in batch:
                assert record.key is not None and record.value is not None
                if decode_key(record.key) == txn:
                    value = decode_value(record.value)
                    found.append((value.status, value.producer_id, value.producer_epoch))
        return found

    def describe(self, txn: str = "a") -> Any:
        return self.coordinator.describe([txn])[0]


def run(test: Callable[[Env], Awaitable[None]], **settings: Any) -> None:
    async def main() -> None:
        env = Env(**settings)
        try:
            await test(env)
        finally:
            await env.coordinator.stop()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_commit_writes_markers_then_complete() -> None:
    async def test(env: Env) -> None:
        await env.lead(epoch=4)
        c = env.coordinator
        assert await c.init_producer_id("a", 60_000) == InitResult("NONE", 501, 0)
        assert await c.add_partitions("a", 501, 0, [TP0, TP1]) == {TP0: "NONE", TP1: "NONE"}
        assert await c.add_offsets("a", 501, 0, 7) == "NONE"
        assert env.describe().state == "Ongoing"
        assert await c.end_txn("a", 501, 0, True) == "NONE"
        await env.settle()
        assert env.markers.calls == [
            MarkerEntry(501, 0, 4, True, (("__consumer_offsets", 7), TP0, TP1))
        ]
        assert [s for s, _, _ in env.states()] == [0, 1, 1, 2, 4]
        described = env.describe()
        assert (described.state, described.partitions) == ("CompleteCommit", ())
        assert await c.end_txn("a", 501, 0, True) == "NONE"  # a retry

    run(test)


def test_failed_markers_are_retried_and_deleted_topics_dropped() -> None:
    async def test(env: Env) -> None:
        await env.lead()
        c = env.coordinator
        env.markers.script = {
            TP1: ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"],
            TP2: ["UNKNOWN_TOPIC_OR_PARTITION"],
        }
        await c.init_producer_id("a", 60_000)
        env.metadata.image = MetadataImage(topics=env.metadata.image.topics)
        await c.add_partitions("a", 501, 0, [TP0, TP1, TP2])
        assert await c.end_txn("a", 501, 0, False) == "NONE"
        assert await c.end_txn("a", 501, 0, False) == "CONCURRENT_TRANSACTIONS"
        await env.settle()
        assert [call.partitions for call in env.markers.calls] == [(TP2, TP0, TP1), (TP1,), (TP1,)]
        assert env.describe().state == "CompleteAbort"
        assert await c.end_txn("a", 501, 0, False) == "NONE"

    run(test)


def test_describe_while_preparing_shows_the_partitions_still_waiting() -> None:
    async def test(env: Env) -> None:
        await env.lead()
        c = env.coordinator
        env.markers.script = {TP1: ["NOT_LEADER_OR_FOLLOWER"] * 1000}
        await c.init_producer_id("a", 60_000)
        await c.add_partitions("a", 501, 0, [TP0, TP1])
        await c.end_txn("a", 501, 0, True)
        for _ in range(20):
            await asyncio.sleep(0.001)
        described = env.describe()
        assert (described.state, described.partitions) == ("PrepareCommit", (TP1,))
        assert await c.add_partitions("a", 501, 0, [TP0]) == {TP0: "CONCURRENT_TRANSACTIONS"}

    run(test)


def test_a_new_coordinator_resumes_prepared_transactions() -> None:
    async def test(env: Env) -> None:
        await env.lead(epoch=1)
        c = env.coordinator
        env.markers.script = {TP0: ["NOT_LEADER_OR_FOLLOWER"] * 3}
        await c.init_producer_id("a", 60_000)
        await c.add_partitions("a", 501, 0, [TP0])
        await c.end_txn("a", 501, 0, True)
        await asyncio.sleep(0.002)
        c.on_leadership(0, None)  # the old coordinator goes
        assert await c.end_txn("a", 501, 0, True) == "NOT_COORDINATOR"
        calls_before = len(env.markers.calls)
        env.markers.script = {}
        await env.lead(epoch=2)  # a new one loads the PrepareCommit
        await env.settle()
        resent = env.markers.calls[calls_before:]
        assert resent and all(call == MarkerEntry(501, 0, 2, True, (TP0,)) for call in resent)
        assert env.states()[-1] == (4, 501, 0)
        assert env.describe().state == "CompleteCommit"

    run(test)


def test_init_fences_an_ongoing_transaction_and_aborts_it() -> None:
    async def test(env: Env) -> None:
        await env.lead()
        c = env.coordinator
        await c.init_producer_id("a", 60_000)
        await c.add_partitions("a", 501, 0, [TP0])
        assert await c.init_producer_id("a", 60_000) == InitResult("CONCURRENT_TRANSACTIONS")
        assert await c.end_txn("a", 501, 0, True) == "PRODUCER_FENCED"
        await env.settle()
        assert env.markers.calls == [MarkerEntry(501, 1, 1, False, (TP0,))]
        assert await c.init_producer_id("a", 60_000) == InitResult("NONE", 501, 2)
        # KIP-360: the old instance cannot re-initialize with its fenced epoch.
        assert await c.init_producer_id("a", 60_000, 501, 0) == InitResult("PRODUCER_FENCED")
        assert await c.init_producer_id("a", 60_000, 501, 2) == InitResult("NONE", 501, 3)

    run(test)


def test_transactions_open_past_their_timeout_are_aborted() -> None:
    async def test(env: Env) -> None:
        await env.lead()
        c = env.coordinator
        await c.init_producer_id("a", 1_000)
        await c.add_partitions("a", 501, 0, [TP0])
        env.now[0] += 1_500
        assert c.runtime.run_due_timers() == 1
        await env.settle()
        assert env.describe().state == "CompleteAbort"
        assert env.describe().producer_epoch == 1
        assert env.markers.calls == [MarkerEntry(501, 1, 1, False, (TP0,))]
        assert await c.add_partitions("a", 501, 0, [TP0]) == {TP0: "PRODUCER_FENCED"}

    run(test, abort_check_interval_ms=1_000)


def test_request_errors() -> None:
    async def test(env: Env) -> None:
        c = env.coordinator
        assert await c.init_producer_id("a", 60_000) == InitResult("NOT_COORDINATOR")
        assert await c.end_txn("a", 1, 0, True) == "NOT_COORDINATOR"
        c.on_leadership(0, 1)
        env.writer.leader_epochs[STATE] = 0  # the replica does not lead yet: loading
        await asyncio.sleep(0.001)
        assert await c.add_partitions("a", 1, 0, [TP0]) == {TP0: "COORDINATOR_LOAD_IN_PROGRESS"}
        assert c.list_transactions().error == "COORDINATOR_LOAD_IN_PROGRESS"
        env.writer.leader_epochs[STATE] = 1
        await env.lead()
        assert await c.init_producer_id("", 60_000) == InitResult("INVALID_REQUEST")
        assert await c.init_producer_id("a", 60_000, 5, -1) == InitResult("INVALID_REQUEST")
        too_long = env.settings.max_timeout_ms + 1
        assert await c.init_producer_id("a", too_long) == InitResult("INVALID_TRANSACTION_TIMEOUT")
        env.ids.fail = "KAFKA_STORAGE_ERROR"
        assert await c.init_producer_id("a", 60_000) == InitResult("KAFKA_STORAGE_ERROR")
        env.ids.fail = None
        assert await c.end_txn("nope", 1, 0, True) == "INVALID_PRODUCER_ID_MAPPING"
        assert c.describe(["nope"])[0].error == "TRANSACTIONAL_ID_NOT_FOUND"
        env.writer.fail = "NOT_LEADER_OR_FOLLOWER"
        assert await c.init_producer_id("a", 60_000) == InitResult("NOT_COORDINATOR")
        env.writer.fail = None
        assert await c.init_producer_id("a", 60_000) == InitResult(
            "NONE", 502, 0
        )  # 501: wasted on the failure

    run(test)


def test_list_transactions_filters() -> None:
    async def test(env: Env) -> None:
        await env.lead()
        c = env.coordinator
        for txn in ("a", "b", "c"):
            await c.init_producer_id(txn, 60_000)
        await c.add_partitions("a", 501, 0, [TP0])
        env.now[0] += 5_000
        await c.add_partitions("b", 502, 0, [TP0])
        every = c.list_transactions()
        assert every.transactions == (
            ("a", 501, "Ongoing"),
            ("b", 502, "Ongoing"),
            ("c", 503, "Empty"),
        )
        ongoing = c.list_transactions(states=["Ongoing", "Bogus"])
        assert ongoing.unknown_state_filters == ("Bogus",)
        assert [t for t, _, _ in ongoing.transactions] == ["a", "b"]
        assert c.list_transactions(states=["Bogus"]).transactions == ()
        assert [t for t, _, _ in c.list_transactions(producer_ids=[502]).transactions] == ["b"]
        assert [t for t, _, _ in c.list_transactions(duration_ms=4_000).transactions] == ["a"]
        assert [t for t, _, _ in c.list_transactions(pattern="[ab]").transactions] == ["a", "b"]
        assert c.list_transactions(pattern="a").transactions == (("a", 501, "Ongoing"),)
        assert c.list_transactions(pattern="(").error == "INVALID_REQUEST"

    run(test)


def test_state_topic_is_created_compacted_with_its_configs() -> None:
    async def test(env: Env) -> None:
        assert await env.coordinator.ensure_state_topic()
        name, partitions, factor, configs = env.topics.created[0]
        assert (name, partitions, factor) == (TRANSACTION_STATE_TOPIC, 1, 1)
        assert configs["cleanup.policy"] == "compact"
        assert configs["min.insync.replicas"] == "2"
        assert configs["segment.bytes"] == str(104_857_600)

    run(test)


def test_partition_is_kafkas_hash() -> None:
    env = Env(partitions=50)
    for txn in ("my-txn", "", "ü-ids", "a" * 100):
        assert env.coordinator.partition_for(txn) == partition_for_group(txn, 50)
    # Java: "my-txn".hashCode() = -1061187895; Kafka takes it & 0x7fffffff
    assert env.coordinator.partition_for("my-txn") == (-1061187895 & 0x7FFFFFFF) % 50 == 3
