"""Request headers and bodies in, response bytes out, using kio's entities.

How this works and why: the first 8 bytes of every request (api key, api version,
correlation id) have the same layout in every header version, so they are read with
``struct`` before anything else; only then is the (api key, version) pair looked up
in kio to learn whether the request is "flexible" (header v2 with tagged fields) and
which entity decodes the body. Unknown pairs raise ``UnsupportedRequest`` carrying the
correlation id, so the caller can answer ApiVersions with UNSUPPORTED_VERSION and close
the connection for anything else, as Kafka does.

Responses are encoded with kio's writers into one ``bytes`` (header + body); Fetch,
whose record sets must go out with ``sendfile``, has its own encoder (fetch_codec.py).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from odradek.protocol.bounds import Checker, LengthError, UnknownTags, checker, without_unknown_tags
from odradek.protocol.session import Session

API_VERSIONS_KEY: Final = 18
_FIXED_HEADER = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


class UnsupportedRequest(Exception):
    """An API key/version this broker does not implement."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported API key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class MalformedRequest(Exception):
    """Bytes that do not decode as the request they claim to be."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # a kio request entity
    size: int
    listener: str = ""  # name of the listener the request arrived on
    peer: str = ""  # "host:port" of the client
    # The connection's security session (principal, protocol); a fresh anonymous
    # PLAINTEXT one where a request is decoded outside a connection (tests, tools).
    session: Session = field(default_factory=Session)


@cache
def _request_codec(api_key: int, api_version: int) -> tuple[Any, Checker, Any, Any]:
    schema = load_request_schema(api_key, api_version)
    header_schema: Any = schema.__header_schema__
    return (
        schema,
        checker(schema, header_schema),
        entity_reader(header_schema),
        entity_reader(schema),
    )


@cache
def _response_codec(api_key: int, api_version: int) -> tuple[Any, Any, type]:
    schema = load_response_schema(api_key, api_version)
    header_schema = schema.__header_schema__
    return entity_writer(header_schema), entity_writer(schema), header_schema


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) from any request frame."""
    if len(frame) < _FIXED_HEADER.size:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
    return int(api_key), int(api_version), int(correlation_id)


def decode_request(
    frame: bytes,
    supported: dict[int, tuple[int, int]],
    *,
    listener: str = "",
    peer: str = "",
    session: Session | None = None,
) -> Request:
    """Decode header and body; UnsupportedRequest / MalformedRequest on bad input."""
    api_key, api_version, correlation_id = peek_header(frame)
    size = len(frame)
    versions = supported.get(api_key)
    if versions is None or not versions[0] <= api_version <= versions[1]:
        raise UnsupportedRequest(api_key, api_version, correlation_id)
    try:
        schema, check_bounds, read_header, read_body = _request_codec(api_key, api_version)
    except Exception:  # kio has no entity for this pair
        raise UnsupportedRequest(api_key, api_version, correlation_id) from None
    try:
        # Before kio sees the frame: kio allocates for a declared array count before
        # checking the bytes are there, and a failed allocation aborts the process.
        check_bounds(frame, 0)
    except UnknownTags:
        # KIP-482: a newer client's tagged fields are ignored. kio refuses a tag it does
        # not know, so it gets a copy without them (rare: the check stops at the first).
        try:
            frame = without_unknown_tags(frame, schema, schema.__header_schema__)
        except LengthError as error:
            raise MalformedRequest(f"{schema.__name__} v{api_version}: {error}") from None
    except LengthError as error:
        raise MalformedRequest(f"{schema.__name__} v{api_version}: {error}") from None
    try:
        header, header_size = read_header(frame, 0)
        body, _body_size = read_body(frame, header_size)
    except Exception as error:  # kio raises assorted errors on short or garbled input
        raise MalformedRequest(
            f"cannot decode {schema.__name__} v{api_version}: {type(error).__name__}: {error}"
        ) from None
    # Bytes after the last field are ignored, as Kafka's request parser does: librdkafka
    # (confluent-kafka, kcat) sends an "all topics" Metadata v9+ request whose null
    # topics array is followed by 3 stray bytes (librdkafka#5049), and Kafka reads it
    # as null topics, allow_auto_topic_creation=false.
    return Request(
        RequestHeader(api_key, api_version, correlation_id, header.client_id),
        body,
        size,
        listener,
        peer,
        session if session is not None else Session(listener, peer=peer),
    )


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """Header (v0, or v1 for flexible responses) + body, without the size prefix."""
    write_header, write_body, header_schema = _response_codec(api_key, api_version)
    buffer = io.BytesIO()
    write_header(buffer, header_schema(correlation_id=correlation_id))
    write_body(buffer, body)
    return buffer.getvalue()


def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def request_schema(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


def warm_codecs(versions: dict[int, tuple[int, int]]) -> None:
    """Build now, ahead of need, the codecs of each API's highest version in both
    directions: served (request reader and bounds checker, response writer) and sent to
    a peer (request writer, response reader). They are otherwise built lazily on first
    use, and the first use of the quorum APIs is a failover: a successor's first
    election imported kio's Vote/BeginQuorumEpoch modules and generated their checkers
    in the middle of it (a third of its CPU in a 1.7 s SIGTERM hand-over, bench/cluster.py).
    Pure and idempotent (the builders are cached), so it may run on a worker thread."""
    for api_key, (_lowest, highest) in versions.items():
        _request_codec(api_key, highest)
        _response_codec(api_key, highest)
        request = load_request_schema(api_key, highest)
        response = load_response_schema(api_key, highest)
        entity_writer(request.__header_schema__)
        entity_writer(request)
        entity_reader(response.__header_schema__)
        entity_reader(response)
