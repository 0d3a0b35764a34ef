"""odradek reassign-partitions: kafka-reassign-partitions.sh's options, JSON and output.

Input is checked before anything is sent (one line, status 1); the proposal of
--generate is a pure function; against the zero-config node (one broker) the tool
generates, executes a no-op move, verifies it complete, and reports the controller's
refusals per partition with Kafka's error names. A real move between brokers is
tests/server/test_kraft_reassignment.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.cli.reassign_partitions import ReassignToolError, plan_json, propose
from odradek.cli.reassign_throttles import follower_throttles, involved_brokers, leader_throttles
from tests.support.broker import running_broker
from tests.support.wire import WireClient, create_topic


def test_propose_keeps_the_replication_factor_round_robin() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (2, 3), ("t", 2): (3, 1)}
    assert propose(current, [4, 5, 6]) == {("t", 0): (4, 5), ("t", 1): (5, 6), ("t", 2): (6, 4)}
    with pytest.raises(ReassignToolError, match="only 1 broker"):
        propose(current, [4])
    assert json.loads(plan_json({("t", 0): (4, 5)})) == {
        "version": 1,
        "partitions": [
            {"topic": "t", "partition": 0, "replicas": [4, 5], "log_dirs": ["any", "any"]}
        ],
    }


def test_throttles_name_the_senders_and_the_receivers_of_moving_partitions() -> None:
    """As kafka-reassign-partitions.sh: the leader list holds a moving partition's
    current replicas, the follower list the replicas it gains; partitions that do not
    move are not throttled; the rates go to every broker of a moving partition."""
    current = {("a", 0): (1, 2), ("a", 1): (2, 3), ("a", 2): (3, 1), ("b", 0): (1,)}
    plan = {("a", 0): (2, 3), ("a", 1): (2, 3), ("a", 2): (3, 1, 4), ("b", 0): (5,)}
    assert leader_throttles(current, plan) == {"a": "0:1,0:2,2:1,2:3", "b": "0:1"}
    assert follower_throttles(current, plan) == {"a": "0:3,2:4", "b": "0:5"}
    assert involved_brokers(current, plan) == [1, 2, 3, 4, 5]
    assert leader_throttles(current, {("a", 1): (2, 3)}) == {}
    assert involved_brokers(current, {("a", 1): (2, 3)}) == []
    shrink = {("a", 0): (1,)}  # only dropping a replica: nothing to copy, nobody fetches
    assert follower_throttles(current, shrink) == {}
    assert leader_throttles(current, shrink) == {"a": "0:1,0:2"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--execute"], "--reassignment-json-file is required"),
        (["--execute", "--reassignment-json-file", "{missing}"], "cannot read"),
        (["--verify", "--reassignment-json-file", "{bad}"], "is not JSON"),
        (["--execute", "--reassignment-json-file", "{shape}"], "bad entry"),
        (["--execute", "--reassignment-json-file", "{twice}"], "listed twice"),
        (["--execute", "--reassignment-json-file", "{dirs}"], "log_dirs"),
        (["--cancel", "--reassignment-json-file", "{empty}"], "expected"),
        (["--generate", "--broker-list", "1"], "--topics-to-move-json-file"),
        (
            ["--generate", "--broker-list", "1,x", "--topics-to-move-json-file", "{topics}"],
            "not a broker id",
        ),
        (
            ["--generate", "--broker-list", "1,1", "--topics-to-move-json-file", "{topics}"],
            "listed twice",
        ),
    ],
)
def test_bad_input_is_one_line_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    files = {
        name: tmp_path / f"{name}.json"
        for name in ("missing", "bad", "shape", "twice", "dirs", "empty", "topics")
    }
    files["bad"].write_text("{")
    files["shape"].write_text(
        json.dumps({"partitions": [{"topic": "t", "partition": 0, "replicas": "1"}]})
    )
    entry = {"topic": "t", "partition": 0, "replicas": [1]}
    files["twice"].write_text(json.dumps({"version": 1, "partitions": [entry, entry]}))
    files["dirs"].write_text(json.dumps({"partitions": [{**entry, "log_dirs": ["data"]}]}))
    files["empty"].write_text(json.dumps({"version": 1, "partitions": []}))
    files["topics"].write_text(json.dumps({"version": 1, "topics": [{"topic": "t"}]}))
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    # port 9 (discard): never reached, the input is refused first
    status = main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:9", *args])
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err


def test_usage_errors_are_argparse_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reassign-partitions", "--bootstrap-server", "x:1"]) == 2
    assert main(["reassign-partitions", "--bootstrap-server", "x:1", "--execute", "--verify"]) == 2
    capsys.readouterr()


def test_against_the_zero_config_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_broker(tmp_path / "data") as broker:
        with WireClient(broker.bootstrap) as client:
            create_topic(client, "t", partitions=2)
        base = ["reassign-partitions", "--bootstrap-server", broker.bootstrap]
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "t"}]}))
        generate = [*base, "--generate", "--topics-to-move-json-file", str(topics)]
        assert main([*generate, "--broker-list", "1,2"]) == 1  # the node is 1 (node.id default)
        assert "unknown broker(s) [2]" in capsys.readouterr().err
        status = main([*generate, "--broker-list", "1"])
        out = capsys.readouterr().out.splitlines()
        assert status == 0
        assert out[0] == "Current partition replica assignment" and out[3] == (
            "Proposed partition reassignment configuration"
        )
        current, proposed = json.loads(out[1]), json.loads(out[4])
        assert current == proposed and [p["partition"] for p in current["partitions"]] == [0, 1]
        node = current["partitions"][0]["replicas"][0]

        plan = tmp_path / "plan.json"
        plan.write_text(out[4])
        guarded = ["--execute", "--disallow-replication-factor-change"]
        assert main([*base, *guarded, "--reassignment-json-file", str(plan)]) == 0
        executed = capsys.readouterr().out.splitlines()
        assert executed[0] == "Current partition replica assignment"
        assert json.loads(executed[2]) == current
        assert executed[-1] == "Successfully started partition reassignments for t-0,t-1"
        assert main([*base, "--verify", "--reassignment-json-file", str(plan)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "Status of partition reassignment:",
            "Reassignment of partition t-0 is completed.",
            "Reassignment of partition t-1 is completed.",
            "",
            f"Clearing broker-level throttles on brokers {node}",
            "Clearing topic-level throttles on topic t",
        ]
        preserve = ["--cancel", "--preserve-throttles", "--reassignment-json-file", str(plan)]
        assert main([*base, *preserve]) == 1
        captured = capsys.readouterr()
        assert captured.out.splitlines() == [
            "Error reassigning partition(s):",
            "t-0: NO_REASSIGNMENT_IN_PROGRESS",
            "t-1: NO_REASSIGNMENT_IN_PROGRESS",
        ]
        assert "2 partition(s) failed" in captured.err

        bad = tmp_path / "bad.json"
        bad.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": "t", "partition": 0, "replicas": [node, 99]}],
                }
            )
        )
        assert main([*base, "--execute", "--reassignment-json-file", str(bad)]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert lines[-2] == "Error reassigning partition(s):"
        assert lines[-1].startswith("t-0: INVALID_REPLICA_ASSIGNMENT: ") and "99" in lines[-1]
        assert main([*base, "--verify", "--reassignment-json-file", str(bad)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "Status of partition reassignment:",
            f"There is no active reassignment of partition t-0, but replica set is {node} "
            f"rather than {node},99.",
        ]
        missing = tmp_path / "missing.json"
        missing.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": "nope", "partition": 0, "replicas": [node]}],
                }
            )
        )
        assert main([*base, "--execute", "--reassignment-json-file", str(missing)]) == 1
        assert "unknown partition(s): nope-0" in capsys.readouterr().err
    assert main([*base, "--verify", "--reassignment-json-file", str(plan)]) == 1
    assert "cannot reach" in capsys.readouterr().err
