"""The pytest plugin (odradek/testing/pytest_plugin.py) in a pytest of its own.

Each test writes a small test project into ``tmp_path`` and runs pytest on it in a
subprocess (its own rootdir, so odradek's conftest is not in it). The plugin is loaded
through a ``pytest11`` entry point — a dist-info on PYTHONPATH declaring the one
pyproject.toml declares — and also named with ``-p``, as a checkout without the install
does: both together must load it once. The project's tests use the fixtures with
confluent-kafka, and one that asks for no fixture sees no broker thread.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import odradek

ROOT = Path(odradek.__file__).resolve().parent.parent
ENTRY_POINT = "odradek.testing.pytest_plugin = odradek.testing.pytest_plugin"

PROJECT_TESTS = """
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition


def test_asks_for_nothing_and_no_broker_runs():
    names = [t.name for t in threading.enumerate()]
    assert "odradek-embedded-broker" not in names


def test_round_trip(odradek_bootstrap, odradek_topic):
    assert odradek_topic.startswith("test_round_trip-t-")
    producer = Producer({"bootstrap.servers": odradek_bootstrap})
    producer.produce(odradek_topic, b"hello", partition=0)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": odradek_bootstrap, "group.id": "g"})
    consumer.assign([TopicPartition(odradek_topic, 0, 0)])
    deadline = time.monotonic() + 20
    message = None
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(0.2)
    consumer.close()
    assert message is not None and message.value() == b"hello"


def test_topics_are_fresh_per_test(odradek_broker, odradek_topic, odradek_topic_factory):
    other = odradek_topic_factory(partitions=3, suffix="wide")
    assert other != odradek_topic
    metadata = Producer({"bootstrap.servers": odradek_broker.bootstrap}).list_topics(timeout=20)
    assert len(metadata.topics[other].partitions) == 3
    assert odradek_broker.process == PROCESS_MODE


def test_broker_config_from_ini(odradek_broker):
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap})
    producer.produce("auto-created-here", b"x")
    assert producer.flush(20) == 0
    metadata = producer.list_topics("auto-created-here", timeout=20)
    assert len(metadata.topics["auto-created-here"].partitions) == 2
"""


def run_project(tmp_path: Path, ini: str, *args: str, process_mode: bool = False) -> str:
    (tmp_path / "pytest.ini").write_text(f"[pytest]\n{ini}")
    (tmp_path / "test_project.py").write_text(f"PROCESS_MODE = {process_mode}\n" + PROJECT_TESTS)
    dist_info = tmp_path / "site" / "odradek_plugin_probe-0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: odradek-plugin-probe\n")
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{ENTRY_POINT}\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{dist_info.parent}"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return f"exit {result.returncode}\n{result.stdout}{result.stderr}"


def test_fixtures_in_thread_loaded_by_entry_point_and_by_name(tmp_path: Path) -> None:
    output = run_project(
        tmp_path,
        "odradek_broker_config =\n    num.partitions=2\n",
        "-p",
        "odradek.testing.pytest_plugin",
    )
    assert output.startswith("exit 0\n") and "4 passed" in output, output


def test_fixtures_with_the_broker_in_a_process(tmp_path: Path) -> None:
    output = run_project(
        tmp_path,
        "odradek_broker_config = num.partitions=2\n",
        "--odradek-process",
        process_mode=True,
    )
    assert output.startswith("exit 0\n") and "4 passed" in output, output


def test_a_bad_broker_config_line_is_a_usage_error(tmp_path: Path) -> None:
    output = run_project(tmp_path, "odradek_broker_config = num.partitions\n", "-k", "round_trip")
    assert output.startswith("exit 4\n"), output  # pytest's usage-error status
    assert "odradek_broker_config: 'num.partitions' is not KEY=VALUE" in output
    assert "Traceback" not in output


def test_a_bad_broker_config_value_fails_the_tests_that_ask_in_one_line(tmp_path: Path) -> None:
    output = run_project(tmp_path, "odradek_broker_config = num.partitions=many\n")
    assert "1 passed, 3 errors" in output, output  # the test asking for no broker passes
    assert "During handling" not in output
    assert "odradek broker config: invalid value for num.partitions" in output
    assert "Traceback" not in output and "def odradek_broker" not in output, output
