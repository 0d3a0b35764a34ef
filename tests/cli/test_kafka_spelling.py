"""Issue 15 section 2: the command line a Kafka user types (aliases, quiet exits,
one-line errors). Each test reproduces a reported failure."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from odradek.cli.main import main
from odradek.cli.tools import kafka_action
from odradek.client._core.cluster import parse_bootstrap
from odradek.client.admin.types import ConfigResource, ConsumerGroupState, ResourceType
from tests.support.broker import BrokerProcess, running_broker


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("spelling") / "data") as process:
        yield process


def odradek(
    *args: str, stdin: bytes = b"", timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", *args], input=stdin, capture_output=True, timeout=timeout
    )
    assert b"Traceback" not in done.stderr
    return done


def test_kafka_action_flags_stand_for_subcommands() -> None:
    assert kafka_action(["topics", "--create", "--topic", "t"]) == [
        "topics",
        "create",
        "--topic",
        "t",
    ]
    assert kafka_action(["groups", "-b", "h", "--describe"]) == ["groups", "describe", "-b", "h"]
    assert kafka_action(["topics", "list", "--describe"]) == ["topics", "list", "--describe"]
    assert kafka_action(["configs", "alter", "--delete", "k"]) == [
        "configs",
        "alter",
        "--delete",
        "k",
    ]


def test_bootstrap_without_a_port_is_9092_as_in_librdkafka() -> None:
    assert parse_bootstrap("localhost") == [("localhost", 9092)]
    assert parse_bootstrap("[::1],h:1") == [("::1", 9092), ("h", 1)]


def test_client_types_print_names_not_reprs_or_numbers() -> None:
    assert str(ConsumerGroupState.EMPTY) == "ConsumerGroupState.EMPTY"
    assert str(ConfigResource(ResourceType.TOPIC, "orders")) == "topic orders"


def test_dump_log_accepts_files(
    tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dump-log", "--files", "/nonexistent/a.log,/nonexistent/b.log"]) == 1
    err = capsys.readouterr().err
    assert "a.log" in err and "b.log" in err
    assert main(["dump-log"]) == 2


def test_serve_names_the_address_in_use(tmp_path: pytest.TempPathFactory) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = odradek(
            "serve", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{port}", timeout=60
        )
    last = done.stderr.decode().strip().splitlines()[-1]
    assert done.returncode == 1
    assert f"127.0.0.1:{port}" in last and "Errno" not in last


def test_kafka_spelled_topic_and_group_commands_and_a_clean_group_consume(
    kafka: BrokerProcess,
) -> None:
    b = ["--bootstrap-server", kafka.bootstrap]
    topic = f"k-{uuid.uuid4().hex[:8]}"
    created = odradek(
        "topics",
        "--create",
        "--topic",
        topic,
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=100000",
        *b,
    )
    assert created.returncode == 0, created.stderr
    assert topic in odradek("topics", "--list", *b).stdout.decode().split()
    lines = b"".join(b"%d\n" % i for i in range(1004))
    assert odradek("produce", "--topic", topic, *b, stdin=lines).returncode == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    done = odradek(
        "consume",
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--timeout-ms",
        "1000",
        *b,
    )
    assert done.returncode == 0, done.stderr  # was 1: _NO_OFFSET at the final commit
    assert done.stderr == b""
    assert len(done.stdout.splitlines()) == 1004  # the join is not idle time
    assert time.monotonic() - start < 30
    described = odradek("groups", "--describe", "--all-groups", *b)
    assert described.returncode == 0 and group in described.stdout.decode()
    described = odradek("groups", "describe", "--group", group, *b)
    assert described.returncode == 0 and topic in described.stdout.decode()


def test_consume_out_of_range_offset_says_so(kafka: BrokerProcess) -> None:
    b = ["-b", kafka.bootstrap]
    topic = f"r-{uuid.uuid4().hex[:8]}"
    assert odradek("topics", "create", topic, *b).returncode == 0
    assert odradek("produce", topic, *b, stdin=b"one\n").returncode == 0
    done = odradek("consume", topic, "--offset", "10", "-p", "0", "--timeout-ms", "500", *b)
    assert done.returncode == 0
    assert "offset 10 is out of range" in done.stderr.decode()
    assert "auto.offset.reset=latest" in done.stderr.decode()


def test_consume_into_head_and_ctrl_c_are_quiet(kafka: BrokerProcess) -> None:
    b = ["-b", kafka.bootstrap]
    topic = f"h-{uuid.uuid4().hex[:8]}"
    assert odradek("topics", "create", topic, *b).returncode == 0
    lines = b"".join(b"%d\n" % i for i in range(20000))
    assert odradek("produce", topic, *b, stdin=lines).returncode == 0
    pipeline = subprocess.run(
        f"{sys.executable} -m odradek consume {topic} --from-beginning -b {kafka.bootstrap}"
        " 2>err.txt | head -1; cat err.txt",
        shell=True,
        capture_output=True,
        timeout=60,
        cwd="/tmp",
    )
    assert b"Broken pipe" not in pipeline.stdout and b"Error" not in pipeline.stdout
    consumer = subprocess.Popen(
        [sys.executable, "-m", "odradek", "consume", topic, "-g", "cc", "--from-beginning", *b],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: __import__("signal").signal(
            __import__("signal").SIGINT, __import__("signal").SIG_DFL
        ),
    )
    time.sleep(6)
    consumer.send_signal(__import__("signal").SIGINT)
    _, err = consumer.communicate(timeout=30)
    assert b"Aborted" not in err and b"Traceback" not in err
    assert consumer.returncode == 130


def test_configs_describe_hints_at_all(kafka: BrokerProcess) -> None:
    done = odradek("configs", "describe", "1", "-t", "broker", "-b", kafka.bootstrap)
    assert done.returncode == 0
    assert "add --all" in done.stderr.decode()
    missing = odradek("configs", "describe", "no-such-topic", "-b", kafka.bootstrap)
    assert missing.returncode == 1
    assert "ConfigResource" not in missing.stderr.decode()


def test_an_ssl_listener_refuses_to_start_with_one_line(tmp_path: pytest.TempPathFactory) -> None:
    done = odradek(
        "serve", "--data-dir", str(tmp_path), "--override", "listeners=SSL://127.0.0.1:0"
    )
    assert done.returncode != 0 and b"odradek ready" not in done.stdout
    assert done.stderr.decode().strip().splitlines()[-1].startswith("odradek serve:")
    assert "SSL" in done.stderr.decode()
