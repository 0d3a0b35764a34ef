"""KIP-890 part 1 against a running broker, at the wire: a transactional write to a
partition that is not in the producer's ongoing transaction — never added, or arriving
after the transaction aborted — is refused with INVALID_TXN_STATE, so it cannot open a
transaction no coordinator knows (which would hold read_committed consumers at the last
stable offset for ever). With ``transaction.partition.verification.enable=false`` the
same late write does hang the partition: the check is what prevents it."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity
from odradek.records.codec import Record, encode_batch
from tests.support.broker import running_broker
from tests.support.wire import WireClient, create_topic

TXN = "verify-me"
TOPIC = "verified"
FIND_COORDINATOR, INIT_PRODUCER_ID, PRODUCE = 10, 22, 0
ADD_PARTITIONS, END_TXN, LIST_OFFSETS = 24, 26, 2
RETRIABLE = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}


def until_ok(call: Any, error_of: Any, deadline_s: float = 30.0) -> Any:
    """``call()`` again while ``error_of(answer)`` names a retriable coordinator error,
    or CONCURRENT_TRANSACTIONS (markers still being written)."""
    deadline = time.monotonic() + deadline_s
    while True:
        answer = call()
        name = error_of(answer)
        if name not in RETRIABLE | {"CONCURRENT_TRANSACTIONS"} or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def init_producer(client: WireClient) -> tuple[int, int]:
    until_ok(
        lambda: client.request(
            request_entity(FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(TXN,))
        ),
        lambda r: r.coordinators[0].error_code.name.upper(),
    )
    answer = until_ok(
        lambda: client.request(
            request_entity(
                INIT_PRODUCER_ID,
                4,
                transactional_id=TXN,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1,
                producer_epoch=-1,
            )
        ),
        lambda r: r.error_code.name.upper(),
    )
    assert answer.error_code == ErrorCode.none, answer
    return int(answer.producer_id), int(answer.producer_epoch)


def add_partition(client: WireClient, producer: tuple[int, int]) -> None:
    topic = request_entity(
        ADD_PARTITIONS, 3, "AddPartitionsToTxnTopic", name=TOPIC, partitions=(0,)
    )
    answer = until_ok(
        lambda: client.request(
            request_entity(
                ADD_PARTITIONS,
                3,
                v3_and_below_transactional_id=TXN,
                v3_and_below_producer_id=producer[0],
                v3_and_below_producer_epoch=producer[1],
                v3_and_below_topics=(topic,),
            )
        ),
        lambda r: (
            r.results_by_topic_v3_and_below[0]
            .results_by_partition[0]
            .partition_error_code.name.upper()
        ),
    )
    result = answer.results_by_topic_v3_and_below[0].results_by_partition[0]
    assert result.partition_error_code == ErrorCode.none, answer


def end_txn(client: WireClient, producer: tuple[int, int], commit: bool) -> None:
    answer = until_ok(
        lambda: client.request(
            request_entity(
                END_TXN,
                3,
                transactional_id=TXN,
                producer_id=producer[0],
                producer_epoch=producer[1],
                committed=commit,
            )
        ),
        lambda r: r.error_code.name.upper(),
    )
    assert answer.error_code == ErrorCode.none, answer


def produce(client: WireClient, producer: tuple[int, int], sequence: int) -> str:
    """One transactional record at ``sequence``; the partition's error name."""
    batch = encode_batch(
        [Record(offset=0, timestamp=int(time.time() * 1000), key=None, value=b"v")],
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=sequence,
        is_transactional=True,
    )
    data = request_entity(PRODUCE, 9, "PartitionProduceData", index=0, records=batch)
    topic = request_entity(PRODUCE, 9, "TopicProduceData", name=TOPIC, partition_data=(data,))
    answer = client.request(
        request_entity(
            PRODUCE,
            9,
            transactional_id=TXN,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(topic,),
        )
    )
    return str(answer.responses[0].partition_responses[0].error_code.name.upper())


def latest(client: WireClient, isolation_level: int) -> int:
    partition = request_entity(
        LIST_OFFSETS,
        7,
        "ListOffsetsPartition",
        partition_index=0,
        current_leader_epoch=-1,
        timestamp=-1,
    )
    topic = request_entity(LIST_OFFSETS, 7, "ListOffsetsTopic", name=TOPIC, partitions=(partition,))
    answer = client.request(
        request_entity(
            LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation_level, topics=(topic,)
        )
    )
    return int(answer.topics[0].partitions[0].offset)


def settle(client: WireClient, wait_s: float = 10.0) -> tuple[int, int]:
    """(read_uncommitted LATEST = the HW, read_committed LATEST = the LSO), once the
    abort's markers had time to land (they are written after EndTxn answers)."""
    deadline = time.monotonic() + wait_s
    while True:
        hw, lso = latest(client, 0), latest(client, 1)
        if hw == lso or time.monotonic() > deadline:
            return hw, lso
        time.sleep(0.1)


def scenario(bootstrap: str) -> tuple[str, str, tuple[int, int]]:
    """A write never added, an aborted transaction, then its late write: the two
    refused-or-not answers and (HW, LSO) at the end."""
    with WireClient(bootstrap) as client:
        assert create_topic(client, TOPIC).error_code == ErrorCode.none
        producer = init_producer(client)
        never_added = produce(client, producer, 0)
        add_partition(client, producer)
        assert produce(client, producer, 0) == "NONE"
        end_txn(client, producer, commit=False)
        settle(client)
        late = produce(client, producer, 1)
        # Nothing is left to land: a hanging partition shows within a few seconds.
        return never_added, late, settle(client, wait_s=3.0)


def test_unverified_transactional_writes_are_refused(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker:
        never_added, late, (hw, lso) = scenario(broker.bootstrap)
    assert never_added == "INVALID_TXN_STATE"
    assert late == "INVALID_TXN_STATE"
    assert lso == hw  # no hanging transaction


def test_without_verification_the_late_write_hangs_the_partition(tmp_path: Path) -> None:
    override = ["--override=transaction.partition.verification.enable=false"]
    with running_broker(tmp_path / "data", override) as broker:
        never_added, late, (hw, lso) = scenario(broker.bootstrap)
    assert (never_added, late) == ("NONE", "NONE")
    assert lso < hw  # the late write opened a transaction nobody will close
