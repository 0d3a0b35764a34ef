"""A hostile broker, or a hostile member of a group, cannot crash the Python client.

kio's native decoder allocates for a declared array count before it checks the bytes
are there, and a failed allocation aborts the process. The client checks every
response (and every subscription or assignment another group member wrote) with
odradek/protocol/bounds.py first. Each case runs in a child process whose address
space is limited to 2 GiB, so a count trusted by kio aborts the child (the test then
fails with its exit status) instead of the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

ADDRESS_SPACE_LIMIT = 2 << 30

PRELUDE = textwrap.dedent(
    f"""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_LIMIT}, {ADDRESS_SPACE_LIMIT}))
    import asyncio, socket, struct, threading
    from odradek.client._core.connection import BrokerAddress, BrokerConnection
    from odradek.protocol.bounds import uvarint_bytes as uvarint

    def serve_once(listener, body):
        conn, _ = listener.accept()
        size = struct.unpack(">i", conn.recv(4))[0]
        request = b""
        while len(request) < size:
            request += conn.recv(size - len(request))
        correlation_id = request[4:8]
        payload = correlation_id + body
        conn.sendall(struct.pack(">i", len(payload)) + payload)
        conn.recv(1)  # until the client closes

    async def connect(body):
        listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=serve_once, args=(listener, body), daemon=True).start()
        connection = BrokerConnection(
            BrokerAddress(0, "127.0.0.1", listener.getsockname()[1]),
            client_id="t",
            request_timeout_s=10,
            client_versions={{18: (0, 3)}},
        )
        try:
            await connection.connect()
        except Exception as error:
            print("refused:", type(error).__name__, error)
        else:
            print("accepted")
        finally:
            await connection.close()
    """
)

# ApiVersions v3 response (header v0): error code 0, then the compact api_keys array.
API_VERSIONS_CASES = {
    "compact count 2^34": "b'\\x00\\x00' + uvarint(2**34 + 1)",
    "compact count 2^32-1": "b'\\x00\\x00' + uvarint(2**32 - 1) + bytes(40)",
}


def run_child(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("body", API_VERSIONS_CASES.values(), ids=API_VERSIONS_CASES.keys())
def test_a_response_claiming_a_huge_array_closes_the_connection(body: str) -> None:
    result = run_child(f"asyncio.run(connect({body}))")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: ConnectionLost" in result.stdout, result.stdout
    assert "ApiVersionsResponse.api_keys: count" in result.stdout


def test_a_member_subscription_claiming_a_huge_array_is_an_error() -> None:
    # Subscription v0: int16 version 0, then a legacy topics array claiming 2^31-1.
    result = run_child(
        """
        from odradek.client.consumer.protocol import ConsumerProtocolError, decode_subscription
        from odradek.client.consumer.protocol import decode_assignment
        for decode, data in (
            (decode_subscription, b"\\x00\\x00" + struct.pack(">i", 2**31 - 1) + bytes(8)),
            (decode_assignment, b"\\x00\\x00" + struct.pack(">i", 2**31 - 1) + bytes(8)),
        ):
            try:
                decode(data)
            except ConsumerProtocolError as error:
                print("refused:", error)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("refused:") == 2, result.stdout
