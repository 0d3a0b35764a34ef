"""Starting without a broker, and exiting without close(), as confluent-kafka programs do.

- ``Producer``/``Consumer`` construct with no broker up (nothing raised), report
  librdkafka's ``_TRANSPORT`` through ``error_cb`` from poll()/flush(), and records
  fail with ``_MSG_TIMED_OUT`` after ``message.timeout.ms`` — the same codes the real
  confluent-kafka reports in the same situation.
- A program that makes several Producers (sending, or never reaching a broker) and
  exits without close() prints nothing: the subprocess's stderr is empty.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from odradek.client import Consumer, KafkaError, Producer
from tests.support.broker import running_broker

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def producer_outcome(make: Any, bootstrap: str) -> tuple[float, set[int], list[Any]]:
    errors: list[Any] = []
    reports: list[Any] = []
    started = time.monotonic()
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "message.timeout.ms": 1_000,
        "error_cb": errors.append,
    }
    if make is confluent_kafka.Producer:
        config["log_level"] = 0
    producer = make(config)
    built = time.monotonic() - started
    producer.produce("nowhere", b"v", key=b"k", on_delivery=lambda e, m: reports.append(e))
    producer.produce("nowhere", b"w", on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(15) == 0
    return built, {e.code() for e in errors}, [e.code() for e in reports]


@pytest.mark.parametrize("make", [confluent_kafka.Producer, Producer], ids=["confluent", "ours"])
def test_producer_without_broker_reports_transport_then_msg_timed_out(make: Any) -> None:
    built, errors, reports = producer_outcome(make, closed_port())
    assert built < 1.0  # construction does not wait for a broker
    assert KafkaError._TRANSPORT in errors
    assert reports == [KafkaError._MSG_TIMED_OUT] * 2


@pytest.mark.parametrize("make", [confluent_kafka.Consumer, Consumer], ids=["confluent", "ours"])
def test_consumer_without_broker_reports_transport(make: Any) -> None:
    errors: list[Any] = []
    config: dict[str, Any] = {
        "bootstrap.servers": closed_port(),
        "group.id": "nobody",
        "error_cb": errors.append,
    }
    if make is confluent_kafka.Consumer:
        config["log_level"] = 0
    consumer = make(config)
    consumer.subscribe(["nowhere"])
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        assert consumer.poll(0.2) is None
    consumer.close()
    assert KafkaError._TRANSPORT in {e.code() for e in errors}


UNCLOSED = textwrap.dedent(
    """
    import gc, sys
    from odradek.client import Producer

    def work(bootstrap):
        for _ in range(3):
            producer = Producer({"bootstrap.servers": bootstrap})
            producer.produce("exit-noise", b"v", key=b"k")
            producer.flush(10)

    work(sys.argv[1])
    gc.collect()  # the dropped producers are collected, never closed
    kept = [Producer({"bootstrap.servers": sys.argv[1]}) for _ in range(2)]
    for producer in kept:
        producer.produce("exit-noise", b"v")
    lost = [Producer({"bootstrap.servers": sys.argv[2]}) for _ in range(2)]
    for producer in lost:
        producer.produce("exit-noise", b"v")
    """
)


def test_exit_without_close_is_silent(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data") as broker:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", UNCLOSED, broker.bootstrap, closed_port()],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_loop_thread_stop_ends_its_tasks_first() -> None:
    """What keeps exit silent: a stopped loop leaves no pending task to be destroyed
    (asyncio prints "Task was destroyed but it is pending!" for each)."""
    import asyncio

    from odradek.client._core.loop_thread import LoopThread

    thread = LoopThread("test-loop")

    async def start() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(asyncio.sleep(3600))

    forever = thread.run(start())
    thread.stop()
    assert forever.cancelled()
    assert thread.loop.is_closed()


def test_a_dropped_client_is_freed_at_once() -> None:
    """The error_cb hooks hold their client weakly: dropping the last reference frees
    a Producer (stopping its loop) without waiting for the garbage collector."""
    import weakref

    producer = Producer({"bootstrap.servers": closed_port()})
    consumer = Consumer({"bootstrap.servers": closed_port(), "error_cb": print})
    refs = weakref.ref(producer), weakref.ref(consumer)
    loop = producer._thread.loop
    del producer, consumer
    assert [ref() for ref in refs] == [None, None]
    assert loop.is_closed()


@pytest.mark.parametrize("make", [confluent_kafka.Producer, Producer], ids=["confluent", "ours"])
def test_broker_gone_after_metadata_records_fail_with_msg_timed_out(
    tmp_path: Path, make: Any
) -> None:
    """The topic is known, then the broker dies: queued records expire after
    message.timeout.ms with _MSG_TIMED_OUT, the code confluent-kafka reports."""
    reports: list[Any] = []
    with running_broker(tmp_path / "data") as broker:
        config: dict[str, Any] = {
            "bootstrap.servers": broker.bootstrap,
            "message.timeout.ms": 1_500,
            "error_cb": lambda error: None,
        }
        if make is confluent_kafka.Producer:
            config["log_level"] = 0
        producer = make(config)
        producer.produce("gone", b"first")  # auto-created; its metadata now known
        assert producer.flush(15) == 0
        broker.kill()
        producer.produce("gone", b"lost", on_delivery=lambda e, m: reports.append(e))
        assert producer.flush(15) == 0
    assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
