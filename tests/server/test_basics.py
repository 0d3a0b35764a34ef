"""A real `odradek serve` process: start-up, ApiVersions, Metadata, CreateTopics, shutdown."""

from __future__ import annotations

import datetime
import struct
from pathlib import Path

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from odradek.server.handlers import supported_versions
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient


def build(api_key: int, version: int, **fields: object) -> object:
    from odradek.protocol.build import make

    return make(load_request_schema(api_key, version), **fields)


def test_ready_line_reports_a_real_port_and_sigterm_exits_cleanly(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        assert process.port > 0
        assert (tmp_path / "data" / "meta.properties").exists()
    finally:
        assert process.stop() == 0
        process.kill()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_lists_exactly_the_registry(
    shared_broker: BrokerProcess, version: int
) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        response = client.request(
            build(18, version, client_software_name="tests", client_software_version="1")
        )
    assert response.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == supported_versions()


def test_unknown_api_versions_version_gets_unsupported_version_and_v0_list(
    shared_broker: BrokerProcess,
) -> None:
    from kio.schema.api_versions.v0.request import ApiVersionsRequest
    from kio.schema.api_versions.v0.response import ApiVersionsResponse
    from kio.serial import entity_reader

    with WireClient(shared_broker.bootstrap) as client:
        # An ApiVersions v99 request: header v1 fields, no body.
        payload = struct.pack(">hhih", 18, 99, 7, 5) + b"tests"
        client.send_raw(struct.pack(">i", len(payload)) + payload)
        frame = client.read_frame()
        assert struct.unpack_from(">i", frame)[0] == 7
        body, _ = entity_reader(ApiVersionsResponse)(frame, 4)
        assert body.error_code == ErrorCode.unsupported_version
        assert {k.api_key for k in body.api_keys} == set(supported_versions())
        # The connection stays usable.
        assert client.request(ApiVersionsRequest()).error_code == ErrorCode.none


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_every_version_auto_creates_and_describes(
    shared_broker: BrokerProcess, version: int
) -> None:
    topic_class = load_request_schema(3, version)
    name = f"auto-v{version}"
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    from odradek.protocol.build import make

    module = load_payload_module(3, version, EntityType.request)
    topics = (make(module.MetadataRequestTopic, name=name, topic_id=None),)
    with WireClient(shared_broker.bootstrap) as client:
        response = client.request(
            make(
                topic_class,
                topics=topics,
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    assert [b.port for b in response.brokers] == [shared_broker.port]
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.none and topic.name == name
    assert [p.partition_index for p in topic.partitions] == [0]
    assert topic.partitions[0].leader_id == 1


def test_create_topics_errors(shared_broker: BrokerProcess) -> None:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    from odradek.protocol.build import make

    module = load_payload_module(19, 7, EntityType.request)

    def topic(name: str, partitions: int = 1, factor: int = 1, configs: tuple = ()) -> object:
        return make(
            module.CreatableTopic,
            name=name,
            num_partitions=partitions,
            replication_factor=factor,
            assignments=(),
            configs=configs,
        )

    bad_config = (make(module.CreatableTopicConfig, name="retention.ms", value="soon"),)
    request = make(
        module.CreateTopicsRequest,
        topics=(
            topic("good", 3),
            topic("bad/name"),
            topic("x" * 250),
            topic(".."),
            topic("zero", 0),
            topic("wide", 1, 3),
            topic("cfg", configs=bad_config),
        ),
        timeout=datetime.timedelta(seconds=5),
        validate_only=False,
    )
    with WireClient(shared_broker.bootstrap) as client:
        response = client.request(request)
        again = client.request(
            make(
                module.CreateTopicsRequest,
                topics=(topic("good", 3),),
                timeout=datetime.timedelta(seconds=5),
                validate_only=False,
            )
        )
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {
        "good": ErrorCode.none,
        "bad/name": ErrorCode.invalid_topic_exception,
        "x" * 250: ErrorCode.invalid_topic_exception,
        "..": ErrorCode.invalid_topic_exception,
        "zero": ErrorCode.invalid_partitions,
        "wide": ErrorCode.invalid_replication_factor,
        "cfg": ErrorCode.invalid_config,
    }
    good = next(t for t in response.topics if t.name == "good")
    assert good.num_partitions == 3 and good.topic_id is not None
    assert again.topics[0].error_code == ErrorCode.topic_already_exists
