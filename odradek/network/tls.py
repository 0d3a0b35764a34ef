"""TLS for listeners: an ``SSLContext`` from Kafka's ``ssl.*`` properties, and the
per-connection TLS layer over the connection's raw non-blocking socket.

How this works and why: a listener's connections read and write their socket directly
(``loop.sock_recv``, ``os.sendfile``: see connection.py), so TLS cannot be an asyncio
transport wrapped around them. Each TLS connection instead drives an
``ssl.SSLObject`` over two ``ssl.MemoryBIO``s: bytes read from the socket go into the
incoming BIO and come out of ``SSLObject.read`` decrypted; ``SSLObject.write`` puts
records in the outgoing BIO, which is flushed to the socket. The connection's framing,
queueing and memory accounting above are unchanged. ``os.sendfile`` cannot go through
TLS (the kernel would send plaintext), so a fetch response's file ranges are read
with ``os.pread`` in chunks and encrypted: TLS listeners copy, plaintext ones keep
their zero-copy path.

Settings (Kafka's names; ``listener.name.<listener>.ssl.*`` overrides ``ssl.*``):
``ssl.keystore.location``/``.type`` (PEM: one file with the private key and the
certificate chain; PKCS12), ``ssl.keystore.password``, ``ssl.key.password`` (an
encrypted PEM key), ``ssl.truststore.location``/``.type`` (PEM or PKCS12, the CAs that
sign client certificates), ``ssl.truststore.password``, ``ssl.client.auth``
(none/requested/required), ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3),
``ssl.cipher.suites`` (Kafka's IANA names such as
``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``, or OpenSSL's, for TLS 1.2; Python's ssl
cannot restrict TLS 1.3's suites, all AEAD, so TLS 1.3 names are accepted and TLS 1.3
keeps OpenSSL's default set) and
``ssl.principal.mapping.rules``. JKS keystores cannot be read from Python: convert
them with ``keytool -importkeystore -deststoretype PKCS12``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from odradek.security.principal import PrincipalMapper, RuleError

# The ssl.* properties a TLS listener reads (Kafka's defaults where odradek uses them).
SSL_DEFAULTS: Final[dict[str, str | None]] = {
    "ssl.keystore.location": None,
    "ssl.keystore.type": "JKS",
    "ssl.keystore.password": None,
    "ssl.key.password": None,
    "ssl.truststore.location": None,
    "ssl.truststore.type": "JKS",
    "ssl.truststore.password": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.principal.mapping.rules": "DEFAULT",
}
HANDSHAKE_TIMEOUT_S: Final = 10.0
CHUNK_BYTES: Final = 256 * 1024  # a FileRange is read and encrypted this much at a time
_CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """A bad TLS setting; ``key`` is the (possibly listener-prefixed) property."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """What a TLS listener's connections need: the context and the principal mapper."""

    context: ssl.SSLContext
    mapper: PrincipalMapper
    client_auth: str  # none, requested, required


def listener_settings(properties: Mapping[str, str], listener: str) -> dict[str, tuple[str, str]]:
    """Each ssl.* setting of ``listener`` as (value, the property it came from)."""
    prefix = f"listener.name.{listener.lower()}."
    settings: dict[str, tuple[str, str]] = {}
    for name, default in SSL_DEFAULTS.items():
        for key in (prefix + name, name):
            value = properties.get(key)
            if value is not None and value.strip() != "":
                settings[name] = (value.strip(), key)
                break
        else:
            if default is not None:
                settings[name] = (default, name)
    return settings


def _password(settings: Mapping[str, tuple[str, str]], name: str) -> bytes | None:
    value = settings.get(name)
    return value[0].encode() if value is not None else None


def _read(path_and_key: tuple[str, str]) -> bytes:
    path, key = path_and_key
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise TlsConfigError(key, f"cannot read {path}: {error.strerror}") from None


def _store_type(settings: Mapping[str, tuple[str, str]], name: str) -> str:
    kind, key = settings[name]
    kind = kind.upper()
    if kind == "JKS":
        raise TlsConfigError(
            key,
            "JKS stores cannot be read by odradek (Python); convert it to PKCS12 "
            "(keytool -importkeystore -deststoretype PKCS12) or PEM and set "
            f"{name}=PKCS12",
        )
    if kind not in ("PEM", "PKCS12"):
        raise TlsConfigError(key, f"unknown store type {kind!r} (PEM or PKCS12)")
    return kind


def _load_pkcs12(data: bytes, password: bytes | None, key: str) -> tuple[Any, Any, list[Any]]:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        private_key, certificate, extra = pkcs12.load_key_and_certificates(data, password)
    except ValueError:
        raise TlsConfigError(
            key, "cannot open the PKCS12 keystore: wrong password or not a PKCS12 file"
        ) from None
    return private_key, certificate, list(extra)


def _load_keystore(context: ssl.SSLContext, settings: Mapping[str, tuple[str, str]]) -> None:
    location = settings.get("ssl.keystore.location")
    if location is None:
        raise TlsConfigError("ssl.keystore.location", "a TLS listener needs a keystore")
    kind = _store_type(settings, "ssl.keystore.type")
    data = _read(location)
    if kind == "PEM":
        # Kafka: ssl.key.password decrypts the key; ssl.keystore.password is a PEM
        # keystore's alternative name for it.
        password = _password(settings, "ssl.key.password") or _password(
            settings, "ssl.keystore.password"
        )
        try:
            context.load_cert_chain(location[0], password=password)
        except ssl.SSLError as error:
            raise TlsConfigError(
                location[1],
                f"cannot load the key and certificate chain from {location[0]} "
                f"(a wrong ssl.key.password, or not a PEM key plus certificates): "
                f"{error.reason or error}",
            ) from None
        return
    from cryptography.hazmat.primitives import serialization

    password_key = settings.get("ssl.keystore.password", ("", "ssl.keystore.password"))[1]
    private_key, certificate, extra = _load_pkcs12(
        data, _password(settings, "ssl.keystore.password"), password_key
    )
    if private_key is None or certificate is None:
        raise TlsConfigError(location[1], f"{location[0]} holds no private key and certificate")
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (certificate, *extra))
    key_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # load_cert_chain reads files only: a private temp file, removed at once.
    fd, path = tempfile.mkstemp(prefix="odradek-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(key_pem + chain)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)


def _load_truststore(context: ssl.SSLContext, settings: Mapping[str, tuple[str, str]]) -> None:
    location = settings.get("ssl.truststore.location")
    if location is None:
        return
    kind = _store_type(settings, "ssl.truststore.type")
    data = _read(location)
    if kind == "PEM":
        try:
            context.load_verify_locations(cadata=data.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError):
            raise TlsConfigError(location[1], f"{location[0]} holds no PEM certificates") from None
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        loaded = pkcs12.load_pkcs12(data, _password(settings, "ssl.truststore.password"))
    except ValueError:
        raise TlsConfigError(
            settings.get("ssl.truststore.password", ("", "ssl.truststore.password"))[1],
            f"cannot open the PKCS12 store {location[0]}: wrong password or not a PKCS12 file",
        ) from None
    certificates = [c.certificate for c in loaded.additional_certs]
    if loaded.cert is not None:
        certificates.append(loaded.cert.certificate)
    if not certificates:
        raise TlsConfigError(location[1], f"{location[0]} holds no certificates")
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)
    context.load_verify_locations(cadata=pem.decode("ascii"))


def _versions(context: ssl.SSLContext, settings: Mapping[str, tuple[str, str]]) -> None:
    raw, key = settings["ssl.enabled.protocols"]
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise TlsConfigError(key, f"{raw!r}: only TLSv1.2 and TLSv1.3 are supported")
    versions = sorted(_VERSIONS[n] for n in names)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


_KEY_EXCHANGES: Final = {"ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA"}
_KEY_EXCHANGES_MORE: Final = {"DHE_RSA": "DHE-RSA", "RSA": ""}
_BULK: Final = {
    "AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "CHACHA20_POLY1305_SHA256": "CHACHA20-POLY1305",
    "AES_128_CBC_SHA256": "AES128-SHA256",
    "AES_256_CBC_SHA384": "AES256-SHA384",
    "AES_128_CBC_SHA": "AES128-SHA",
    "AES_256_CBC_SHA": "AES256-SHA",
}
TLS13_SUITES: Final = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)


def openssl_cipher_name(name: str) -> str:
    """A TLS 1.2 suite's OpenSSL name from its IANA (Java, Kafka) name; OpenSSL names
    pass through. ``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    exchange, _, bulk = name[len("TLS_") :].partition("_WITH_")
    prefix = {**_KEY_EXCHANGES, **_KEY_EXCHANGES_MORE}.get(exchange)
    if prefix is None or bulk not in _BULK:
        return name  # OpenSSL will not know it either: reported by the caller
    return "-".join(p for p in (prefix, _BULK[bulk]) if p)


def _ciphers(context: ssl.SSLContext, raw: str, key: str) -> None:
    """ssl.cipher.suites: each TLS 1.2 suite must be one OpenSSL can use."""
    names = [n.strip() for n in raw.split(",") if n.strip()]
    tls12 = [n for n in names if n not in TLS13_SUITES]
    if not tls12:
        return
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name in tls12:
        try:
            scratch.set_ciphers(openssl_cipher_name(name))
        except ssl.SSLError:
            raise TlsConfigError(key, f"unknown or unusable cipher suite {name!r}") from None
    context.set_ciphers(":".join(openssl_cipher_name(n) for n in tls12))


def build_listener_tls(properties: Mapping[str, str], listener: str) -> ListenerTls:
    """The TLS of one listener from the broker's properties; TlsConfigError if bad."""
    settings = listener_settings(properties, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, settings)
    _ciphers(context, *settings["ssl.cipher.suites"])
    auth, auth_key = settings["ssl.client.auth"]
    if auth.lower() not in _CLIENT_AUTH:
        raise TlsConfigError(auth_key, f"{auth!r} is not none, requested or required")
    _load_keystore(context, settings)
    _load_truststore(context, settings)
    context.verify_mode = _CLIENT_AUTH[auth.lower()]
    if context.verify_mode != ssl.CERT_NONE and settings.get("ssl.truststore.location") is None:
        # Kafka would fall back to the JVM's CAs; a client-certificate check against
        # the system's public CAs is never what a broker means.
        raise TlsConfigError(auth_key, f"{auth} needs ssl.truststore.location")
    rules, rules_key = settings["ssl.principal.mapping.rules"]
    try:
        mapper = PrincipalMapper(rules)
    except RuleError as error:
        raise TlsConfigError(rules_key, str(error)) from None
    return ListenerTls(context, mapper, auth.lower())


def build_peer_context(properties: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The broker's client side of ``listener`` (replica fetchers, the controller and
    raft clients, transaction markers), as Kafka's broker does it: the truststore
    verifies the peer (the system's CAs without one), the keystore is this broker's
    client certificate (for peers requiring one), and
    ``ssl.endpoint.identification.algorithm`` (default https; empty: none) checks that
    the peer's certificate names the host connected to."""
    settings = listener_settings(properties, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(context, settings)
    _ciphers(context, *settings["ssl.cipher.suites"])
    _load_keystore(context, settings)
    if settings.get("ssl.truststore.location") is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        _load_truststore(context, settings)
    prefixed = f"listener.name.{listener.lower()}.ssl.endpoint.identification.algorithm"
    algorithm = properties.get(prefixed, properties.get("ssl.endpoint.identification.algorithm"))
    context.check_hostname = (algorithm if algorithm is not None else "https").strip() != ""
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class TlsStream:
    """One connection's TLS: handshake, then decrypting reads and encrypting writes.

    ``raw_recv(n)`` gives at most ``n`` bytes from the socket (b"" at end of stream;
    the connection's own idle-timeout-aware read) and ``raw_send(data)`` writes all of
    ``data``; everything above sees plaintext.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        raw_recv: Callable[[int], Awaitable[bytes]],
        raw_send: Callable[[bytes], Awaitable[None]],
    ) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.raw_recv = raw_recv
        self.raw_send = raw_send
        # The reader task (TLS 1.3 tickets, alerts) and the responding task both flush
        # the outgoing BIO: one at a time, so records reach the socket in BIO order.
        self._send_lock = asyncio.Lock()
        self.silent = True  # no byte received yet

    async def _flush(self) -> None:
        async with self._send_lock:
            if self.outgoing.pending:
                await self.raw_send(self.outgoing.read())

    async def _fill(self, count: int) -> bool:
        data = await self.raw_recv(count)
        if not data:
            self.incoming.write_eof()
            return False
        self.silent = False
        self.incoming.write(data)
        return True

    async def handshake(self) -> None:
        """Complete the server side of the handshake (ssl.SSLError, OSError if not)."""
        while True:
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill(64 * 1024):
                    if self.silent:  # nothing came at all: a port probe
                        raise EOFError("closed before the handshake") from None
                    raise ConnectionError(
                        "the peer closed the connection in the handshake"
                    ) from None
                continue
            except ssl.SSLError:
                # The alert telling the client why (e.g. no certificate) goes out first.
                await self._flush()
                raise
            await self._flush()
            return

    def peer_certificate(self) -> bytes | None:
        return self.tls.getpeercert(binary_form=True)

    async def recv(self, count: int) -> bytes:
        """At most ``count`` decrypted bytes; b"" at end of stream."""
        while True:
            try:
                return self.tls.read(count)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            await self._flush()  # e.g. TLS 1.3 session tickets, key updates
            if not await self._fill(max(count + 1024, 16 * 1024)):
                try:  # what the BIO still holds, then the end
                    return self.tls.read(count)
                except ssl.SSLError:
                    return b""

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = self.tls.write(view[:CHUNK_BYTES])
            view = view[written:]
            await self._flush()

    async def send_file(self, fd: int, position: int, length: int) -> None:
        """A segment file's range, read in chunks and encrypted (sendfile cannot)."""
        while length > 0:
            chunk = os.pread(fd, min(length, CHUNK_BYTES), position)
            if not chunk:  # the file shrank under us: the response cannot be completed
                raise ConnectionError("segment range no longer readable")
            await self.sendall(chunk)
            position += len(chunk)
            length -= len(chunk)
            if length > 0:
                await asyncio.sleep(0)  # let other connections in between chunks

    def close_notify(self) -> bytes:
        """The close_notify alert to send before closing (b"" if none)."""
        with contextlib.suppress(ssl.SSLError):
            self.tls.unwrap()
        return self.outgoing.read() if self.outgoing.pending else b""
