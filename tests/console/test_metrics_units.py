"""The /metrics pieces without a broker: request-time buckets, the collector's
families over a made-up source, the HTTP endpoint on a real socket, the config value.

The numbers a real broker exports after real traffic are checked in test_metrics.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from odradek.console.metrics import (
    MAX_REQUEST_HEAD_BYTES,
    BrokerCollector,
    ControllerSample,
    MetricsEndpoint,
    PartitionSample,
)
from odradek.replica.reads import PartitionRead
from odradek.replica.topic_stats import BrokerTopicStats
from odradek.server.config import BrokerConfig, ConfigError, HostPort
from odradek.server.request_metrics import BUCKET_BOUNDS_MS, RequestTimes


def test_a_time_on_a_bound_counts_in_that_bucket() -> None:
    times = RequestTimes()
    for elapsed_ms in (0.1, 1.0, 1.0001, 40_000.0):
        times.observe("Produce", elapsed_ms)
    histogram = times.by_request["Produce"]
    cumulative = dict(zip([*BUCKET_BOUNDS_MS, float("inf")], histogram.cumulative(), strict=True))
    assert (cumulative[0.25], cumulative[1.0], cumulative[2.5]) == (1, 2, 3)
    assert cumulative[30000.0] == 3 and cumulative[float("inf")] == histogram.count == 4
    assert histogram.sum_ms == pytest.approx(40_002.1001)


def test_request_names_are_kafkas() -> None:
    from kio.schema.fetch.v15.request import ReplicaState
    from kio.schema.list_offsets.v7.request import ListOffsetsRequest
    from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest
    from kio.schema.produce.v9.request import ProduceRequest

    times = RequestTimes()
    # Fetch is split as Kafka splits it, by who sent it (v15+: in replica_state).
    assert times.request_name(1, SimpleNamespace(replica_id=-1)) == "FetchConsumer"
    assert times.request_name(1, SimpleNamespace(replica_id=2)) == "FetchFollower"
    v15 = SimpleNamespace(replica_state=ReplicaState(replica_id=3, replica_epoch=7))
    assert times.request_name(1, v15) == "FetchFollower"
    # Every other API by its name (only the entity's type is read).
    assert times.request_name(0, object.__new__(ProduceRequest)) == "Produce"
    assert times.request_name(2, object.__new__(ListOffsetsRequest)) == "ListOffsets"
    epoch_request = object.__new__(OffsetForLeaderEpochRequest)
    assert times.request_name(23, epoch_request) == "OffsetForLeaderEpoch"


def test_bytes_out_by_topic_and_replication_bytes_apart() -> None:
    stats = BrokerTopicStats()
    stats.record_append("a", 10, 1000)
    stats.record_append("b", 1, 70)

    def read(size: int) -> PartitionRead:
        return PartitionRead(ranges=[SimpleNamespace(length=size)])  # type: ignore[list-item]

    stats.record_fetch([("a", [(0, read(600)), (1, read(400))]), ("b", [(0, read(0))])], False)
    stats.record_fetch([("a", [(0, read(1000))])], True)
    assert stats.topics == {"a": [10, 1000, 1000], "b": [1, 70, 0]}
    assert stats.total == [11, 1070, 1000] and stats.replication_bytes_out == 1000
    stats.record_replication_in(300)
    assert stats.replication_bytes_in == 300
    stats.forget("a")
    assert "a" not in stats.topics and stats.total == [11, 1070, 1000]


class FakeSource:
    def __init__(self) -> None:
        self.topic_stats = BrokerTopicStats()
        self.request_times = RequestTimes()
        self.hosted = [
            PartitionSample("orders", 0, True, 3, 3, 2, 5000, 0, 50, 50, 1),
            PartitionSample("orders", 1, True, 3, 1, 2, 100, 0, 7, 5, 2),
            PartitionSample("orders", 2, False, 3, 3, 2, 800, 10, 30, 28, 1),
        ]
        self.offsets = [
            ("g", "orders", 0, 20),
            ("g", "orders", 2, 30),  # past this follower's HW: lag is 0, not negative
            ("g", "elsewhere", 0, 4),  # hosted on another broker: an offset, no lag
        ]

    def partitions(self) -> Iterable[PartitionSample]:
        return self.hosted

    def offline_replicas(self) -> int:
        return 1

    def controller(self) -> ControllerSample | None:
        return ControllerSample(True, 2, 5, 12, 2, 1)

    def group_offsets(self) -> Iterable[tuple[str, str, int, int]]:
        return self.offsets


def scrape(source: FakeSource) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    from prometheus_client import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(source))
    text = generate_latest(registry).decode()
    return samples_of(text)


def samples_of(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> (sorted label items) -> value, from the exposition text."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_the_collector_reads_the_source_when_scraped() -> None:
    source = FakeSource()
    source.topic_stats.record_append("orders", 5, 500)
    source.request_times.observe("Produce", 3.0)
    first = scrape(source)
    messages = first["kafka_server_brokertopicmetrics_messagesin_total"]
    assert messages == {(("topic", "orders"),): 5, (): 5}
    source.topic_stats.record_append("orders", 2, 100)
    assert scrape(source)["kafka_server_brokertopicmetrics_messagesin_total"][()] == 7
    request = (("request", "Produce"),)
    assert first["kafka_network_requestmetrics_totaltimems_count"][request] == 1
    assert first["kafka_network_requestmetrics_totaltimems_bucket"][(("le", "5.0"), *request)] == 1
    assert first["kafka_network_requestmetrics_totaltimems_bucket"][(("le", "2.5"), *request)] == 0
    gauges = {
        "kafka_server_replicamanager_partitioncount": 3,
        "kafka_server_replicamanager_leadercount": 2,
        "kafka_server_replicamanager_underreplicatedpartitions": 1,
        "kafka_server_replicamanager_underminisrpartitioncount": 1,
        "kafka_server_replicamanager_offlinereplicacount": 1,
        "kafka_controller_kafkacontroller_activecontrollercount": 1,
        "kafka_controller_kafkacontroller_offlinepartitionscount": 2,
        "kafka_controller_kafkacontroller_globaltopiccount": 5,
        "kafka_controller_kafkacontroller_globalpartitioncount": 12,
        "kafka_controller_kafkacontroller_fencedbrokercount": 1,
    }
    assert {name: first[name][()] for name in gauges} == gauges
    by_partition = first["kafka_log_log_size"]
    assert by_partition[(("partition", "1"), ("topic", "orders"))] == 100
    assert first["kafka_log_log_numlogsegments"][(("partition", "1"), ("topic", "orders"))] == 2
    group = (("consumergroup", "g"),)
    lag = first["kafka_consumergroup_lag"]
    assert lag == {
        (*group, ("partition", "0"), ("topic", "orders")): 30,
        (*group, ("partition", "2"), ("topic", "orders")): 0,
    }
    current = first["kafka_consumergroup_current_offset"]
    assert current[(*group, ("partition", "0"), ("topic", "elsewhere"))] == 4


def test_no_controller_metrics_on_a_broker_only_node() -> None:
    source = FakeSource()
    source.controller = lambda: None  # type: ignore[method-assign]
    assert not any(name.startswith("kafka_controller_") for name in scrape(source))


# -- the HTTP endpoint ------------------------------------------------------------------
async def _request(url_port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", url_port)
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


def test_the_endpoint_answers_get_metrics_and_refuses_the_rest() -> None:
    async def run() -> None:
        endpoint = MetricsEndpoint(_registry())
        url = await endpoint.start("127.0.0.1", 0)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert url == f"http://127.0.0.1:{port}/metrics"
        try:
            ok = await _request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = ok.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK")
            assert b"Content-Type: text/plain; version=0.0.4" in head
            assert b"kafka_server_replicamanager_partitioncount 3.0" in body
            om = b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n"
            assert (await _request(port, om)).rstrip().endswith(b"# EOF")
            head_only = await _request(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert head_only.startswith(b"HTTP/1.1 200") and head_only.endswith(b"\r\n\r\n")
            missing = await _request(port, b"GET /other HTTP/1.1\r\n\r\n")
            assert missing.startswith(b"HTTP/1.1 404")
            post = await _request(port, b"POST /metrics HTTP/1.1\r\n\r\n")
            assert post.startswith(b"HTTP/1.1 405")
            assert await _request(port, b"garbage\r\n\r\n") == b""  # closed, not answered
            huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_REQUEST_HEAD_BYTES + b"\r\n\r\n"
            assert await _request(port, huge) == b""
            # Still serving after all that.
            again = await _request(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert again.startswith(b"HTTP/1.1 200")
        finally:
            await endpoint.close()
        with pytest.raises(OSError):
            await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n")

    asyncio.run(run())


def test_a_port_in_use_is_an_os_error() -> None:
    async def run() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with pytest.raises(OSError):
                await MetricsEndpoint(_registry()).start("127.0.0.1", taken.getsockname()[1])

    asyncio.run(run())


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(FakeSource()))
    return registry


# -- the broker property -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://127.0.0.1:9644", HostPort("127.0.0.1", 9644)),
        ("http://0.0.0.0:0/metrics", HostPort("0.0.0.0", 0)),
        ("http://[::1]:0", HostPort("::1", 0)),
        ("", None),
    ],
)
def test_metrics_listener_values(raw: str, expected: HostPort | None) -> None:
    assert BrokerConfig({"metrics.listener": raw})["metrics.listener"] == expected
    assert BrokerConfig({})["metrics.listener"] is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("foo", "'foo' is not http://HOST:PORT (e.g. http://127.0.0.1:9644)"),
        ("127.0.0.1:9644", "is not http://HOST:PORT"),
        ("https://127.0.0.1:9644", "only plain http is served, not https"),
        ("http://127.0.0.1:70000", "port 70000 is out of range"),
        ("http://127.0.0.1:9644/stats", "is not http://HOST:PORT"),
    ],
)
def test_bad_metrics_listener_values(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig({"metrics.listener": raw})
    assert str(caught.value).startswith("invalid value for metrics.listener: ")
    assert message in str(caught.value)
