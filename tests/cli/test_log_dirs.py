"""odradek log-dirs (kafka-log-dirs.sh --describe) and reassign-partitions with real
``log_dirs``: against one broker with two log dirs, a plan moves a partition to the
other dir, --verify reports it in progress and then completed, log-dirs shows where
each replica lives; a dir the broker does not have is LOG_DIR_NOT_FOUND (status 1)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.cli.main import main
from tests.support.broker import two_dir_broker
from tests.support.wire import WireClient, create_topic

confluent_kafka = pytest.importorskip("confluent_kafka")


def describe(bootstrap: str, capsys: pytest.CaptureFixture[str], *more: str) -> Any:
    assert main(["log-dirs", "--bootstrap-server", bootstrap, "--describe", *more]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1].startswith("Received log directory information from brokers ")
    return json.loads(lines[2])


def placement(document: Any) -> dict[str, list[tuple[str, bool]]]:
    found: dict[str, list[tuple[str, bool]]] = {}
    for broker in document["brokers"]:
        for log_dir in broker["logDirs"]:
            assert log_dir["error"] is None
            for p in log_dir["partitions"]:
                found.setdefault(p["partition"], []).append((log_dir["logDir"], p["isFuture"]))
    return found


def test_describe_and_move_with_a_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broker = two_dir_broker(
        tmp_path / "b",
        "replica.alter.log.dirs.io.max.bytes.per.second=200000",
        "replication.quota.window.num=2",
        "replica.fetch.max.bytes=65536",
    )
    broker.start()
    try:
        with WireClient(broker.bootstrap) as client:
            create_topic(client, "t", partitions=2)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "batch.size": 16384, "linger.ms": 5}
        )
        for n in range(800):
            producer.produce("t", value=b"v" * 1000, partition=0, key=str(n).encode())
        assert producer.flush(30) == 0
        document = describe(broker.bootstrap, capsys)
        assert document["version"] == 1 and [b["broker"] for b in document["brokers"]] == [1]
        dirs = {d["logDir"] for d in document["brokers"][0]["logDirs"]}
        assert dirs == {str(tmp_path / "b" / "d1"), str(tmp_path / "b" / "d2")}
        where = placement(document)
        ((source, _),) = where["t-0"]
        target = next(d for d in dirs if d != source)
        assert placement(describe(broker.bootstrap, capsys, "--topic-list", "x")) == {}

        plan = tmp_path / "plan.json"
        entry = {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": [target]}
        plan.write_text(json.dumps({"version": 1, "partitions": [entry]}))
        base = ["reassign-partitions", "--bootstrap-server", broker.bootstrap]
        assert main([*base, "--execute", "--reassignment-json-file", str(plan)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[-1] == "Successfully started log directory move for: t-0-1"
        statuses = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert main([*base, "--verify", "--reassignment-json-file", str(plan)]) == 0
            statuses.append(capsys.readouterr().out.splitlines()[-1])
            if statuses[-1] == "Reassignment of replica t-0-1 completed successfully.":
                break
            time.sleep(0.2)
        assert statuses[0] == "Reassignment of replica t-0-1 is still in progress."
        assert statuses[-1] == "Reassignment of replica t-0-1 completed successfully."
        assert placement(describe(broker.bootstrap, capsys, "--topic-list", "t"))["t-0"] == [
            (target, False)
        ]

        entry["log_dirs"] = [str(tmp_path / "nowhere")]
        plan.write_text(json.dumps({"version": 1, "partitions": [entry]}))
        assert main([*base, "--execute", "--reassignment-json-file", str(plan)]) == 1
        captured = capsys.readouterr()
        assert "t-0-1: LOG_DIR_NOT_FOUND" in captured.out
        assert main([*base, "--verify", "--reassignment-json-file", str(plan)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"Partition t-0 on broker 1 is not being moved from log dir {target} to "
            f"{tmp_path / 'nowhere'}."
        )
        assert (
            main(
                [
                    "log-dirs",
                    "--bootstrap-server",
                    broker.bootstrap,
                    "--describe",
                    "--broker-list",
                    "7",
                ]
            )
            == 1
        )
        assert "unknown broker(s) [7]" in capsys.readouterr().err
    finally:
        broker.stop()
