"""A hostile or broken broker cannot bomb the client with compressed fetch data.

Before, the consumer's fetch decode (and the Spark reader's) decompressed every batch
without a bound: a zstd batch of a few KiB that expands to gigabytes took that much
memory. Now the compressed records of one fetched partition may expand to 64 times
the fetched bytes, and always to 64 MiB (client/fetch_decode.py ``ExpansionBudget``);
past that the consumer reports KafkaError MESSAGE_TOO_LARGE naming the partition and
batch, and memory stays near the bound.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.client._core.errors import KafkaError
from odradek.client.consumer.fetch_decode import (
    FETCH_EXPANSION,
    FETCH_EXPANSION_FLOOR,
    FetchExpansionError,
    decode_fetch,
)
from odradek.records.batch import GZIP, LZ4, ZSTD
from odradek.records.codec import encode_batch, new_records
from odradek.records.compression import compress
from odradek.spark.read_arrow import ArrowDecoder, scan
from tests.server.test_protocol import make_topic, now_ms, produce
from tests.support.bombs import bomb, raw_batch
from tests.support.broker import running_broker
from tests.support.wire import WireClient

MiB = 1 << 20
BOMBS = [(GZIP, 512 * MiB), (LZ4, 512 * MiB), (ZSTD, 1024 * MiB)]  # snappy cannot: 22:1 at most


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


@pytest.mark.parametrize(("codec", "size"), BOMBS, ids=["gzip", "lz4", "zstd"])
def test_a_bomb_is_message_too_large_and_memory_stays_near_the_bound(codec: int, size: int) -> None:
    data = raw_batch(bomb(codec, size), codec)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    before = _status("VmRSS")
    with pytest.raises(KafkaError) as caught:
        decode_fetch("t", 0, data, 0, None)
    growth = _status("VmHWM") - before
    bound = max(FETCH_EXPANSION * len(data), FETCH_EXPANSION_FLOOR)  # 64 MiB, lz4's 137
    assert growth < bound * 5 // 4 + 16 * MiB, f"peak RSS grew {growth >> 20} MiB"
    assert caught.value.code() == ErrorCode.message_too_large
    assert not caught.value.retriable()
    assert str(caught.value).startswith("MESSAGE_TOO_LARGE: t-0: ")
    assert f"batch at offset 0: its records exceed the {bound} bytes" in str(caught.value)


def test_a_record_count_past_the_budget_is_refused_before_decompressing() -> None:
    data = raw_batch(compress(ZSTD, b"x"), ZSTD, record_count=2_000_000)
    with pytest.raises(KafkaError, match="its 2000000 records exceed"):
        decode_fetch("t", 3, data, 0, None)


def zero_value_batch(base_offset: int, size: int, codec: int = ZSTD) -> bytes:
    records = new_records([(None, bytes(size))], base_offset=base_offset, timestamp=1)
    return encode_batch(records, base_offset=base_offset, compression=codec)


def test_highly_compressible_records_within_the_floor_decode() -> None:
    """40 MiB of zeros in one record is ~1 KiB of zstd: far past 64:1, within 64 MiB."""
    data = zero_value_batch(0, 40 * MiB)
    assert len(data) * 64 < 40 * MiB
    fetched = decode_fetch("t", 0, data, 0, None)
    (record,) = fetched.take(1, tuple)
    assert len(record[6]) == 40 * MiB


def test_the_budget_is_shared_by_the_batches_of_a_partition() -> None:
    data = b"".join(zero_value_batch(offset, 30 * MiB) for offset in range(3))
    with pytest.raises(KafkaError, match="t-0: zstd batch at offset 2: its records exceed"):
        decode_fetch("t", 0, data, 0, None)
    # The budget is per fetched partition: each fetch of two starts afresh.
    two = b"".join(zero_value_batch(offset, 30 * MiB) for offset in range(2))
    assert len(decode_fetch("t", 0, two, 0, None)) == 2


def test_spark_reader_refuses_a_bomb() -> None:
    data = raw_batch(bomb(ZSTD, 512 * MiB), ZSTD)
    found = scan(data, 0, None, where="t-0")
    with pytest.raises(FetchExpansionError, match="t-0: zstd batch at offset 0"):
        ArrowDecoder("t", 0, include_headers=False).decode(data, found, 0, 1)


def test_spark_reader_decodes_within_the_floor() -> None:
    data = zero_value_batch(0, 20 * MiB)
    found = scan(data, 0, None, where="t-0")
    batch = ArrowDecoder("t", 0, include_headers=False).decode(data, found, 0, 1)
    assert batch is not None and batch.num_rows == 1
    assert len(batch.column("value")[0].as_py()) == 20 * MiB


# End to end: the bomb stored by a real broker (a ``producer`` topic keeps batches as
# they came), the odradek consumer in a child whose address space is limited.
CONSUMER = textwrap.dedent(
    """
    import resource, sys
    limit = 2 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from odradek.client.consumer.blocking import Consumer
    from odradek.client._core.types import KafkaException, TopicPartition
    bootstrap, topic = sys.argv[1:3]
    with Consumer({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 100}) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            for _ in range(100):
                consumer.poll(0.2)
            print("no error")
        except KafkaException as error:
            print("error:", error.args[0].name(), error.args[0].str())
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
    print("peak RSS MiB:", int(hwm) // 1024)
    """
)


def test_consumer_reports_a_bomb_from_a_real_broker(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker:
        with WireClient(broker.bootstrap) as client:
            topic = make_topic(client, "bomb")
            data = raw_batch(bomb(ZSTD, 1024 * MiB), ZSTD, timestamp=now_ms())
            assert produce(client, topic, 0, data).error_code == ErrorCode.none
        result = subprocess.run(
            [sys.executable, "-c", CONSUMER, broker.bootstrap, topic],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"error: MESSAGE_TOO_LARGE {topic}-0: zstd batch at offset 0")
    peak = int(lines[1].split()[-1])
    assert peak < 400, result.stdout  # the bound is 64 MiB; a Python client is ~100 MiB
