"""A consume-transform-produce worker (confluent-kafka), run as its own process so a
test can SIGKILL it mid-transaction: ``python -m tests.support.ctp_worker BOOTSTRAP
SOURCE SINK GROUP TXN_ID``.

It is the loop seeds/000 describes (消费-处理-生产循环) as a confluent-kafka user
writes it: a read_committed consumer in GROUP, a producer with TXN_ID, and for each
poll of up to 50 records one transaction holding the transformed records and the
consumed offsets (``send_offsets_to_transaction``). A restarted worker with the same
TXN_ID fences its killed predecessor (``init_transactions``), whose open transaction
is aborted, and resumes from the group's committed offsets: the sink holds every
source record exactly once whatever moment the kills land.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

BATCH = 50
TIMEOUT_S = 30.0


def main(bootstrap: str, source: str, sink: str, group: str, txn_id: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    )
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    print("ready", flush=True)
    while True:
        messages = consumer.consume(BATCH, 0.5)
        messages = [m for m in messages if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(sink, key=message.key(), value=b"out:" + message.value())
        positions: dict[int, int] = {}
        for message in messages:
            positions[message.partition()] = message.offset() + 1
        try:
            producer.send_offsets_to_transaction(
                [TopicPartition(source, p, o) for p, o in positions.items()],
                consumer.consumer_group_metadata(),
                TIMEOUT_S,
            )
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TIMEOUT_S)
                # Rewind to the committed offsets: the aborted records are read again.
                committed = consumer.committed(consumer.assignment(), TIMEOUT_S)
                for tp in committed:
                    consumer.seek(
                        tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, 0)
                    )
                continue
            raise


if __name__ == "__main__":
    main(*sys.argv[1:6])
