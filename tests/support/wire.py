"""A minimal Kafka wire client for tests: send kio request entities, read responses."""

from __future__ import annotations

import datetime
import io
import socket
import struct
from typing import Any

from kio.index import load_payload_module, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from odradek.protocol.build import make

CREATE_TOPICS_KEY = 19
METADATA_KEY = 3


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed Kafka frame (without its prefix); ConnectionError on EOF."""
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks, remaining = [], count
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class WireClient:
    def __init__(self, bootstrap: str, client_id: str = "odradek-tests", timeout_s: float = 30.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, payload: bytes) -> None:
        self.sock.sendall(payload)

    def encode(self, request: Any) -> tuple[bytes, int]:
        self.correlation_id += 1
        header_schema = request.__header_schema__
        header = header_schema(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=self.correlation_id,
            client_id=self.client_id,
        )
        buffer = io.BytesIO()
        entity_writer(header_schema)(buffer, header)
        entity_writer(type(request))(buffer, request)
        body = buffer.getvalue()
        return struct.pack(">i", len(body)) + body, self.correlation_id

    def send(self, request: Any) -> int:
        frame, correlation_id = self.encode(request)
        self.sock.sendall(frame)
        return correlation_id

    def read_frame(self) -> bytes:
        return read_frame(self.sock)

    def receive(self, request: Any, correlation_id: int) -> Any:
        schema = load_response_schema(request.__api_key__, request.__version__)
        frame = self.read_frame()
        header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        assert header.correlation_id == correlation_id, (header, correlation_id)
        body, size = entity_reader(schema)(frame, offset)
        assert offset + size == len(frame), "trailing bytes in response"
        return body

    def request(self, request: Any) -> Any:
        return self.receive(request, self.send(request))


def create_topic(
    client: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> Any:
    """CreateTopics v7 for one topic; returns its result entry (error code included)."""
    module = load_payload_module(CREATE_TOPICS_KEY, 7, EntityType.request)
    topic = make(
        module.CreatableTopic,
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        assignments=(),
        configs=tuple(
            make(module.CreatableTopicConfig, name=k, value=v) for k, v in (configs or {}).items()
        ),
    )
    response = client.request(
        make(
            module.CreateTopicsRequest,
            topics=(topic,),
            timeout=datetime.timedelta(seconds=10),
            validate_only=False,
        )
    )
    (result,) = response.topics
    return result


def cluster_metadata(client: WireClient, all_topics: bool = False) -> Any:
    """Metadata v12 for no topic (or every topic): the brokers, the cluster id and
    ``controller_id``."""
    module = load_payload_module(METADATA_KEY, 12, EntityType.request)
    return client.request(
        make(
            module.MetadataRequest,
            topics=None if all_topics else (),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
