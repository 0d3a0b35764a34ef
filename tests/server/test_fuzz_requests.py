"""Hostile requests for every API key and version served, against one broker whose
address space is limited: it must keep serving, and its memory must stay bounded.

The lesson of CVE-2022-34917: a request that claims a huge array makes a decoder that
trusts the count allocate for it before it reads a byte. kio's native decoder did so
(a Metadata v12 request of 85 bytes claiming 2^34 topics made it ask for 128 GiB and
abort); the int32 forms (2^31-1 entries, 16 GiB) survived only because Linux
overcommits. So the broker runs here under ``RLIMIT_AS`` = 4 GiB, set on the running
process with prlimit(2), where any such allocation fails (and a failed allocation in
Rust aborts the process).

For each served (key, version) a request with every array holding one element and
every nullable value present is encoded with kio, so that every count, length and
tag-size position exists; each position is then inflated to huge values in its own
wire form (int16 0x7FFF, int32 2^31-1, unsigned varints 2^32-1 and 2^34+1), one frame
per connection, 150 connections at a time. Then each position set to null, random
bodies behind valid headers, those full requests with random bytes changed, and
random bytes with no header at all. Afterwards the broker must be alive, answer
ApiVersions and Metadata, never have held more than a bounded RSS (VmHWM), and have
logged no traceback.
"""

from __future__ import annotations

import asyncio
import io
import random
import resource
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from odradek.protocol.bounds import read_uvarint, traced_positions
from odradek.server.handlers import Plane, supported_versions
from tests.server.test_protocol import API_VERSIONS, assert_clean_log, metadata, request
from tests.support.broker import BrokerProcess, running_broker
from tests.support.kio_samples import full_entity, uvarint
from tests.support.wire import WireClient

ADDRESS_SPACE_LIMIT = 4 << 30
RSS_GROWTH_LIMIT_KIB = 256 * 1024
CONNECTIONS = 150
CONNECTION_TIMEOUT_S = 5.0
RANDOM_BODIES_PER_VERSION = 8
RANDOM_RAW_CONNECTIONS = 300


def served_requests(plane: Plane = Plane.BROKER) -> Iterator[tuple[int, int, Any]]:
    for key, (low, high) in sorted(supported_versions(plane).items()):
        for version in range(low, high + 1):
            try:
                yield key, version, load_request_schema(key, version)
            except Exception:  # advertised, never decodable (Produce v0-2, KAFKA-18659)
                continue


def encode_header(schema: Any) -> bytes:
    header_schema = schema.__header_schema__
    header = header_schema(
        request_api_key=schema.__api_key__,
        request_api_version=schema.__version__,
        correlation_id=1,
        client_id="fuzz",
    )
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header)
    return buffer.getvalue()


def encode_full_body(schema: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, full_entity(schema))
    return buffer.getvalue()


def inflated_frames(plane: Plane = Plane.BROKER) -> list[bytes]:
    """Every count and length of every served request, inflated in turn."""
    frames = []
    for _key, _version, schema in served_requests(plane):
        whole = encode_header(schema) + encode_full_body(schema)
        for pos, width in traced_positions(schema, schema.__header_schema__, whole):
            if width == "int16":
                frames.append(whole[:pos] + struct.pack(">h", 0x7FFF) + whole[pos + 2 :])
            elif width == "int32":
                frames.append(whole[:pos] + struct.pack(">i", 2**31 - 1) + whole[pos + 4 :])
            else:
                _, after = read_uvarint(whole, pos, len(whole), "fuzz")
                for huge in (2**32 - 1, 2**34 + 1):
                    frames.append(whole[:pos] + uvarint(huge) + whole[after:])
    return frames


def null_frames(plane: Plane = Plane.BROKER) -> list[bytes]:
    """Every count and length of every served request set to null (-1, or 0 for the
    compact forms) in turn: refused where the schema allows no null, else handled."""
    frames = []
    for _key, _version, schema in served_requests(plane):
        whole = encode_header(schema) + encode_full_body(schema)
        for pos, width in traced_positions(schema, schema.__header_schema__, whole):
            if width == "int16":
                frames.append(whole[:pos] + struct.pack(">h", -1) + whole[pos + 2 :])
            elif width == "int32":
                frames.append(whole[:pos] + struct.pack(">i", -1) + whole[pos + 4 :])
            else:
                _, after = read_uvarint(whole, pos, len(whole), "fuzz")
                frames.append(whole[:pos] + b"\x00" + whole[after:])
    return frames


def random_frames(rng: random.Random, plane: Plane = Plane.BROKER) -> list[bytes]:
    """Random bodies behind a valid header, and full requests with a few bytes of the
    body changed at random, for every served key and version."""
    frames = []
    for _key, _version, schema in served_requests(plane):
        header = encode_header(schema)
        body = encode_full_body(schema)
        for _ in range(RANDOM_BODIES_PER_VERSION):
            frames.append(header + rng.randbytes(rng.randrange(0, 200)))
            if not body:  # e.g. ApiVersions v0
                continue
            mutated = bytearray(body)
            for _ in range(rng.randrange(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            frames.append(header + bytes(mutated))
    return frames


async def send_all(port: int, payloads: list[bytes]) -> int:
    """Each payload on its own connection, CONNECTIONS at a time; how many the broker
    closed (rather than answered and left open until our timeout)."""
    gate = asyncio.Semaphore(CONNECTIONS)
    closed = 0

    async def one(payload: bytes) -> None:
        nonlocal closed
        async with gate:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except ConnectionError:
                return  # the broker died: assert_answers says so, with its log
            try:
                writer.write(payload)
                await writer.drain()
                async with asyncio.timeout(CONNECTION_TIMEOUT_S):
                    while await reader.read(65536):
                        pass
                closed += 1
            except (TimeoutError, ConnectionError):
                pass
            finally:
                writer.close()

    await asyncio.gather(*(one(payload) for payload in payloads))
    return closed


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


@pytest.fixture
def limited_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data") as broker:
        resource.prlimit(broker.pid, resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
        yield broker


def assert_answers(broker: BrokerProcess) -> None:
    assert broker.alive(), broker.log()[-3000:]
    with WireClient(broker.bootstrap) as client:
        versions = request(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        assert client.request(versions).error_code == ErrorCode.none
        assert metadata(client, None).brokers


def test_huge_counts_and_random_bytes_for_every_api_and_version(
    limited_broker: BrokerProcess,
) -> None:
    broker = limited_broker
    assert_answers(broker)
    rss_before = status_kib(broker.pid, "VmRSS")

    inflated = inflated_frames()
    assert len(inflated) > 1000  # every served request contributes its positions
    closed = asyncio.run(send_all(broker.port, [frame(f) for f in inflated]))
    assert_answers(broker)
    assert closed == len(inflated), "every inflated request closes its connection"
    assert "malformed request" in broker.log()

    rng = random.Random(34917)
    garbage = [frame(f) for f in null_frames() + random_frames(rng)]
    garbage += [rng.randbytes(rng.randrange(1, 300)) for _ in range(RANDOM_RAW_CONNECTIONS)]
    asyncio.run(send_all(broker.port, garbage))

    assert_answers(broker)
    peak = status_kib(broker.pid, "VmHWM")
    assert peak - rss_before < RSS_GROWTH_LIMIT_KIB, (rss_before, peak)
    assert_clean_log(broker)
