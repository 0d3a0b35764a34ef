"""``odradek transactions`` and ``dump-log`` against a real broker.

A confluent-kafka transactional producer writes records and never commits: a hanging
transaction that holds a read_committed consumer at its first offset. ``list``,
``describe`` and ``describe-producers`` show it; ``abort --start-offset`` ends it with
an ABORT marker, after which the last stable offset moves past it and read_committed
reads go on; dump-log shows the transaction's state in ``__transaction_state`` and the
marker in the partition. The idempotent (non-transactional) test needs no coordinator.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cli.main import main
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient, create_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
TIMEOUT_S = 30.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data") as process:
        yield process


def tool(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *argv: str) -> list[list[str]]:
    """Run ``odradek transactions ... argv`` (status 0); its table, cells stripped."""
    status = main(["transactions", "--bootstrap-server", broker.bootstrap, *argv])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return [[cell.strip() for cell in line.split("\t")] for line in captured.out.splitlines()]


def failing(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status = main(["transactions", "--bootstrap-server", broker.bootstrap, *argv])
    captured = capsys.readouterr()
    assert status == 1 and captured.out == ""
    (line,) = captured.err.splitlines()
    return line


def dump(capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    assert main(["dump-log", "--print-data-log", *(str(p) for p in paths)]) == 0
    return capsys.readouterr().out


def watermarks(broker: BrokerProcess, topic: str, isolation: str) -> tuple[int, int]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "w", "isolation.level": isolation}
    )
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=TIMEOUT_S, cached=False
        )
        return int(low), int(high)
    finally:
        consumer.close()


def read_committed(broker: BrokerProcess, topic: str, quiet_s: float = 2.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "r",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            values.append(message.value())
            last = time.monotonic()
        return values
    finally:
        consumer.close()


def wait_until(check: object, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_idempotent_producer_and_a_marker_by_producer_id(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "plain", partitions=2)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True}
    )
    for n in range(3):
        producer.produce("plain", value=b"v%d" % n, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    del producer
    listed = tool(broker, capsys, "list")
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]

    table = tool(broker, capsys, "describe-producers", "--topic", "plain", "--partition", "0")
    assert table[0] == [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    ((pid, epoch, coordinator_epoch, last_sequence, last_timestamp, start),) = table[1:]
    assert int(pid) >= 0 and epoch == "0" and coordinator_epoch == "None"
    assert last_sequence == "2" and int(last_timestamp) > 0 and start == "None"
    assert tool(broker, capsys, "describe-producers", "--topic", "plain", "--partition", "1") == [
        table[0]
    ]
    assert tool(
        broker, capsys, "describe-producers", "--topic", "plain", "--partition", "0",
        "--broker-id", "1",
    ) == table  # fmt: skip

    line = failing(broker, capsys, "abort", "--topic", "plain", "--partition", "0",
                   "--start-offset", "0")  # fmt: skip
    assert line == "transactions: no open transaction starts at offset 0 of plain-0"
    assert failing(broker, capsys, "describe-producers", "--topic", "nope", "--partition", "0") == (
        "transactions: topic 'nope' does not exist"
    )
    assert failing(
        broker, capsys, "describe-producers", "--topic", "plain", "--partition", "2"
    ) == ("transactions: topic 'plain' has no partition 2")

    # an ABORT marker for a producer with no open transaction is written all the same
    assert tool(
        broker, capsys, "abort", "--topic", "plain", "--partition", "1", "--producer-id", "77",
        "--producer-epoch", "0", "--coordinator-epoch", "3",
    ) == []  # fmt: skip
    out = dump(capsys, *sorted((broker.data_dir / "plain-1").glob("*.log")))
    assert "producerId: 77 producerEpoch: 0" in out
    assert "isTransactional: true isControl: true" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in out


def test_abort_a_hanging_transaction(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "orders")
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "hanging-app",
            "transaction.timeout.ms": 600_000,  # the coordinator must not end it first
        }
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for n in range(5):
        producer.produce("orders", value=b"open-%d" % n, partition=0)
    assert producer.flush(TIMEOUT_S) == 0  # ... and never committed

    listed = tool(broker, capsys, "list")
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = [row for row in listed[1:] if row[0] == "hanging-app"]
    assert len(rows) == 1 and rows[0][1] == "1" and rows[0][3] == "Ongoing", listed
    producer_id = rows[0][2]
    assert tool(broker, capsys, "list", "--duration-filter", "0")[1:] == listed[1:]
    assert tool(broker, capsys, "list", "--duration-filter", "3600000") == listed[:1]

    described = tool(broker, capsys, "describe", "--transactional-id", "hanging-app")
    assert described[0] == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    ((coordinator, txn_id, pid, epoch, state, timeout, start, duration, partitions),) = described[
        1:
    ]
    assert (coordinator, txn_id, pid, state) == ("1", "hanging-app", producer_id, "Ongoing")
    assert timeout == "600000" and int(start) > 0 and int(duration) >= 0
    assert partitions == "orders-0"
    idle = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "idle-app"}
    )
    idle.init_transactions(TIMEOUT_S)  # an id with no transaction: its start time is -1
    ((_, txn_id, _, _, state, _, start, duration, partitions),) = tool(
        broker, capsys, "describe", "--transactional-id", "idle-app"
    )[1:]
    assert (txn_id, state, start, duration, partitions) == ("idle-app", "Empty", "None", "None", "")
    del idle
    unknown = failing(broker, capsys, "describe", "--transactional-id", "never-used")
    assert unknown.startswith("transactions: cannot describe 'never-used': ")

    producers = tool(broker, capsys, "describe-producers", "--topic", "orders", "--partition", "0")
    (row,) = producers[1:]
    assert row[0] == producer_id and row[1] == epoch and row[5] == "0"

    # the open transaction holds read_committed at its first offset
    assert watermarks(broker, "orders", "read_uncommitted") == (0, 5)
    assert watermarks(broker, "orders", "read_committed") == (0, 0)

    assert (
        tool(
            broker, capsys, "abort", "--topic", "orders", "--partition", "0", "--start-offset", "0"
        )
        == []
    )
    wait_until(
        lambda: watermarks(broker, "orders", "read_committed") == (0, 6),
        "the last stable offset to pass the marker",
    )
    producers = tool(broker, capsys, "describe-producers", "--topic", "orders", "--partition", "0")
    assert [r[5] for r in producers[1:]] == ["None"]
    again = failing(broker, capsys, "abort", "--topic", "orders", "--partition", "0",
                    "--start-offset", "0")  # fmt: skip
    assert again == "transactions: no open transaction starts at offset 0 of orders-0"

    plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("orders", value=b"after", partition=0)
    assert plain.flush(TIMEOUT_S) == 0
    assert read_committed(broker, "orders") == [b"after"]

    out = dump(capsys, *sorted((broker.data_dir / "orders-0").glob("*.log")))
    assert "endTxnMarker: ABORT coordinatorEpoch: " in out
    logs = [
        log
        for directory in broker.data_dir.glob("__transaction_state-*")
        for log in directory.glob("*.log")
        if log.stat().st_size > 0
    ]
    assert logs, "nothing in __transaction_state"
    state_dump = dump(capsys, *logs)
    assert (
        f"key: transaction_metadata::transactionalId=hanging-app payload: "
        f"producerId:{producer_id},producerEpoch:{epoch},state=Ongoing,partitions=[orders-0],"
    ) in state_dump
    assert "txnTimeoutMs=600000" in state_dump
    del producer  # its coordinator still thinks the transaction open; the broker stops now
