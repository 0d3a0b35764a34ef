"""The TLS layer of a listener's connections (network/tls.py, connection.py), in
process: a SocketServer whose handler answers with the session's principal and, on
request, a segment-file range (which TLS must pread and encrypt, not sendfile)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from odradek.network.connection import ConnectionContext, Response
from odradek.network.server import SocketServer
from odradek.network.tls import (
    ListenerTls,
    TlsConfigError,
    build_listener_tls,
    openssl_cipher_name,
)
from odradek.records.file_range import FileRange
from tests.support.certs import PASSWORD, Certs, make_certs

FILE_BYTES = 3 * 1024 * 1024 + 17  # several pread chunks, not a multiple of one


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def mtls(certs: Certs, listener: str = "MTLS", **extra: str) -> ListenerTls:
    return build_listener_tls(
        {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(certs.server.keystore_p12),
            "ssl.keystore.password": PASSWORD,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "required",
            **extra,
        },
        listener,
    )


class Served:
    def __init__(self, server: SocketServer, blob: Path) -> None:
        self.server = server
        self.blob = blob


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, certs: Certs) -> AsyncIterator[Served]:
    blob = tmp_path / "segment"
    blob.write_bytes(os.urandom(FILE_BYTES))
    fd = os.open(blob, os.O_RDONLY)

    async def handler(frame: bytes, context: ConnectionContext) -> Response:
        if frame == b"file":  # the whole file as a zero-copy range after a header
            return Response([b"F", FileRange(fd, 0, FILE_BYTES)])
        return Response([context.session.principal.encode()])

    server = SocketServer(handler, max_frame_bytes=1 << 20, idle_timeout_ms=60_000)
    rules = r"RULE:^CN=([^,]*),OU=([^,]*),O=acme$/$1@$2/U,DEFAULT"
    server.bind("PLAINTEXT", "127.0.0.1", 0)
    server.bind("MTLS", "127.0.0.1", 0, security_protocol="SSL", tls=mtls(certs))
    server.bind(
        "MAPPED",
        "127.0.0.1",
        0,
        security_protocol="SSL",
        tls=mtls(certs, "MAPPED", **{"listener.name.mapped.ssl.principal.mapping.rules": rules}),
    )
    server.start()
    try:
        yield Served(server, blob)
    finally:
        await server.stop(grace_s=2)
        os.close(fd)


def run(tmp_path: Path, certs: Certs, scenario: Callable[[Served], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serving(tmp_path, certs) as served:
            await scenario(served)

    asyncio.run(main())


def port(served: Served, name: str) -> int:
    return next(b.port for b in served.server.bound if b.name == name)


def client_context(certs: Certs, with_certificate: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_certificate:
        context.load_cert_chain(str(certs.alice.cert), str(certs.alice.key))
    return context


async def ask(
    served: Served, listener: str, request: bytes, context: ssl.SSLContext | None
) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port(served, listener), ssl=context)
    try:
        writer.write(struct.pack(">i", len(request)) + request)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)
    finally:
        writer.close()


def test_principal_is_the_certificate_dn(tmp_path: Path, certs: Certs) -> None:
    async def scenario(served: Served) -> None:
        principal = await ask(served, "MTLS", b"who", client_context(certs))
        assert principal == b"User:CN=alice,OU=eng,O=acme"

    run(tmp_path, certs, scenario)


def test_principal_after_listener_mapping_rules(tmp_path: Path, certs: Certs) -> None:
    async def scenario(served: Served) -> None:
        assert await ask(served, "MAPPED", b"who", client_context(certs)) == b"User:ALICE@ENG"

    run(tmp_path, certs, scenario)


def test_plaintext_listener_is_anonymous(tmp_path: Path, certs: Certs) -> None:
    async def scenario(served: Served) -> None:
        assert await ask(served, "PLAINTEXT", b"who", None) == b"User:ANONYMOUS"

    run(tmp_path, certs, scenario)


def test_file_ranges_are_encrypted_whole(tmp_path: Path, certs: Certs) -> None:
    async def scenario(served: Served) -> None:
        body = await ask(served, "MTLS", b"file", client_context(certs))
        assert body[:1] == b"F" and body[1:] == served.blob.read_bytes()
        plain = await ask(served, "PLAINTEXT", b"file", None)  # sendfile: the same bytes
        assert plain == body

    run(tmp_path, certs, scenario)


def test_no_client_certificate_is_refused_with_one_line(
    tmp_path: Path, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(served: Served) -> None:
        caplog.set_level(logging.WARNING, "odradek.network")
        for _ in range(3):  # the same peer address: logged once per interval
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                await ask(served, "MTLS", b"who", client_context(certs, with_certificate=False))
        lines = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "127.0.0.1:" in lines[0] and "failed" in lines[0]

    run(tmp_path, certs, scenario)


def test_plaintext_client_on_tls_port_warns_and_probe_does_not(
    tmp_path: Path, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(served: Served) -> None:
        caplog.set_level(logging.DEBUG, "odradek.network")
        _, writer = await asyncio.open_connection("127.0.0.1", port(served, "MTLS"))
        writer.close()  # a port probe: connects, sends nothing
        await asyncio.sleep(0.2)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await ask(served, "MTLS", b"who", None)  # Kafka's framing, no TLS
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "TLS handshake with 127.0.0.1:" in warnings[0], warnings

    run(tmp_path, certs, scenario)


def test_server_certificate_from_another_ca_is_refused(tmp_path: Path, certs: Certs) -> None:
    async def scenario(served: Served) -> None:
        context = ssl.create_default_context(cafile=str(certs.other_ca))
        with pytest.raises(ssl.SSLCertVerificationError):
            await ask(served, "MTLS", b"who", context)

    run(tmp_path, certs, scenario)


def test_keystore_kinds_and_bad_settings(certs: Certs, tmp_path: Path) -> None:
    pem = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server.keystore_pem)}
    assert build_listener_tls(pem, "SSL").client_auth == "none"
    encrypted = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.encrypted_keystore_pem),
        "ssl.key.password": PASSWORD,
    }
    build_listener_tls(encrypted, "SSL")
    trust_p12 = {
        **pem,
        "ssl.client.auth": "requested",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(certs.ca_p12),
        "ssl.truststore.password": PASSWORD,
    }
    assert build_listener_tls(trust_p12, "SSL").client_auth == "requested"
    bad = {
        "ssl.keystore.location": "refused: JKS is the default type",
        "listener.name.ssl.ssl.keystore.type": "PEM",  # the override wins
    }
    with pytest.raises(TlsConfigError, match="cannot read"):
        build_listener_tls(bad, "SSL")
    cases = [
        ({}, "needs a keystore"),
        ({"ssl.keystore.location": str(certs.server.keystore_p12)}, "JKS .*PKCS12"),
        ({**encrypted, "ssl.key.password": "wrong"}, "wrong ssl.key.password"),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(certs.server.keystore_p12),
                "ssl.keystore.password": "wrong",
            },
            "wrong password",
        ),
        ({**pem, "ssl.keystore.type": "BKS"}, "unknown store type"),
        ({**pem, "ssl.client.auth": "always"}, "none, requested or required"),
        ({**pem, "ssl.client.auth": "required"}, "needs ssl.truststore.location"),
        ({**pem, "ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2 and TLSv1.3"),
        ({**pem, "ssl.cipher.suites": "NOT-A-CIPHER"}, "unknown or unusable cipher suite"),
        ({**pem, "ssl.cipher.suites": "TLS_RSA_WITH_NULL_MD5"}, "'TLS_RSA_WITH_NULL_MD5'"),
        ({**pem, "ssl.principal.mapping.rules": "RULE:x"}, "invalid rule"),
    ]
    for settings, message in cases:
        with pytest.raises(TlsConfigError, match=message):
            build_listener_tls(settings, "SSL")


def test_cipher_suites_take_kafka_s_names(certs: Certs) -> None:
    pem = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server.keystore_pem)}
    suites = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256"
    context = build_listener_tls({**pem, "ssl.cipher.suites": suites}, "SSL").context
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    assert openssl_cipher_name("TLS_RSA_WITH_AES_128_CBC_SHA") == "AES128-SHA"
    assert openssl_cipher_name("ECDHE-RSA-CHACHA20-POLY1305") == "ECDHE-RSA-CHACHA20-POLY1305"


def test_enabled_protocols_bound_the_versions(certs: Certs) -> None:
    pem = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server.keystore_pem)}
    only13 = build_listener_tls({**pem, "ssl.enabled.protocols": "TLSv1.3"}, "SSL").context
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    both = build_listener_tls(pem, "SSL").context
    assert (both.minimum_version, both.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
