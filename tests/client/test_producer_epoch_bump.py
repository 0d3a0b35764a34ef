"""The idempotent producer's recovery paths (KIP-360 epoch bump), through a faulty proxy.

The broker advertises a proxy's address, so every client connection goes through it.
The proxy relays one request at a time and answers chosen Produce requests itself,
without forwarding them, so the broker never sees that batch:

- OUT_OF_ORDER_SEQUENCE_NUMBER for the first unacknowledged batch: that batch is lost
  (its records are reported failed, as the Java client does); the producer bumps its
  epoch (InitProducerId with its current id and epoch), renumbers from 0 and delivers
  every later record exactly once.
- a non-retriable error: that batch fails and its records are reported failed; its
  sequences are now a gap the broker would refuse, so the producer bumps the epoch
  and every later record is still delivered, exactly once.

The log on disk is then read back: each record once, in order, and the batches after
the failure carry the new epoch (or a new producer id, which is what a Kafka broker
gives a producer without transactional.id) with sequences from 0.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AdminClient, NewTopic, Producer
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import decode_request, encode_response, peek_header
from odradek.records.batch import BatchHeader, iter_batches
from odradek.records.codec import iter_records
from tests.support.broker import BrokerProcess
from tests.support.wire import read_frame

TIMEOUT_S = 30.0
PRODUCE_KEY = 0
INIT_PRODUCER_ID_KEY = 22
_SIZE = struct.Struct(">i")


class FaultyProxy:
    """Relays Kafka frames one request at a time; ``fault`` picks Produce requests to
    answer locally with an error (the broker never sees them)."""

    def __init__(self, fault: Callable[[int], str | None]) -> None:
        self.fault = fault  # (produce request number, from 1) -> error name or None
        self.upstream: tuple[str, int] | None = None
        self.data_dir = Path()  # the data dir of the broker behind the proxy
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.produce_requests = 0
        self.init_producer_ids: list[tuple[int, int]] = []  # (producer id, epoch) sent
        self.injected: list[str] = []
        self.injected_records = 0  # records in the requests answered with an error
        self._lock = threading.Lock()
        self._closing = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing = True
        for sock in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        assert self.upstream is not None
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        self._sockets += [client, server]
        try:
            while True:
                request = read_frame(client)
                reply = self._local_reply(request)
                if reply is None:
                    server.sendall(_SIZE.pack(len(request)) + request)
                    reply = read_frame(server)
                client.sendall(_SIZE.pack(len(reply)) + reply)
        except OSError:  # ConnectionError included: either side closed
            return
        finally:
            client.close()
            server.close()

    def _local_reply(self, frame: bytes) -> bytes | None:
        api_key, version, correlation_id = peek_header(frame)
        if api_key == INIT_PRODUCER_ID_KEY:
            body = decode_request(frame, {api_key: (version, version)}).body
            with self._lock:
                self.init_producer_ids.append((body.producer_id, body.producer_epoch))
            return None
        if api_key != PRODUCE_KEY:
            return None
        with self._lock:
            self.produce_requests += 1
            error = self.fault(self.produce_requests)
            if error is not None:
                self.injected.append(error)
        if error is None:
            return None
        body = decode_request(frame, {api_key: (version, version)}).body
        assert body.acks == -1
        self.injected_records += sum(
            header.record_count
            for topic in body.topic_data
            for data in topic.partition_data
            for header in iter_batches(data.records or b"")
        )
        module = response_module(PRODUCE_KEY, version)
        topics = tuple(
            make(
                module.TopicProduceResponse,
                name=topic.name,
                partition_responses=tuple(
                    make(
                        module.PartitionProduceResponse,
                        index=data.index,
                        error_code=error_code(error),
                        base_offset=-1,
                        log_append_time=None,
                        log_start_offset=-1,
                        record_errors=(),
                        error_message="injected by the test proxy",
                    )
                    for data in topic.partition_data
                ),
            )
            for topic in body.topic_data
        )
        response = make(
            module.ProduceResponse, responses=topics, throttle_time=datetime.timedelta(0)
        )
        return encode_response(PRODUCE_KEY, version, correlation_id, response)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Callable[[Callable[[int], str | None]], FaultyProxy]]:
    started: list[tuple[FaultyProxy, BrokerProcess]] = []

    def start(fault: Callable[[int], str | None]) -> FaultyProxy:
        proxy = FaultyProxy(fault)
        broker = BrokerProcess(
            tmp_path / "data",
            ["--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}"],
        )
        started.append((proxy, broker))
        broker.start()
        proxy.upstream = ("127.0.0.1", broker.port)
        proxy.data_dir = broker.data_dir
        return proxy

    yield start
    for proxy, broker in started:
        proxy.close()
        try:
            broker.stop()
        finally:
            broker.kill()


def _create_topic(bootstrap: str) -> str:
    name = f"bump-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT_S)
    return name


def _produce(bootstrap: str, topic: str, count: int) -> tuple[list[int], dict[int, str]]:
    """Values 0..count-1, one batch per few records; (delivered values, failed values)."""
    delivered: list[int] = []
    failed: dict[int, str] = {}

    def report(error: Any, message: Any) -> None:
        value = int(message.value())
        if error is None:
            delivered.append(value)
        else:
            failed[value] = str(error)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "batch.size": 200,  # a handful of records per batch: many requests
            "linger.ms": 0,
            "retry.backoff.ms": 10,
        }
    )
    for i in range(count):
        producer.produce(topic, value=b"%06d" % i, partition=0, on_delivery=report)
        if i % 25 == 24:
            producer.poll(0)
    assert producer.close(TIMEOUT_S) == 0
    return delivered, failed


def _stored(data_dir: Path, topic: str) -> tuple[list[BatchHeader], list[int]]:
    headers: list[BatchHeader] = []
    values: list[int] = []
    for segment in sorted((data_dir / f"{topic}-0").glob("*.log")):
        data = segment.read_bytes()
        for header in iter_batches(data):
            headers.append(header)
            values.extend(int(r.value or b"-1") for r in iter_records(data, header))
    return headers, values


def _generations(headers: list[BatchHeader]) -> list[tuple[int, int]]:
    """The (producer id, epoch) pairs in log order; each one's sequences run from 0
    without gaps. After a bump the broker may keep the id with a higher epoch, or (Kafka,
    for a producer without transactional.id) hand out a new id at epoch 0."""
    generations: list[tuple[int, int]] = []
    expected: dict[tuple[int, int], int] = {}
    for header in headers:
        generation = (header.producer_id, header.producer_epoch)
        if not generations or generations[-1] != generation:
            assert generation not in generations, "a generation never comes back"
            generations.append(generation)
        assert header.base_sequence == expected.get(generation, 0)
        expected[generation] = header.last_sequence + 1
    for (old_id, old_epoch), (new_id, new_epoch) in itertools.pairwise(generations):
        assert new_id != old_id or new_epoch > old_epoch
    return generations


def test_out_of_order_sequence_fails_that_batch_and_bumps_the_epoch(
    proxied: Callable[[Callable[[int], str | None]], FaultyProxy],
) -> None:
    """As in the Java client: OUT_OF_ORDER for the first unacknowledged batch means it
    is lost (its records are reported failed); the batches behind it, which the broker
    refuses because of the gap, go again under a new epoch and are delivered."""
    proxy = proxied(lambda n: "OUT_OF_ORDER_SEQUENCE_NUMBER" if n == 4 else None)
    topic = _create_topic(f"127.0.0.1:{proxy.port}")
    delivered, failed = _produce(f"127.0.0.1:{proxy.port}", topic, 600)
    assert proxy.injected == ["OUT_OF_ORDER_SEQUENCE_NUMBER"]
    assert failed and all("OUT_OF_ORDER_SEQUENCE_NUMBER" in text for text in failed.values())
    lost = sorted(failed)
    assert lost == list(range(lost[0], lost[-1] + 1))
    assert len(lost) == proxy.injected_records, "only the lost batch's records fail"
    assert sorted(delivered + lost) == list(range(600))

    # KIP-360: the second InitProducerId names the current id and epoch.
    assert len(proxy.init_producer_ids) == 2
    assert proxy.init_producer_ids[0] == (-1, -1)
    headers, values = _stored(proxy.data_dir, topic)
    generations = _generations(headers)
    assert len(generations) == 2
    assert proxy.init_producer_ids[1] == generations[0]
    assert values == sorted(delivered)  # each delivered record once, in order


def test_a_batch_failing_for_good_leaves_no_gap_for_later_records(
    proxied: Callable[[Callable[[int], str | None]], FaultyProxy],
) -> None:
    proxy = proxied(lambda n: "INVALID_RECORD" if n == 3 else None)
    topic = _create_topic(f"127.0.0.1:{proxy.port}")
    delivered, failed = _produce(f"127.0.0.1:{proxy.port}", topic, 600)
    assert proxy.injected == ["INVALID_RECORD"]
    assert len(failed) == proxy.injected_records, "only the rejected batch's records fail"
    assert all("INVALID_RECORD" in text or "invalid" in text.lower() for text in failed.values())
    assert sorted(delivered + list(failed)) == list(range(600))

    headers, values = _stored(proxy.data_dir, topic)
    assert len(_generations(headers)) == 2  # the gap forced a new epoch
    assert values == sorted(delivered)  # every delivered record once, in order
    assert not set(values) & set(failed)
