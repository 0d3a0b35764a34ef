"""One consumer-group member in its own process, logging what it sees as JSON lines.

Run by the tests as ``python -m tests.groups.member CONFIG_JSON`` (see harness.py).
The member subscribes with a real client (confluent-kafka, kafka-python, aiokafka or
odradek's own confluent-shaped ``Consumer``), and appends one JSON line per event to
the shared events file (O_APPEND, one write per line, so lines of concurrent members
never interleave):

- ``assign`` / ``revoke`` / ``lost``: the partitions, as the client's rebalance
  listener reports them (incremental for cooperative protocols);
- ``recs``: the records one poll returned, ``[topic, partition, offset, key]``,
  written before any commit that covers them;
- ``commit`` / ``commit_error``: offsets committed synchronously — on revoke, every
  ``commit_interval_s`` and on shutdown (auto-commit is off; kafka-python instead
  uses its own auto-commit, which also commits before every revoke, unlogged);
- ``exit`` after a clean shutdown (SIGTERM: commit, close, leave the group).

Timestamps are ``time.time()``: members run on one host, and a revoke is logged
before the member rejoins, so its line precedes the next owner's assign line.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from typing import Any

STOP = False


def _stop(*_: object) -> None:
    global STOP
    STOP = True


class Log:
    def __init__(self, path: str, name: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.name = name

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "m": self.name, "ev": event, **fields}) + "\n"
        os.write(self.fd, line.encode())


def _key(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


# -- confluent-kafka (librdkafka) and odradek's confluent-shaped Consumer --------------------
def _common_conf(cfg: dict[str, Any]) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": cfg["bootstrap"],
        "group.id": cfg["group"],
        "client.id": cfg["name"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": cfg["session_ms"],
        "heartbeat.interval.ms": cfg["heartbeat_ms"],
        "partition.assignment.strategy": cfg["assignor"],
    }
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    return conf


def run_confluent(cfg: dict[str, Any], log: Log) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf = {
        **_common_conf(cfg),
        "topic.metadata.refresh.interval.ms": cfg["metadata_refresh_ms"],
        "fetch.wait.max.ms": 100,
    }
    if os.environ.get("GROUPS_MEMBER_DEBUG"):  # librdkafka's debug log, on stderr
        conf["debug"] = os.environ["GROUPS_MEMBER_DEBUG"]
    _confluent_shaped(Consumer(conf), KafkaException, cfg, log, close_limit_s=15.0)


def run_odradek(cfg: dict[str, Any], log: Log) -> None:
    from odradek.client import Consumer, KafkaException

    conf = {
        **_common_conf(cfg),
        "metadata.max.age.ms": cfg["metadata_refresh_ms"],
        "fetch.max.wait.ms": 100,
    }
    _confluent_shaped(Consumer(conf), KafkaException, cfg, log)


def _confluent_shaped(
    consumer: Any,
    failure: Any,
    cfg: dict[str, Any],
    log: Log,
    close_limit_s: float | None = None,
) -> None:
    committed: dict[tuple[str, int], int] = {}

    def commit(parts: list[Any]) -> None:
        if not parts:
            return
        positions = consumer.position(parts)
        todo = [
            tp
            for tp in positions
            if tp.offset >= 0 and committed.get((tp.topic, tp.partition)) != tp.offset
        ]
        if not todo:
            return
        try:
            consumer.commit(offsets=todo, asynchronous=False)
        except failure as error:
            log("commit_error", error=str(error))
            return
        for tp in todo:
            committed[(tp.topic, tp.partition)] = tp.offset
        log("commit", offsets=[[tp.topic, tp.partition, tp.offset] for tp in todo])

    def parts_of(parts: list[Any]) -> list[list[Any]]:
        return [[tp.topic, tp.partition] for tp in parts]

    def on_assign(_: Any, parts: list[Any]) -> None:
        log("assign", parts=parts_of(parts))

    def on_revoke(_: Any, parts: list[Any]) -> None:
        commit(parts)
        log("revoke", parts=parts_of(parts))

    def on_lost(_: Any, parts: list[Any]) -> None:
        log("lost", parts=parts_of(parts))

    subscription = [cfg["pattern"]] if cfg.get("pattern") else cfg["topics"]
    consumer.subscribe(subscription, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    last_commit = time.monotonic()
    while not STOP:
        messages = consumer.consume(num_messages=200, timeout=0.1)
        records = [
            [m.topic(), m.partition(), m.offset(), _key(m.key())]
            for m in messages
            if m.error() is None
        ]
        errors = [str(m.error()) for m in messages if m.error() is not None]
        if records:
            log("recs", recs=records)
        if errors:
            log("consume_error", errors=errors)
        if time.monotonic() - last_commit > cfg["commit_interval_s"]:
            last_commit = time.monotonic()
            commit(consumer.assignment())
    commit(consumer.assignment())
    if close_limit_s is None:
        consumer.close()  # revokes (committing again: nothing new) and leaves the group
        return
    # librdkafka's close can hang when the group rebalances while it leaves (its
    # issues #2615/#4884 describe the family); it was seen here 3 times in ~100 runs,
    # always after the broker had processed the member's LeaveGroup. So the close gets
    # a limit: past it the member logs ``close_stuck`` (with librdkafka's stacks in its
    # stderr) and exits, and the group's checks judge what the broker did.
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(close_limit_s)
    if closer.is_alive():
        log("close_stuck", limit_s=close_limit_s)
        faulthandler.dump_traceback(all_threads=True)
        log("exit")
        os._exit(0)  # the stuck close's thread would also hang the interpreter's exit


# -- kafka-python ----------------------------------------------------------------------------
def run_kafka_python(cfg: dict[str, Any], log: Log) -> None:
    """kafka-python 3 runs rebalance listeners on its IO loop, where a blocking commit
    is refused and it offers no public awaitable commit: so the library's own
    auto-commit does the commits — before every revoke, periodically, and on close."""
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    options: dict[str, Any] = {}
    if cfg.get("instance_id"):
        options["group_instance_id"] = cfg["instance_id"]
    consumer = KafkaConsumer(
        bootstrap_servers=cfg["bootstrap"],
        group_id=cfg["group"],
        client_id=cfg["name"],
        enable_auto_commit=True,
        auto_commit_interval_ms=int(cfg["commit_interval_s"] * 1000),
        auto_offset_reset="earliest",
        session_timeout_ms=cfg["session_ms"],
        heartbeat_interval_ms=cfg["heartbeat_ms"],
        partition_assignment_strategy=[assignors[cfg["assignor"]]],
        metadata_max_age_ms=cfg["metadata_refresh_ms"],
        fetch_max_wait_ms=100,
        **options,
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            log("revoke", parts=[[tp.topic, tp.partition] for tp in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            log("assign", parts=[[tp.topic, tp.partition] for tp in assigned])

    if cfg.get("pattern"):
        consumer.subscribe(pattern=cfg["pattern"], listener=Listener())
    else:
        consumer.subscribe(topics=cfg["topics"], listener=Listener())
    while not STOP:
        # Not shorter: kafka-python 3.0.12 can lose a join that completes after a poll
        # timed out mid-rebalance (seen with 100 ms polls and pattern subscriptions:
        # SyncGroup answered, the assignment never applied, heartbeats stopped).
        batches = consumer.poll(timeout_ms=cfg.get("poll_ms", 1000), max_records=200)
        records = [
            [tp.topic, tp.partition, m.offset, _key(m.key)]
            for tp, messages in batches.items()
            for m in messages
        ]
        if records:
            log("recs", recs=records)
    consumer.close(autocommit=True)


# -- aiokafka -------------------------------------------------------------------------------
def run_aiokafka(cfg: dict[str, Any], log: Log) -> None:
    asyncio.run(_aiokafka(cfg, log))


async def _aiokafka(cfg: dict[str, Any], log: Log) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, _stop)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cfg["bootstrap"],
        group_id=cfg["group"],
        client_id=cfg["name"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=cfg["session_ms"],
        heartbeat_interval_ms=cfg["heartbeat_ms"],
        partition_assignment_strategy=(assignors[cfg["assignor"]],),
        metadata_max_age_ms=cfg["metadata_refresh_ms"],
        fetch_max_wait_ms=100,
    )
    committed: dict[Any, int] = {}

    async def commit(parts: Any) -> None:
        todo = {}
        for tp in parts:
            position = await consumer.position(tp)
            if committed.get(tp) != position:
                todo[tp] = OffsetAndMetadata(position, "")
        if not todo:
            return
        try:
            await consumer.commit(todo)
        except KafkaError as error:
            log("commit_error", error=repr(error))
            return
        committed.update({tp: o.offset for tp, o in todo.items()})
        log("commit", offsets=[[tp.topic, tp.partition, o.offset] for tp, o in todo.items()])

    owned: set[Any] = set()  # what the listener last reported (eager: whole assignments)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            await commit(revoked)
            owned.difference_update(revoked)
            log("revoke", parts=[[tp.topic, tp.partition] for tp in revoked])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            owned.clear()
            owned.update(assigned)
            log("assign", parts=[[tp.topic, tp.partition] for tp in assigned])

    if cfg.get("pattern"):
        consumer.subscribe(pattern=cfg["pattern"], listener=Listener())
    else:
        consumer.subscribe(topics=cfg["topics"], listener=Listener())
    await consumer.start()
    try:
        last_commit = time.monotonic()
        while not STOP:
            batches = await consumer.getmany(timeout_ms=100, max_records=200)
            records = [
                [tp.topic, tp.partition, m.offset, _key(m.key)]
                for tp, messages in batches.items()
                for m in messages
            ]
            if records:
                log("recs", recs=records)
            if time.monotonic() - last_commit > cfg["commit_interval_s"]:
                last_commit = time.monotonic()
                await commit(consumer.assignment())
        await commit(consumer.assignment())
    finally:
        await consumer.stop()
    # aiokafka's stop() leaves the group without calling the listener, and before that
    # finishes a rebalance already under way (a member that just left made the group
    # rebalance): on_partitions_assigned may run inside stop(). The member owns what
    # the listener last gave it until stop() has left the group.
    log("revoke", parts=[[tp.topic, tp.partition] for tp in sorted(owned)])


CLIENTS = {
    "confluent": run_confluent,
    "odradek": run_odradek,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    log = Log(cfg["events"], cfg["name"])
    signal.signal(signal.SIGTERM, _stop)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks on demand (debugging)
    if os.environ.get("GROUPS_MEMBER_DEBUG"):  # the client's own debug log, on stderr
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")
    # Whether assign/revoke report changes (cooperative) or whole assignments (eager).
    incremental = (
        cfg["client"] in ("confluent", "odradek") and cfg["assignor"] == "cooperative-sticky"
    )
    log("start", pid=os.getpid(), client=cfg["client"], incremental=incremental)
    CLIENTS[cfg["client"]](cfg, log)
    log("exit")


if __name__ == "__main__":
    main()
