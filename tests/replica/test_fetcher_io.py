"""The asyncio fetchers and their manager over real TCP, against a leader that speaks Kafka.

``WireLeader`` is a listener on 127.0.0.1 (port 0) answering ApiVersions, Fetch (the
frame built by the real encoder from real logs) and ListOffsets, so the fetcher's
connection, raw parsing, reconnection and shutdown are what a broker would see:

- the manager hashes partitions over ``num.replica.fetchers`` and every follower ends
  byte-identical to its leader;
- a leader that goes away and comes back on the same port is fetched from again;
- ``close`` returns while the leader still holds a long poll;
- a newer FetchStart for another leader moves the partition, a stale one is ignored,
  and a fetcher left empty stops;
- OFFSET_MOVED_TO_TIERED_STORAGE is handed to the broker's tier state builder, and
  fetching goes on from the leader's local start.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import make, response_module
from odradek.protocol.fetch_codec import TopicResult, encode_fetch_response
from odradek.protocol.messages import decode_request, encode_response
from odradek.replica.fetcher import ReplicaFetcherManager, fetcher_index
from odradek.replica.fetcher_state import FetcherSettings, FetchState
from odradek.replica.interfaces import FetchStart, TopicPartition

from .fetcher_support import FollowerReplica, LeaderReplica, log_bytes, materialize, new_log

_SIZE = struct.Struct(">i")
SUPPORTED = {18: (0, 3), 1: (4, 12), 2: (1, 8)}
TOPIC_IDS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2)}
TOPIC_NAMES = {topic_id: name for name, topic_id in TOPIC_IDS.items()}


def _name(topic: Any) -> str:
    """A request topic's name (v13+ asks by id)."""
    return getattr(topic, "topic", None) or TOPIC_NAMES[topic.topic_id]


class WireLeader:
    """A fake broker leading the partitions in ``leaders`` (one LeaderReplica each)."""

    def __init__(
        self, leaders: dict[TopicPartition, LeaderReplica], max_fetch_version: int = 12
    ) -> None:
        self.leaders = leaders
        self.supported = {**SUPPORTED, 1: (4, max_fetch_version)}
        self.fetch_versions: set[int] = set()  # the versions the fetchers sent
        self.hold = False  # hold every fetch (a long poll that never ends)
        self.port = 0
        self.fetches = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                request = decode_request(await reader.readexactly(size), self.supported)
                header = request.header
                if header.api_key == 18:
                    payload = encode_response(
                        18,
                        header.api_version,
                        header.correlation_id,
                        _versions(self.supported),
                    )
                elif header.api_key == 1:
                    self.fetch_versions.add(header.api_version)
                    while self.hold:
                        await asyncio.sleep(0.05)
                    if self._nothing_new(request.body):  # the long poll, shortened
                        await asyncio.sleep(min(request.body.max_wait.total_seconds(), 0.05))
                    payload = self._fetch(request.body, header.api_version, header.correlation_id)
                else:
                    payload = self._list_offsets(
                        request.body, header.api_version, header.correlation_id
                    )
                writer.write(_SIZE.pack(len(payload)) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _nothing_new(self, body: Any) -> bool:
        return all(
            p.fetch_offset >= self.leaders[(_name(t), p.partition)].log.log_end_offset
            for t in body.topics
            for p in t.partitions
        )

    def _fetch(self, body: Any, version: int, correlation_id: int) -> bytes:
        """Each partition answered by its own LeaderReplica, in one response."""
        self.fetches += 1
        topics = [
            TopicResult(
                _name(t),
                [self.leaders[(_name(t), p.partition)]._partition(body, p) for p in t.partitions],
                getattr(t, "topic_id", None),
            )
            for t in body.topics
        ]
        return materialize(encode_fetch_response(version, correlation_id, topics))

    def _list_offsets(self, body: Any, version: int, correlation_id: int) -> bytes:
        tp = (body.topics[0].name, body.topics[0].partitions[0].partition_index)
        answer = self.leaders[tp].list_offsets_body(body, version)
        return encode_response(2, version, correlation_id, answer)


def _versions(supported: dict[int, tuple[int, int]]) -> Any:
    module = response_module(18, 3)
    return make(
        module.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=tuple(
            make(module.ApiVersion, api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(supported.items())
        ),
        throttle_time=datetime.timedelta(0),
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


async def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _setup(
    tmp_path: Path, tps: list[TopicPartition], batches: int = 20
) -> tuple[dict[TopicPartition, LeaderReplica], dict[TopicPartition, FollowerReplica]]:
    leaders, followers = {}, {}
    for topic, index in tps:
        directory = f"{topic}-{index}"
        leader = LeaderReplica(
            new_log(
                tmp_path / "leader" / directory,
                wall_ms,
                segment_bytes=3000,
            ),
            0,
            topic,
        )
        leader.become_leader(1)
        leader.append(count=batches)
        leaders[(topic, index)] = leader
        followers[(topic, index)] = FollowerReplica(
            new_log(
                tmp_path / "follower" / directory,
                wall_ms,
                segment_bytes=3000,
            ),
            topic,
            index,
        )
    return leaders, followers


def _manager(
    server: WireLeader | None,
    followers: dict[TopicPartition, FollowerReplica],
    *,
    num_fetchers: int = 1,
    endpoint: Callable[[int], tuple[str, int] | None] | None = None,
) -> ReplicaFetcherManager:
    settings = FetcherSettings(
        replica_id=1, max_wait_ms=100, backoff_ms=50, partition_max_bytes=2000
    )
    return ReplicaFetcherManager(
        settings,
        num_fetchers=num_fetchers,
        socket_timeout_ms=5000,
        endpoint=endpoint or (lambda broker: ("127.0.0.1", server.port) if server else None),
        partition=followers.get,
        broker_epoch=lambda: 7,
    )


def _caught_up(
    leaders: dict[TopicPartition, LeaderReplica], followers: dict[TopicPartition, FollowerReplica]
) -> bool:
    return all(
        followers[tp].log_end_offset == leader.log.log_end_offset
        and followers[tp].high_watermark == leader.log.log_end_offset
        for tp, leader in leaders.items()
    )


@pytest.mark.parametrize("leader_max", [12, 15, 17])
def test_manager_copies_every_partition_byte_for_byte(tmp_path: Path, leader_max: int) -> None:
    """The fetchers send the highest Fetch version the leader advertises (a v12-only
    leader still works; v13+ topics go by id, v15+ the follower in replica_state)."""
    tps = [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    leaders, followers = _setup(tmp_path, tps)

    async def scenario() -> None:
        server = WireLeader(leaders, leader_max)
        await server.start()
        manager = _manager(server, followers, num_fetchers=2)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS[tp[0]], 2, 1) for tp in tps})
        assert set(manager.fetchers) == {(2, fetcher_index(tp, 2)) for tp in tps}
        await wait_for(lambda: _caught_up(leaders, followers))
        for leader in leaders.values():  # new writes keep flowing
            leader.append(count=3)
        await wait_for(lambda: _caught_up(leaders, followers))
        await manager.close()
        await server.stop()
        assert server.fetch_versions == {leader_max}

    run(scenario)
    for tp, leader in leaders.items():
        assert log_bytes(followers[tp].log) == log_bytes(leader.log)


def test_a_leader_that_comes_back_is_fetched_from_again(tmp_path: Path) -> None:
    tp = ("a", 0)
    leaders, followers = _setup(tmp_path, [tp], batches=5)

    async def scenario() -> None:
        server = WireLeader(leaders)
        await server.start()
        manager = _manager(server, followers)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})
        await wait_for(lambda: _caught_up(leaders, followers))
        await server.stop()
        leaders[tp].append(count=5)
        await asyncio.sleep(0.3)  # connection lost, some reconnects refused
        fetch = manager.fetchers[(2, 0)]
        assert fetch.running
        server.fetches = 0
        await server.start()  # same port
        await wait_for(lambda: _caught_up(leaders, followers))
        assert server.fetches > 0
        await manager.close()
        await server.stop()

    run(scenario)
    assert log_bytes(followers[tp].log) == log_bytes(leaders[tp].log)


def test_close_does_not_wait_for_a_long_poll(tmp_path: Path) -> None:
    tp = ("a", 0)
    leaders, followers = _setup(tmp_path, [tp], batches=2)

    async def scenario() -> None:
        server = WireLeader(leaders)
        await server.start()
        manager = _manager(server, followers)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})
        await wait_for(lambda: _caught_up(leaders, followers))
        server.hold = True
        fetches = server.fetches
        await wait_for(lambda: server.fetches > fetches or server.hold)
        await asyncio.sleep(0.2)  # a fetch is now held by the leader
        started = time.monotonic()
        await asyncio.wait_for(manager.close(), 10)
        assert time.monotonic() - started < 10
        assert not manager.fetchers
        server.hold = False
        await server.stop()

    run(scenario)


def test_fetch_starts_move_stale_ones_are_ignored_and_empty_fetchers_stop(
    tmp_path: Path,
) -> None:
    tp = ("a", 0)
    leaders, followers = _setup(tmp_path, [tp], batches=3)

    async def scenario() -> None:
        server = WireLeader(leaders)
        await server.start()
        manager = _manager(server, followers)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})
        await wait_for(lambda: _caught_up(leaders, followers))
        old = manager.fetchers[(2, 0)]
        # broker 3 leads in epoch 2 now (the same listener stands in for it)
        leaders[tp].become_leader(2)
        leaders[tp].append(count=2)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 3, 2)})
        assert set(manager.fetchers) == {(3, 0)}
        await wait_for(lambda: not old.running)
        await wait_for(lambda: _caught_up(leaders, followers))
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})  # stale
        assert set(manager.fetchers) == {(3, 0)}
        assert manager.fetch_start(tp) == FetchStart(TOPIC_IDS["a"], 3, 2)
        new = manager.fetchers[(3, 0)]
        manager.remove_partitions([tp])
        assert not manager.fetchers
        await wait_for(lambda: not new.running)
        await manager.close()
        await server.stop()

    run(scenario)
    assert log_bytes(followers[tp].log) == log_bytes(leaders[tp].log)


def test_an_unknown_endpoint_backs_off_until_it_is_known(tmp_path: Path) -> None:
    tp = ("a", 0)
    leaders, followers = _setup(tmp_path, [tp], batches=3)
    known: dict[int, tuple[str, int]] = {}

    async def scenario() -> None:
        server = WireLeader(leaders)
        await server.start()
        manager = _manager(server, followers, endpoint=known.get)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})
        await asyncio.sleep(0.2)
        assert followers[tp].log_end_offset == 0
        states = manager.fetchers[(2, 0)].states()
        assert states[tp].state in (FetchState.FETCHING, FetchState.DELAYED)
        known[2] = ("127.0.0.1", server.port)
        await wait_for(lambda: _caught_up(leaders, followers))
        await manager.close()
        await server.stop()

    run(scenario)


class _Flaky(FollowerReplica):
    """A follower whose first append hits a bug (not a storage error)."""

    failed = False

    def append_as_follower(self, records: bytes | memoryview) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug")
        super().append_as_follower(records)


def test_a_bug_in_one_round_backs_off_and_the_fetcher_goes_on(tmp_path: Path) -> None:
    tp = ("a", 0)
    leaders, followers = _setup(tmp_path, [tp], batches=3)
    flaky = _Flaky(followers[tp].log, "a", 0)
    followers[tp] = flaky

    async def scenario() -> None:
        server = WireLeader(leaders)
        await server.start()
        manager = _manager(server, followers)
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})
        await wait_for(lambda: _caught_up(leaders, followers))
        assert flaky.failed
        assert manager.fetchers[(2, 0)].running
        await manager.close()
        await server.stop()

    run(scenario)


def test_offset_moved_to_tiered_storage_awaits_the_tier_state_builder(tmp_path: Path) -> None:
    """KIP-405: the fetcher hands the leader's local start and epoch to the broker's
    builder (asked again after a backoff when it could not build), then fetches from
    there — never the part only remote storage holds."""
    tp = ("a", 0)
    leaders, followers = _setup(tmp_path, [tp], batches=20)
    leaders[tp].local_start = 30
    calls: list[tuple[TopicPartition, int, int]] = []

    async def build(asked: TopicPartition, local_start: int, epoch: int) -> bool:
        calls.append((asked, local_start, epoch))
        if len(calls) == 1:
            return False  # the remote metadata not there yet
        followers[asked].truncate_fully_and_start_at(local_start)
        return True

    async def scenario() -> None:
        server = WireLeader(leaders, 17)
        await server.start()
        manager = _manager(server, followers)
        manager.tier_state = build
        manager.add_partitions({tp: FetchStart(TOPIC_IDS["a"], 2, 1)})
        await wait_for(lambda: _caught_up(leaders, followers))
        await manager.close()
        await server.stop()

    run(scenario)
    assert calls == [(tp, 30, 1), (tp, 30, 1)]
    assert followers[tp].truncations == [30]
    assert list(followers[tp].log.read_batches(30)) == list(leaders[tp].log.read_batches(30))
