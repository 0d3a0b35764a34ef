"""odradek leader-election: kafka-leader-election.sh's options, input and output.

The arguments and the JSON file are checked before anything is sent (one line and
status 1, or argparse's 2); against the zero-config node (one broker, so every
partition is led by its preferred replica) the tool reports "Valid replica already
elected" and failures per partition. The multi-node case, a leadership actually moved
back, is tests/server/test_kraft_elections.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli.leader_election import report
from odradek.cli.main import main
from tests.support.broker import running_broker
from tests.support.wire import WireClient, create_topic


def test_report_lines_as_kafkas_tool() -> None:
    lines, failed = report(
        "PREFERRED",
        [
            ("t", 0, "NONE"),
            ("t", 1, "NONE"),
            ("u", 0, "ELECTION_NOT_NEEDED"),
            ("v", 2, "PREFERRED_LEADER_NOT_AVAILABLE"),
        ],
    )
    assert lines == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
        "Valid replica already elected for partitions u-0",
        "Error completing leader election (PREFERRED) for partition: v-2: "
        "PREFERRED_LEADER_NOT_AVAILABLE",
    ]
    assert failed == 1
    assert report("UNCLEAN", []) == ([], 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "t"], "--partition is required with --topic"),
        (["--all-topic-partitions", "--partition", "1"], "--partition goes with --topic only"),
        (["--path-to-json-file", "{missing}"], "cannot read"),
        (["--path-to-json-file", "{bad}"], "is not JSON"),
        (["--path-to-json-file", "{shape}"], "bad entry"),
        (["--path-to-json-file", "{twice}"], "listed twice"),
        (["--path-to-json-file", "{empty}"], "no partitions listed"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    files = {
        "missing": tmp_path / "missing.json",
        "bad": tmp_path / "bad.json",
        "shape": tmp_path / "shape.json",
        "twice": tmp_path / "twice.json",
        "empty": tmp_path / "empty.json",
    }
    files["bad"].write_text("{")
    files["shape"].write_text(json.dumps({"partitions": [{"topic": "t", "partition": "0"}]}))
    entry = {"topic": "t", "partition": 0}
    files["twice"].write_text(json.dumps({"partitions": [entry, entry]}))
    files["empty"].write_text(json.dumps({"partitions": []}))
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    # port 9 (discard): never reached, the input is refused first
    base = ["leader-election", "--bootstrap-server", "127.0.0.1:9", "--election-type", "preferred"]
    status = main([*base, *args])
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err


def test_usage_errors_are_argparse_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["leader-election", "--bootstrap-server", "x:1", "--topic", "t"]) == 2
    assert (
        main(
            [
                "leader-election",
                "--bootstrap-server",
                "x:1",
                "--election-type",
                "SOMETIMES",
                "--all-topic-partitions",
            ]
        )
        == 2
    )
    capsys.readouterr()


def test_against_the_zero_config_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_broker(tmp_path / "data") as broker:
        with WireClient(broker.bootstrap) as client:
            create_topic(client, "t", partitions=2)
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {"partitions": [{"topic": "t", "partition": 1}, {"topic": "nope", "partition": 0}]}
            )
        )
        base = ["leader-election", "--bootstrap-server", broker.bootstrap]
        assert main([*base, "--election-type", "PREFERRED", "--all-topic-partitions"]) == 0
        assert capsys.readouterr().out == ""  # every partition already led as asked
        assert main([*base, "--election-type", "UNCLEAN", "--path-to-json-file", str(plan)]) == 1
        captured = capsys.readouterr()
        assert captured.out.splitlines() == [
            "Valid replica already elected for partitions t-1",
            "Error completing leader election (UNCLEAN) for partition: nope-0: "
            "UNKNOWN_TOPIC_OR_PARTITION",
        ]
        assert "1 replica(s) could not be elected" in captured.err
    assert (
        main([*base, "--election-type", "PREFERRED", "--all-topic-partitions"]) == 1
    )  # stopped: unreachable, one line
    assert "cannot reach" in capsys.readouterr().err
