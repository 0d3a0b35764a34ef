"""kcat (Debian's package, librdkafka inside) against ``odradek serve``.

kcat runs as a subprocess with a timeout; ``make test`` installs it. Outputs are
compared exactly: the metadata listing, and consumed records printed through a
``-f`` format string with key, value, lengths, headers, offset, partition and
timestamp. Records cross clients both ways (kcat → confluent-kafka and
confluent-kafka → kcat) so each side is checked against a client that is not itself.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from odradek.server.handlers import supported_versions
from tests.interop.support import (
    BASE_TIMESTAMP,
    CLIENT_TIMEOUT_S,
    FIND_COORDINATOR_KEY,
    codec,
    stored_batches,
)
from tests.support.broker import BrokerProcess

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (`make test` installs Debian's kcat package)"
)
PRODUCE_KEY = 0
FORMAT = "p=%p o=%o k=%k K=%K v=%s S=%S h=%h T=%T\\n"


def _librdkafka_version() -> tuple[int, ...]:
    if KCAT is None:
        return (0,)
    banner = subprocess.run([KCAT, "-V"], capture_output=True, timeout=10, check=False)
    found = re.search(rb"librdkafka (\d+)\.(\d+)\.(\d+)", banner.stdout + banner.stderr)
    return tuple(int(part) for part in found.groups()) if found else (0,)


def kcat_compresses(compression: str) -> bool:
    """Whether kcat's librdkafka will really compress with ``compression`` here.

    librdkafka decides per broker whether a codec may be used, from ApiVersions:
    up to 2.11.0 (Debian's kcat bundles 2.0.2) gzip, snappy and lz4 need the broker
    to advertise Produce v0 (librdkafka#4956; Kafka 4.0 advertises Produce v0-v2 for
    this reason, KAFKA-18659), and lz4 also needs FindCoordinator (the "LZ4" feature).
    Otherwise the batch is silently sent uncompressed. zstd needs Produce v7+/Fetch
    v10+, which odradek has.
    """
    if compression in ("none", "zstd"):
        return True
    versions = supported_versions()
    if _librdkafka_version() <= (2, 11, 0) and versions[PRODUCE_KEY][0] > 0:
        return False
    return compression != "lz4" or FIND_COORDINATOR_KEY in versions


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    assert KCAT is not None
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-X", "socket.timeout.ms=10000", *args],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def consume_formatted(bootstrap: str, topic: str, *extra: str) -> list[str]:
    out = kcat(
        bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-Z", "-f", FORMAT, *extra
    )
    return out.splitlines()


def test_metadata_list(bootstrap: str, topic_name: str) -> None:
    from tests.interop.test_confluent_kafka import create_topic

    create_topic(bootstrap, topic_name, partitions=3)
    port = bootstrap.rsplit(":", 1)[1]
    text = kcat(bootstrap, "-L", "-t", topic_name)
    assert text.splitlines() == [
        f"Metadata for {topic_name} (from broker 1: 127.0.0.1:{port}/1):",
        " 1 brokers:",
        f"  broker 1 at 127.0.0.1:{port} (controller)",
        " 1 topics:",
        f'  topic "{topic_name}" with 3 partitions:',
        "    partition 0, leader 1, replicas: 1, isrs: 1",
        "    partition 1, leader 1, replicas: 1, isrs: 1",
        "    partition 2, leader 1, replicas: 1, isrs: 1",
    ]
    listing = json.loads(kcat(bootstrap, "-L", "-J"))
    assert listing["controllerid"] == 1
    assert listing["brokers"] == [{"id": 1, "name": f"127.0.0.1:{port}"}]
    (topic,) = [t for t in listing["topics"] if t["topic"] == topic_name]
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_keys_and_headers_then_consume_with_format(
    interop_broker: BrokerProcess, bootstrap: str, topic_name: str, compression: str
) -> None:
    # The topic does not exist yet: kcat's metadata request auto-creates it.
    lines = ["k1:v1", "k2:" + "long value " * 30, ":null key", "k4:", "k5:v:with:colons"]
    before = int(time.time() * 1000)
    kcat(
        bootstrap,
        "-P",
        "-t",
        topic_name,
        "-p",
        "0",
        "-K:",
        "-Z",
        "-z",
        compression,
        "-H",
        "h=1",
        "-H",
        "h=2",
        "-H",
        "empty=",
        stdin="\n".join(lines) + "\n",
    )
    after = int(time.time() * 1000)
    out = consume_formatted(bootstrap, topic_name)
    timestamps = [int(line.rsplit("T=", 1)[1]) for line in out]
    assert all(before <= t <= after for t in timestamps), (before, timestamps, after)
    headers = "h=1,h=2,empty="
    long_value = "long value " * 30
    assert [line.rsplit(" T=", 1)[0] for line in out] == [
        f"p=0 o=0 k=k1 K=2 v=v1 S=2 h={headers}",
        f"p=0 o=1 k=k2 K=2 v={long_value} S={len(long_value)} h={headers}",
        f"p=0 o=2 k=NULL K=-1 v=null key S=8 h={headers}",  # -Z: empty key sent as NULL
        f"p=0 o=3 k=k4 K=2 v=NULL S=-1 h={headers}",
        f"p=0 o=4 k=k5 K=2 v=v:with:colons S=13 h={headers}",
    ]
    # What confluent-kafka reads from kcat's batches, byte for byte.
    from tests.interop.test_confluent_kafka import consume

    messages = consume(bootstrap, topic_name, 1, 5)
    assert [(m.key(), m.value()) for m in messages] == [
        (b"k1", b"v1"),
        (b"k2", long_value.encode()),
        (None, b"null key"),
        (b"k4", None),
        (b"k5", b"v:with:colons"),
    ]
    assert {tuple(m.headers()) for m in messages} == {(("h", b"1"), ("h", b"2"), ("empty", b""))}
    stored = {b.compression for b in stored_batches(interop_broker.data_dir, topic_name, 0)}
    if compression == "none" or not kcat_compresses(compression):
        assert stored == {codec("none")}
    elif compression == "zstd" or _librdkafka_version() > (2, 11, 0):
        # librdkafka sends a batch uncompressed when compressing does not make it
        # smaller: when load splits kcat's lines over several batches, a batch of one
        # short record goes out as it is. The batch holding the long value compresses.
        assert codec(compression) in stored
        assert stored <= {codec(compression), codec("none")}
    else:
        # librdkafka <= 2.11 decides gzip/snappy/lz4 per batch from the broker's
        # features and, seen here, sends some or all batches uncompressed even when
        # Produce v0 is advertised; whatever it sends is stored as sent.
        assert stored <= {codec(compression), codec("none")}


def test_consume_what_confluent_kafka_produced(bootstrap: str, topic_name: str) -> None:
    from confluent_kafka import Producer

    from tests.interop.test_confluent_kafka import _common, create_topic

    create_topic(bootstrap, topic_name, partitions=2)
    producer = Producer({**_common(bootstrap), "enable.idempotence": True, "linger.ms": 10})
    for i in range(6):
        producer.produce(
            topic_name,
            key=None if i == 3 else b"key%d" % i,
            value=None if i == 4 else b"value %d" % i,
            partition=i % 2,
            headers=[("x", b"%d" % i), ("x", None), ("y", b"")] if i != 5 else [],
            timestamp=BASE_TIMESTAMP + i,
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    for partition in (0, 1):
        out = consume_formatted(bootstrap, topic_name, "-p", str(partition))
        expected = []
        for offset, i in enumerate(range(partition, 6, 2)):
            key = "NULL K=-1" if i == 3 else f"key{i} K=4"
            value = "NULL S=-1" if i == 4 else f"value {i} S=7"
            headers = f"x={i},x=NULL,y=" if i != 5 else ""
            expected.append(
                f"p={partition} o={offset} k={key} v={value} h={headers} T={BASE_TIMESTAMP + i}"
            )
        assert out == expected


def test_offsets_query_and_relative_start(bootstrap: str, topic_name: str) -> None:
    from confluent_kafka import Producer

    from tests.interop.test_confluent_kafka import _common, create_topic

    create_topic(bootstrap, topic_name)
    producer = Producer({**_common(bootstrap), "linger.ms": 20})
    for i in range(10):
        producer.produce(
            topic_name, value=b"%d" % i, partition=0, timestamp=BASE_TIMESTAMP + i * 10
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    # -Q: offset by timestamp (ListOffsets).
    query = kcat(bootstrap, "-Q", "-t", f"{topic_name}:0:{BASE_TIMESTAMP + 45}")
    assert query.split() == [topic_name, "[0]", "offset", "5"]
    # -o -3: three from the end (ListOffsets latest); -o 8: an absolute offset.
    tail = kcat(bootstrap, "-C", "-t", topic_name, "-o", "-3", "-e", "-q", "-f", "%o:%s\\n")
    assert tail.splitlines() == ["7:7", "8:8", "9:9"]
    exact = kcat(bootstrap, "-C", "-t", topic_name, "-o", "8", "-e", "-q", "-f", "%o:%s\\n")
    assert exact.splitlines() == ["8:8", "9:9"]
    # -c: stop after a count, even with more data.
    counted = kcat(
        bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-c", "2", "-q", "-f", "%o\\n"
    )
    assert counted.splitlines() == ["0", "1"]
