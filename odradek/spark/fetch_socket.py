"""A blocking socket that sends Fetch requests and receives their responses raw.

How this works and why: a Spark task reads one partition range, one fetch after the
other, so it needs none of the event loop's multiplexing — and the loop's callbacks,
the per-response buffer allocation and kio's decoding of the records field were half
of the reader's time. This socket sends a kio-encoded request and receives each
response frame into ONE buffer it keeps (grown when a response is larger), returning a
memoryview of it: the caller parses the frame (``protocol.fetch_codec``) and decodes the records
from that view before it asks for the next response, which overwrites the buffer. The
Arrow columns the decoder builds are copies, so nothing yielded to Spark points into
the buffer. The reader sends the next fetch before decoding, so the broker's answer
is on its way (into the kernel's socket buffer) while this process decodes.

Any socket failure, timeout, or a response out of order raises ``KafkaConnectionError``
and closes the socket; the caller reconnects and retries.

Security (``kafka.security.protocol`` and the ``kafka.ssl.*`` / ``kafka.sasl.*`` options):
on a TLS listener the socket is wrapped with the reader's client ``SSLContext``
(blocking, so ``recv_into`` reads decrypted bytes into the same buffer); on a SASL
listener the reader authenticates before its first fetch with the same client
mechanisms as odradek's client (client/_core/sasl.py), each SaslHandshake /
SaslAuthenticate sent and read through ``send``/``receive``.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
from typing import Any, Final

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.client._core.connection import KafkaConnectionError, request_entity
from odradek.client._core.sasl import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SaslAuthenticationError,
    SaslCredentials,
    client_mechanism,
)

_SIZE: Final = struct.Struct(">i")
MAX_RESPONSE_BYTES: Final = 1 << 30


class FetchSocket:
    """One blocking connection to a broker for Fetch requests (pipelined, in order)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        sasl_versions: tuple[int, int] = (1, 2),  # SaslHandshake, SaslAuthenticate
    ) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.address = f"{host}:{port}"
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            self._sock = sock
        except OSError as error:  # ssl.SSLError is an OSError
            raise KafkaConnectionError(f"cannot connect to {self.address}: {error}") from None
        self._buffer = bytearray(1 << 20)
        self._view = memoryview(self._buffer)
        self._size_buf = bytearray(4)
        self._next_id = 1
        self._expected: list[int] = []
        self.closed = False
        if sasl is not None:
            try:
                self._authenticate(sasl, *sasl_versions)
            except BaseException:
                self.close()
                raise

    def _call(self, request: Any) -> Any:
        """Send one request and decode its response (SASL's few round trips)."""
        self.send(request)
        frame = self.receive()
        schema = load_response_schema(request.__api_key__, request.__version__)
        _header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        return entity_reader(schema)(frame, offset)[0]

    def _authenticate(self, credentials: SaslCredentials, handshake_v: int, auth_v: int) -> None:
        handshake = self._call(
            request_entity(SASL_HANDSHAKE_KEY, handshake_v, mechanism=credentials.mechanism)
        )
        if handshake.error_code != ErrorCode.none:
            raise SaslAuthenticationError(
                f"{self.address} does not enable SASL mechanism {credentials.mechanism}"
            )
        mechanism = client_mechanism(credentials)
        server: bytes | None = None
        while (token := mechanism.next_token(server)) is not None:
            response = self._call(request_entity(SASL_AUTHENTICATE_KEY, auth_v, auth_bytes=token))
            if response.error_code != ErrorCode.none:
                raise SaslAuthenticationError(
                    f"SASL {credentials.mechanism} authentication failed: "
                    f"{response.error_message or response.error_code.name.upper()}"
                )
            server = bytes(response.auth_bytes)

    @property
    def outstanding(self) -> int:
        return len(self._expected)

    def send(self, request: Any) -> None:
        """Write one request (its response is read by a later ``receive``)."""
        self._check_open()
        correlation_id = self._next_id
        self._next_id += 1
        header_schema = request.__header_schema__
        out = io.BytesIO()
        out.write(b"\x00\x00\x00\x00")
        entity_writer(header_schema)(
            out,
            header_schema(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=correlation_id,
                client_id=self.client_id,
            ),
        )
        entity_writer(type(request))(out, request)
        frame = out.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        try:
            self._sock.sendall(frame)
        except OSError as error:
            self._lost(f"sending to {self.address} failed: {error}")
        self._expected.append(correlation_id)

    def receive(self) -> memoryview:
        """The oldest outstanding response, correlation id first; valid until the next call."""
        self._check_open()
        if not self._expected:
            raise KafkaConnectionError("no request is waiting for a response")
        self._fill(memoryview(self._size_buf))
        (size,) = _SIZE.unpack(self._size_buf)
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            self._lost(f"response size {size} from {self.address} out of range")
        if size > len(self._buffer):
            self._buffer = bytearray(size)
            self._view = memoryview(self._buffer)
        frame = self._view[:size]
        self._fill(frame)
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        expected = self._expected.pop(0)
        if correlation_id != expected:
            self._lost(f"unexpected correlation id {correlation_id} (wanted {expected})")
        return frame.toreadonly()

    def _fill(self, target: memoryview) -> None:
        got, want = 0, len(target)
        recv_into = self._sock.recv_into
        try:
            while got < want:
                n = recv_into(target[got:])
                if n == 0:
                    self._lost(f"connection to {self.address} closed by the broker")
                got += n
        except OSError as error:  # socket.timeout is an OSError
            self._lost(f"receiving from {self.address} failed: {error}")

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaConnectionError(f"fetch connection to {self.address} is closed")

    def _lost(self, message: str) -> None:
        self.close()
        raise KafkaConnectionError(message)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._expected.clear()
            self._sock.close()
