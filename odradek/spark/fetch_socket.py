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
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any, Final

from kio.serial import entity_writer

from odradek.client._core.connection import KafkaConnectionError

_SIZE: Final = struct.Struct(">i")
MAX_RESPONSE_BYTES: Final = 1 << 30


class FetchSocket:
    """One blocking connection to a broker for Fetch requests (pipelined, in order)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as error:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {error}") from None
        self._buffer = bytearray(1 << 20)
        self._view = memoryview(self._buffer)
        self._size_buf = bytearray(4)
        self._next_id = 1
        self._expected: list[int] = []
        self.closed = False

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
