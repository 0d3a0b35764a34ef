"""The client ignores tagged fields it does not know in a broker's responses (KIP-482).

A newer broker may add tags to a version we speak; kio's reader refuses them, so
before this the connection failed with "cannot decode ... Unknown tagged field tag".
A fake broker answers ApiVersions v3 and Metadata v12 with unknown tags at top level,
inside array entries and in the response header; the client gets the same entities
as without them.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import threading
import uuid
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from odradek.client._core.connection import BrokerAddress, BrokerConnection, request_entity
from odradek.protocol.build import make
from tests.server.test_unknown_tags import add_tag, add_tags, after, encode
from tests.support.wire import read_frame

API_VERSIONS, METADATA = 18, 3


def api_versions_body() -> tuple[Any, bytes]:
    schema = load_response_schema(API_VERSIONS, 3)
    module = __import__(schema.__module__, fromlist=["_"])
    body = make(
        schema,
        error_code=ErrorCode.none,
        api_keys=(
            module.ApiVersion(api_key=API_VERSIONS, min_version=0, max_version=3),
            module.ApiVersion(api_key=METADATA, min_version=0, max_version=0x6A6A),
        ),
        throttle_time=datetime.timedelta(0),
    )
    plain = encode(body)
    entry = after(plain, struct.pack(">hhh", METADATA, 0, 0x6A6A))  # its tags start here
    return body, add_tags(plain, [entry, len(plain) - 1])


def metadata_body() -> tuple[Any, bytes]:
    schema = load_response_schema(METADATA, 12)
    m = __import__(schema.__module__, fromlist=["_"])
    partition = m.MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=0,
        leader_id=1,
        leader_epoch=0x5B5B5B5B,
        replica_nodes=(1,),
        isr_nodes=(1,),
        offline_replicas=(),
    )
    body = m.MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(m.MetadataResponseBroker(node_id=1, host="broker-h", port=9092, rack="rack-x"),),
        cluster_id="cluster-c",
        controller_id=1,
        topics=(
            m.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name="topic-x",
                topic_id=uuid.UUID(int=7),
                is_internal=False,
                partitions=(partition,),
                topic_authorized_operations=0x3C3C3C3C,
            ),
        ),
    )
    plain = encode(body)
    # An entity that sets no tags ends with its zero tag count: the broker entry after
    # its rack, the partition after its empty offline replicas (one byte), the topic
    # after its authorized operations.
    sections = [
        after(plain, b"rack-x"),
        after(plain, b"\x02\x00\x00\x00\x01\x01"),  # isr (1), empty offline replicas
        after(plain, struct.pack(">i", 0x3C3C3C3C)),
        len(plain) - 1,
    ]
    return body, add_tags(plain, sections)


def fake_broker(listener: socket.socket, answers: dict[int, bytes]) -> None:
    conn, _ = listener.accept()
    with conn:
        try:
            while True:
                request = read_frame(conn)
                api_key, correlation_id = struct.unpack_from(">h", request)[0], request[4:8]
                header = correlation_id  # response header v0 (ApiVersions)
                if api_key != API_VERSIONS:  # header v1 with an unknown tag
                    header = add_tag(correlation_id + b"\x00", 4)
                payload = header + answers[api_key]
                conn.sendall(struct.pack(">i", len(payload)) + payload)
        except ConnectionError:
            pass


def test_client_decodes_responses_with_unknown_tags() -> None:
    versions_body, versions_frame = api_versions_body()
    metadata, metadata_frame = metadata_body()
    listener = socket.create_server(("127.0.0.1", 0))
    answers = {API_VERSIONS: versions_frame, METADATA: metadata_frame}
    thread = threading.Thread(target=fake_broker, args=(listener, answers), daemon=True)
    thread.start()

    async def run() -> Any:
        connection = BrokerConnection(
            BrokerAddress(0, "127.0.0.1", listener.getsockname()[1]),
            client_id="t",
            request_timeout_s=10,
            client_versions={API_VERSIONS: (0, 3), METADATA: (0, 12)},
        )
        await connection.connect()
        try:
            assert connection.broker_versions[METADATA] == (0, 0x6A6A)
            return await connection.send(
                request_entity(METADATA, 12, topics=None, include_topic_authorized_operations=False)
            )
        finally:
            await connection.close()

    try:
        response = asyncio.run(run())
    finally:
        listener.close()
        thread.join(10)
    assert response == metadata
    assert versions_body.api_keys[1].max_version == 0x6A6A
