"""Connection and memory limits of a real broker: per-IP and broker-wide connection
limits (static and changed at runtime), the open-file limit raised at start, storage
still writing when clients hold every descriptor they may, and the bytes of partly
read requests bounded across connections (RSS read from /proc) while others are served.
"""

from __future__ import annotations

import resource
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.server.test_admin import BROKER, DELETE, SET
from tests.server.test_admin_configs import incremental
from tests.server.test_protocol import (
    API_VERSIONS,
    assert_clean_log,
    batch,
    list_offset,
    make_topic,
    metadata,
    produce,
    request,
    wait_closed,
)
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient

MIB = 1 << 20


def connect(broker: BrokerProcess, source: str = "127.0.0.1") -> WireClient:
    client = WireClient.__new__(WireClient)
    client.sock = socket.create_connection(
        ("127.0.0.1", broker.port), timeout=10, source_address=(source, 0)
    )
    client.client_id = "limits"
    client.correlation_id = 0
    return client


def answers(client: WireClient) -> bool:
    return bool(client.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none)


def connect_when_free(broker: BrokerProcess, timeout_s: float = 10.0) -> WireClient:
    """A served connection, retried while the broker has yet to see an earlier one close."""
    deadline = time.monotonic() + timeout_s
    while True:
        client = connect(broker)
        try:
            if answers(client):
                return client
        except OSError:
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def refused(client: WireClient) -> bool:
    """The broker closed this connection without answering (per-IP limit)."""
    try:
        client.send(request(API_VERSIONS, 0))
    except OSError:
        return True
    try:
        wait_closed(client.sock, timeout_s=5)
    except TimeoutError:
        return False
    return True


def rlimit_nofile(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field}")


def soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def test_per_ip_limit_closes_extra_connections_and_changes_at_runtime(tmp_path: Path) -> None:
    args = [
        "--override", "max.connections.per.ip=3",
        "--override", "max.connections.per.ip.overrides=127.0.0.2:1",
    ]  # fmt: skip
    with running_broker(tmp_path / "data", args) as broker:
        kept = [connect(broker) for _ in range(3)]
        assert all(answers(c) for c in kept)
        extra = connect(broker)
        assert refused(extra)
        other = connect(broker, "127.0.0.2")
        assert answers(other)
        assert refused(connect(broker, "127.0.0.2"))
        # Earlier connections are untouched and keep working.
        assert all(answers(c) for c in kept)
        assert "rejected connection from 127.0.0.1" in broker.log()
        assert "max.connections.per.ip.overrides=1" in broker.log()
        # A closed connection frees its address's slot.
        kept.pop().close()
        kept.append(connect_when_free(broker))

        # Raised at runtime (cluster-wide dynamic default), then back to the static 3.
        (result,) = incremental(kept[0], [(BROKER, "", [("max.connections.per.ip", SET, "5")])])
        assert result.error_code == ErrorCode.none, result
        more = [connect(broker) for _ in range(2)]
        assert all(answers(c) for c in more)
        assert refused(connect(broker))
        ops = [("max.connections.per.ip", DELETE, None)]
        assert incremental(kept[0], [(BROKER, "", ops)])[0].error_code == ErrorCode.none
        for client in more:
            client.close()
        time.sleep(0.2)
        assert refused(connect(broker))  # 3 open from 127.0.0.1 again: at the limit
        bad = [("max.connections.per.ip.overrides", SET, "nohost")]
        (result,) = incremental(kept[0], [(BROKER, "", bad)])
        assert result.error_code == ErrorCode.invalid_request
        for client in [*kept, other]:
            client.close()
        assert_clean_log(broker)


def test_max_connections_makes_the_acceptor_wait_for_a_slot(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", ["--override", "max.connections=4"]) as broker:
        held = [connect(broker) for _ in range(4)]
        assert all(answers(c) for c in held)
        # The fifth connects (the kernel's backlog) but is not served while 4 are open.
        waiting = connect(broker)
        correlation_id = waiting.send(request(API_VERSIONS, 0))
        waiting.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            waiting.sock.recv(1)
        assert "max.connections=4 reached" in broker.log()
        held.pop().close()
        waiting.sock.settimeout(10)
        response = waiting.receive(request(API_VERSIONS, 0), correlation_id)
        assert response.error_code == ErrorCode.none
        assert all(answers(c) for c in held)
        # Raised at runtime for this node: a sixth is accepted at once.
        ops = [("max.connections", SET, "6")]
        assert incremental(held[0], [(BROKER, "1", ops)])[0].error_code == ErrorCode.none
        sixth = connect(broker)
        sixth.sock.settimeout(5)
        assert answers(sixth)
        for client in [*held, waiting, sixth]:
            client.close()
        assert_clean_log(broker)


def test_soft_open_file_limit_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", preexec_fn=rlimit_nofile(64, 4096)) as broker:
        assert soft_nofile(broker.pid) == 4096
        assert "open-file limit raised from 64 to 4096" in broker.log()


def test_connections_at_a_low_descriptor_limit_leave_storage_its_files(tmp_path: Path) -> None:
    """300 clients against a 256-descriptor limit while segments roll and checkpoints
    are written: every produce succeeds, no 'Too many open files', restart reads all."""
    args = [
        "--override", "log.flush.offset.checkpoint.interval.ms=100",
        "--override", "replica.high.watermark.checkpoint.interval.ms=100",
    ]  # fmt: skip
    limit = rlimit_nofile(256, 256)
    records = 0
    hogs: list[socket.socket] = []
    try:
        with running_broker(tmp_path / "data", args, limit) as broker:
            with WireClient(broker.bootstrap) as client:
                topic = make_topic(client, "fds", configs={"segment.bytes": str(MIB)})
                for _ in range(300):
                    hog = socket.socket()
                    hog.setblocking(False)
                    hog.connect_ex(("127.0.0.1", broker.port))
                    hogs.append(hog)
                time.sleep(1.0)
                value = b"x" * 1000
                for _ in range(64):  # 8 MiB: seven segment rolls, each opening 3 files
                    response = produce(client, topic, 0, batch([value] * 128))
                    assert response.error_code == ErrorCode.none, response
                    records += 128
                time.sleep(0.3)  # checkpoints written while the clients hold their slots
                assert answers(client)
                assert "Too many open files" not in broker.log(), broker.log()
                assert "reached: not accepting until a connection closes" in broker.log()
            for hog in hogs:
                hog.close()
            hogs.clear()
            assert broker.stop() == 0
            assert "Too many open files" not in broker.log(), broker.log()
            assert_clean_log(broker)
            broker.start()
            with WireClient(broker.bootstrap) as client:
                assert list_offset(client, topic, 0, -1).offset == records
                assert len(list((tmp_path / "data" / f"{topic}-0").glob("*.log"))) >= 8
    finally:
        for hog in hogs:
            hog.close()


def test_queued_request_bytes_bound_memory_of_partly_sent_requests(tmp_path: Path) -> None:
    """24 connections each send 7 of 8 MiB of a request: without the bound the broker
    buffers 168 MiB; with queued.max.request.bytes=16 MiB it holds at most 16 MiB plus
    one request, stops reading the rest, and still answers other clients at once."""
    args = [
        "--override", "socket.request.max.bytes=8388608",
        "--override", "queued.max.request.bytes=16777216",
    ]  # fmt: skip
    with running_broker(tmp_path / "data", args) as broker:
        with WireClient(broker.bootstrap) as client:
            topic = make_topic(client, "after", configs={"max.message.bytes": str(8 * MIB)})
        before = proc_status(broker.pid, "VmRSS")
        senders = []
        for _ in range(24):
            sender = socket.create_connection(("127.0.0.1", broker.port))
            sender.setblocking(False)
            senders.append([sender, struct.pack(">i", 8 * MIB) + bytes(7 * MIB)])
        chunk = 256 * 1024
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline and any(pending for _, pending in senders):
            progress = False
            for entry in senders:
                sender, pending = entry
                if not pending:
                    continue
                try:
                    sent = sender.send(pending[:chunk])
                except BlockingIOError:
                    continue
                entry[1] = pending[sent:]
                progress = True
            if not progress:
                time.sleep(0.05)
        time.sleep(0.5)
        grown_mib = (proc_status(broker.pid, "VmRSS") - before) / 1024
        with WireClient(broker.bootstrap) as other:
            started = time.monotonic()
            assert answers(other)
            assert metadata(other, None).brokers
            assert time.monotonic() - started < 2.0
        assert grown_mib < 16 + 8 + 16, f"RSS grew by {grown_mib:.0f} MiB"
        assert "queued.max.request.bytes=16777216 reached" in broker.log()
        for sender, _ in senders:
            sender.close()
        time.sleep(0.3)
        with WireClient(broker.bootstrap) as client:
            big = batch([b"y" * 1000] * 4000)  # a 4 MB request, once the memory is back
            assert produce(client, topic, 0, big).error_code == ErrorCode.none
        assert_clean_log(broker)
