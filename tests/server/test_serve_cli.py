"""``odradek serve`` as a command: bad arguments, config files, signals, locked log dirs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.storage.meta_properties import random_uuid, read_meta_properties
from tests.server.test_protocol import (
    assert_clean_log,
    assert_serves,
    fetch_request,
    make_topic,
    metadata,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

REPO = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """With another cwd, ``-m odradek`` would import whatever odradek the venv has
    installed; the code under test is this checkout's."""
    paths = (str(REPO), os.environ.get("PYTHONPATH", ""))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def serve(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``odradek serve`` expecting it to exit by itself (bad input)."""
    return subprocess.run(
        [sys.executable, "-m", "odradek", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=child_env(),
    )


def message_lines(stderr: str) -> list[str]:
    """The error lines (argparse also prints its usage lines first)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(("usage:", " "))]


def start_with_args(data_dir: Path, args: list[str], cwd: Path | None = None) -> BrokerProcess:
    """A BrokerProcess started with exactly ``args`` (no --data-dir/--listen added)."""
    process = BrokerProcess(data_dir)
    log = open(process.log_path, "ab")  # noqa: SIM115 - closed below, the child keeps its copy
    process.process = subprocess.Popen(
        [sys.executable, "-m", "odradek", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=cwd,
        env=child_env(),
    )
    log.close()
    line = process._read_ready_line()
    process.bootstrap = line.split()[2].split("://", 1)[1]
    process.port = int(process.bootstrap.rsplit(":", 1)[1])
    return process


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--node-id", "abc"], "--node-id"),
        (["--log-level", "LOUD"], "--log-level"),
        (["--listen", "nonsense"], "listeners"),
        (["--listen", "127.0.0.1:99999"], "listeners"),
        (["--override", "no-equals-sign"], "--override"),
        (["--override", "num.partitions=x"], "num.partitions"),
        (["--override", "num.partitions=0"], "num.partitions"),
        (["--override", "auto.create.topics.enable=perhaps"], "auto.create.topics.enable"),
        (["--override", "log.segment.bytes=-1"], "log.segment.bytes"),
        (["--override", "log.cleanup.policy=shred"], "log.cleanup.policy"),
        # A Kafka config odradek does not use is still type-checked, as Kafka does.
        (["--override", "background.threads=0"], "background.threads"),
        (["--override", "controlled.shutdown.enable=maybe"], "controlled.shutdown.enable"),
        (["--config", "/nonexistent/server.properties"], "/nonexistent/server.properties"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    result = serve("--data-dir", str(tmp_path / "data"), *args)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    (line,) = message_lines(result.stderr)
    assert line.startswith("odradek serve: ") and needle in line, result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_unknown_argument_exits_2(tmp_path: Path) -> None:
    result = serve("--data-dir", str(tmp_path / "data"), "--bogus")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = message_lines(result.stderr)
    assert "--bogus" in line


KAFKA_SERVER_PROPERTIES = """\
# A KRaft server.properties as Kafka ships it (ports changed to 0 for the test).
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093

############################# Socket Server Settings #############################
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs={log_dirs}
num.partitions=3
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000

! Kafka configs odradek does not use, and one Kafka 4 no longer has:
sasl.kerberos.min.time.before.relogin=60000
group.coordinator.rebalance.protocols = classic,consumer
zookeeper.connection.timeout.ms: 18000
"""


def storage_format(config: Path, cluster_id: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "storage", "format", "-t", cluster_id, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert result.returncode == 0, result.stderr


def test_kafka_server_properties_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka-logs"
    config = tmp_path / "server.properties"
    config.write_text(KAFKA_SERVER_PROPERTIES.format(log_dirs=data_dir))
    cluster_id = random_uuid()
    storage_format(config, cluster_id)  # a configured quorum: Kafka's steps
    broker = start_with_args(data_dir, ["--config", str(config)], cwd=tmp_path)
    try:
        assert read_meta_properties(data_dir)["cluster.id"] == cluster_id
        with WireClient(broker.bootstrap) as client:
            assert metadata(client, None).cluster_id == cluster_id
            (topic,) = metadata(client, ["auto-three"]).topics
            assert topic.error_code == ErrorCode.none
            assert len(topic.partitions) == 3
            assert [b.port for b in metadata(client, None).brokers] == [broker.port]
        assert_serves(broker.bootstrap)
        log = broker.log()
        for unused in (
            "share.coordinator.state.topic.replication.factor",
            "sasl.kerberos.min.time.before.relogin",
            "group.coordinator.rebalance.protocols",
        ):
            assert f"Kafka configuration '{unused}' accepted; it has no effect" in log
        assert "unknown configuration 'zookeeper.connection.timeout.ms' ignored" in log
        assert "'num.partitions'" not in log  # keys odradek uses are not warned about
    finally:
        try:
            assert broker.stop() == 0
        finally:
            broker.kill()
    assert_clean_log(broker)


def test_quorum_node_refuses_an_unformatted_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka-logs"
    config = tmp_path / "server.properties"
    config.write_text(KAFKA_SERVER_PROPERTIES.format(log_dirs=data_dir))
    # --listen replaces the client listener; the config's controller listener stays.
    result = serve("--config", str(config), "--listen", "127.0.0.1:0", cwd=tmp_path)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr and "odradek ready" not in result.stdout
    errors = [line for line in result.stderr.splitlines() if "odradek serve:" in line]
    assert len(errors) == 1, result.stderr
    assert f"no meta.properties in {data_dir}" in errors[0]
    assert "odradek storage format -t <cluster-id> -c <server.properties>" in errors[0]
    assert not data_dir.exists()  # untouched: not even created
    data_dir.mkdir()
    assert serve("--config", str(config), cwd=tmp_path).returncode == 1
    assert list(data_dir.iterdir()) == []


def test_quorum_node_refuses_dirs_of_another_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka-logs"
    config = tmp_path / "server.properties"
    config.write_text(KAFKA_SERVER_PROPERTIES.format(log_dirs=data_dir))
    storage_format(config, random_uuid())
    before = read_meta_properties(data_dir)
    result = serve(
        "--config",
        str(config),
        "--override",
        "node.id=2",
        "--override",
        "controller.quorum.voters=2@localhost:9093",
        cwd=tmp_path,
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "odradek serve:" in line]
    assert len(errors) == 1 and "says node.id=1" in errors[0], result.stderr
    assert read_meta_properties(data_dir) == before


def test_controller_only_node_is_served_once_formatted(tmp_path: Path) -> None:
    """process.roles=controller is served now (tests/server/test_kraft_roles.py runs a
    quorum of them); like every quorum node it refuses an unformatted dir in one line."""
    result = serve(
        "--override",
        f"log.dirs={tmp_path / 'data'}",
        "--override",
        "process.roles=controller",
        "--override",
        "controller.quorum.voters=1@localhost:19093",
        "--override",
        "listeners=CONTROLLER://127.0.0.1:19093",
    )
    assert result.returncode == 1
    (line,) = [m for m in message_lines(result.stderr) if m.startswith("odradek serve:")]
    assert "run `odradek storage format" in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("controller.quorum.voters=1@localhost", "controller.quorum.voters"),
        ("process.roles=broker", "controller.quorum.voters"),  # node 1 is a voter
        # an SSL listener without a keystore (network/tls.py)
        ("listeners=PLAINTEXT://127.0.0.1:0,SSL://:0,CONTROLLER://:0", "ssl.keystore.location"),
        ("listener.security.protocol.map=PLAINTEXT:PLAINTEXT", "listener.security.protocol.map"),
        ("controller.listener.names=", "controller.listener.names"),
    ],
)
def test_bad_kraft_config_exits_2_with_one_line(tmp_path: Path, override: str, key: str) -> None:
    data_dir = tmp_path / "kafka-logs"
    config = tmp_path / "server.properties"
    config.write_text(KAFKA_SERVER_PROPERTIES.format(log_dirs=data_dir))
    result = serve("--config", str(config), "--override", override, cwd=tmp_path)
    assert result.returncode == 2, result
    (line,) = message_lines(result.stderr)
    assert line.startswith(f"odradek serve: invalid value for {key}: "), line
    assert not data_dir.exists()


def test_metadata_log_dir_holds_the_metadata_log(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    args = ["--listen", "127.0.0.1:0", "--override", f"log.dirs={a},{b}"]
    broker = start_with_args(a, [*args, "--override", f"metadata.log.dir={b}"])
    try:
        assert_serves(broker.bootstrap)
    finally:
        try:
            assert broker.stop() == 0
        finally:
            broker.kill()
    assert (b / "__cluster_metadata-0").is_dir() and not (a / "__cluster_metadata-0").exists()
    assert read_meta_properties(a)["directory.id"] != read_meta_properties(b)["directory.id"]
    # Started with the metadata log elsewhere than it is: one line, nothing changed.
    moved = serve(*args, "--override", f"metadata.log.dir={a}")
    assert moved.returncode == 1
    errors = [line for line in moved.stderr.splitlines() if "odradek serve:" in line]
    assert len(errors) == 1 and f"set metadata.log.dir={b}" in errors[0], moved.stderr
    assert not (a / "__cluster_metadata-0").exists()


def test_overrides_win_over_the_config_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'elsewhere'}\nnum.partitions=3\nmystery.key=1\n")
    broker = BrokerProcess(
        data_dir, ["--config", str(config), "--override", "num.partitions=2"]
    ).start()
    try:
        with WireClient(broker.bootstrap) as client:
            (topic,) = metadata(client, ["auto-two"]).topics
            assert len(topic.partitions) == 2
        assert (data_dir / "meta.properties").exists()  # --data-dir beats log.dirs
        assert not (tmp_path / "elsewhere").exists()
        assert "unknown configuration 'mystery.key' ignored" in broker.log()
    finally:
        try:
            assert broker.stop() == 0
        finally:
            broker.kill()


def test_sigint_exits_0(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        assert_serves(broker.bootstrap)
        os.kill(broker.pid, signal.SIGINT)
        assert broker.process is not None
        assert broker.process.wait(20) == 0
    finally:
        broker.kill()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    assert_clean_log(broker)


def test_sigterm_with_open_connections_exits_0(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with WireClient(broker.bootstrap) as idle, WireClient(broker.bootstrap) as polling:
            topic = make_topic(idle, "shutdown")
            polling.send(fetch_request({topic: [(0, 0, 1024)]}, max_wait_ms=30000, min_bytes=1))
            time.sleep(0.2)  # the fetch is parked
            started = time.monotonic()
            assert broker.stop() == 0
            # A parked long poll is answered at shutdown, not after its 30 s max_wait.
            assert time.monotonic() - started < 5
    finally:
        broker.kill()
    assert_clean_log(broker)


def test_second_broker_on_the_same_data_dir_fails_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = BrokerProcess(data_dir).start()
    try:
        result = serve("--data-dir", str(data_dir), "--listen", "127.0.0.1:0")
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
        errors = [line for line in result.stderr.splitlines() if "odradek serve:" in line]
        assert len(errors) == 1 and "in use" in errors[0] and str(data_dir) in errors[0]
        assert "odradek ready" not in result.stdout
        # The same port, another data dir: also one line, and the first broker is unharmed.
        taken = serve("--data-dir", str(tmp_path / "other"), "--listen", f"127.0.0.1:{first.port}")
        assert taken.returncode != 0
        assert "Traceback" not in taken.stderr
        errors = [line for line in taken.stderr.splitlines() if "odradek serve:" in line]
        assert len(errors) == 1 and "in use" in errors[0].lower(), taken.stderr
        assert_serves(first.bootstrap)
    finally:
        try:
            assert first.stop() == 0
        finally:
            first.kill()
    assert_clean_log(first)
