"""``odradek transactions`` without a broker: every argument error is one line on stderr
with status 1, and the tables print as kafka-transactions.sh prints them."""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
from typing import Any

import pytest
from kio.serial import entity_writer

from odradek.cli import transactions, transactions_output
from odradek.cli.main import main
from odradek.cli.transactions_output import (
    ActiveProducer,
    DescribedTransaction,
    ListedTransaction,
    describe_lines,
    format_table,
    list_lines,
    producer_lines,
)
from odradek.cli.txn_describe_codec import (
    ResponseFormatError,
    TransactionStateEntry,
    decode_response,
)
from odradek.protocol.build import error_code, make, response_module

B = ["--bootstrap-server", "127.0.0.1:9"]
_ZERO = datetime.timedelta(0)


DP = [*B, "describe-producers", "--topic", "t"]
AB = [*B, "abort", "--topic", "t", "--partition", "0"]
NOT_HOST_PORT = "is not HOST:PORT"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "name an action: list, describe, describe-producers or abort"),
        (["list"], "--bootstrap-server is required"),
        (["--bootstrap-server", "nohost", "list"], f"--bootstrap-server: 'nohost' {NOT_HOST_PORT}"),
        (
            ["list", "--bootstrap-server", "h:99999"],
            f"--bootstrap-server: 'h:99999' {NOT_HOST_PORT}",
        ),
        ([*B, "list", "--duration-filter", "soon"], "--duration-filter: 'soon' is not an integer"),
        ([*B, "describe"], "--transactional-id is required"),
        ([*B, "describe-producers", "--partition", "0"], "--topic is required"),
        (DP, "--partition is required"),
        ([*DP, "--partition", "x"], "--partition: 'x' is not an integer"),
        ([*DP, "--partition", "-1"], "--partition: -1 is not in"),
        ([*DP, "--partition", "0", "--broker-id", "b"], "--broker-id: 'b' is not an integer"),
        ([*B, "abort", "--partition", "0", "--start-offset", "3"], "--topic is required"),
        (AB, "abort needs either --start-offset"),
        ([*AB, "--start-offset", "1", "--producer-id", "2"], "abort needs either --start-offset"),
        (
            [*AB, "--producer-id", "2", "--producer-epoch", "0"],
            "--coordinator-epoch is required",
        ),
        (
            [*AB, "--producer-id", "2", "--producer-epoch", "40000", "--coordinator-epoch", "0"],
            "--producer-epoch: 40000 is not in 0..32767",
        ),
    ],
)
def test_argument_errors_are_one_line_and_status_1(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["transactions", *argv]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"transactions: {message}")


def test_unreachable_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transactions", "--bootstrap-server", "127.0.0.1:1", "list"]) == 1
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith("transactions: cannot connect to 127.0.0.1:1")
    assert "Traceback" not in captured.err


def test_help_lists_the_actions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transactions", "--help"]) == 0
    out = capsys.readouterr().out
    for action in ("list", "describe", "describe-producers", "abort"):
        assert action in out


def test_table_columns_are_padded_and_tab_separated() -> None:
    assert format_table(("A", "Bee"), [("long-cell", 1), ("x", 22)]) == [
        "A        \tBee",
        "long-cell\t1",
        "x        \t22",
    ]


def test_list_output() -> None:
    lines = list_lines(
        [
            ListedTransaction("b-app", 2, 11, "Ongoing"),
            ListedTransaction("a-app", 2, 10, "CompleteCommit"),
            ListedTransaction("z", 1, 12, "Empty"),
        ]
    )
    assert [line.split("\t") for line in lines] == [
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        ["z              ", "1          ", "12        ", "Empty"],
        ["a-app          ", "2          ", "10        ", "CompleteCommit"],
        ["b-app          ", "2          ", "11        ", "Ongoing"],
    ]


def test_list_output_without_transactions_is_the_header() -> None:
    assert list_lines([]) == ["TransactionalId\tCoordinator\tProducerId\tTransactionState"]


def test_describe_output() -> None:
    txn = DescribedTransaction(1, "app", 5, 2, "Ongoing", 60_000, 1_000, (("t", 1), ("t", 0)))
    header, row = describe_lines(txn, now_ms=4_500)
    assert header.split("\t") == [h.ljust(len(h)) for h in transactions_output.DESCRIBE_HEADERS]
    assert [c.strip() for c in row.split("\t")] == [
        "1", "app", "5", "2", "Ongoing", "60000", "1000", "3500", "t-0,t-1",
    ]  # fmt: skip
    idle = DescribedTransaction(1, "app", 5, 2, "Empty", 60_000, -1, ())
    _, row = describe_lines(idle, now_ms=4_500)
    assert [c.strip() for c in row.split("\t")] == [
        "1", "app", "5", "2", "Empty", "60000", "None", "None", "",
    ]  # fmt: skip


def test_describe_producers_output() -> None:
    lines = producer_lines(
        [
            ActiveProducer(9, 1, -1, 4, 1_700, -1),
            ActiveProducer(3, 0, 2, 10, 1_600, 42),
        ]
    )
    assert [[c.strip() for c in line.split("\t")] for line in lines] == [
        list(transactions_output.PRODUCER_HEADERS),
        ["3", "0", "2", "10", "1600", "42"],
        ["9", "1", "None", "4", "1700", "None"],
    ]


# -- DescribeTransactions responses, read without kio (a -1 start time) -----------------
def describe_frame(*states: Any) -> bytes:
    """A whole DescribeTransactions v0 response frame as a broker writes it."""
    module = response_module(65, 0)
    body = make(module.DescribeTransactionsResponse, throttle_time=_ZERO, transaction_states=states)
    buffer = io.BytesIO()
    buffer.write(struct.pack(">i", 42) + b"\x00")  # correlation id, empty header tags
    entity_writer(module.DescribeTransactionsResponse)(buffer, body)
    return buffer.getvalue()


def state_entity(code: str, txn_id: str, state: str, start_ms: int, topics: Any = ()) -> Any:
    module = response_module(65, 0)
    return make(
        module.TransactionState,
        error_code=error_code(code),
        transactional_id=txn_id,
        transaction_state=state,
        transaction_timeout=datetime.timedelta(milliseconds=60_000),
        transaction_start_time=datetime.datetime.fromtimestamp(start_ms / 1000, tz=datetime.UTC),
        producer_id=12,
        producer_epoch=3,
        topics=tuple(make(module.TopicData, topic=t, partitions=ps) for t, ps in topics),
    )


def test_describe_response_with_negative_start_time() -> None:
    frame = describe_frame(
        state_entity("NONE", "busy", "Ongoing", 1_700_000_000_000, [("t", (1, 0)), ("ü", (2,))]),
        state_entity("NONE", "idle", "Empty", -1),
        state_entity("TRANSACTIONAL_ID_NOT_FOUND", "gone", "", -1),
    )
    busy, idle, gone = decode_response(frame)
    assert busy == TransactionStateEntry(
        0, "busy", "Ongoing", 60_000, 1_700_000_000_000, 12, 3, (("t", 1), ("t", 0), ("ü", 2))
    )
    assert (idle.state, idle.start_ms, idle.partitions) == ("Empty", -1, ())
    assert gone.error_code == error_code("TRANSACTIONAL_ID_NOT_FOUND").value


@pytest.mark.parametrize("cut", [1, 5, 12, 30])
def test_truncated_describe_response_is_a_format_error(cut: int) -> None:
    frame = describe_frame(state_entity("NONE", "busy", "Ongoing", 5, [("t", (0,))]))
    with pytest.raises(ResponseFormatError):
        decode_response(frame[:-cut])
    with pytest.raises(ResponseFormatError):
        decode_response(frame + b"\x00")


def test_retriable_errors_are_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def flaky(cluster: Any, action: str, params: tuple[Any, ...]) -> list[str]:
        calls.append(action)
        if len(calls) < 3:
            raise transactions.RetriableError("loading: COORDINATOR_LOAD_IN_PROGRESS")
        return ["done"]

    monkeypatch.setattr(transactions, "_act", flaky)
    monkeypatch.setattr(transactions, "RETRY_BACKOFF_S", 0.0)
    assert asyncio.run(transactions._execute([("h", 1)], "list", (None,))) == ["done"]
    assert calls == ["list"] * 3

    async def fatal(cluster: Any, action: str, params: tuple[Any, ...]) -> list[str]:
        calls.append(action)
        raise transactions.TransactionsToolError("cannot describe 'x': TRANSACTIONAL_ID_NOT_FOUND")

    calls.clear()
    monkeypatch.setattr(transactions, "_act", fatal)
    with pytest.raises(transactions.TransactionsToolError):
        asyncio.run(transactions._execute([("h", 1)], "describe", ("x",)))
    assert calls == ["describe"]
    assert isinstance(
        transactions._failure("x", error_code("COORDINATOR_NOT_AVAILABLE")),
        transactions.RetriableError,
    )
    assert not isinstance(
        transactions._failure("x", error_code("INVALID_TXN_STATE")), transactions.RetriableError
    )
