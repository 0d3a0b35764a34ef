"""The console's pages and forms against a real broker, through Starlette's TestClient:
what each page shows (checked against what was produced and committed), the message
browser's modes, every change's confirmation step, and one-line errors for bad input."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.console.conftest import COMMITTED, PRODUCED, Seeded

pytest.importorskip("starlette")
pytest.importorskip("httpx2")
from starlette.testclient import TestClient

from odradek.console.app import create_app
from odradek.console.lag import LagHistory
from odradek.console.source import ClusterSource

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def history() -> LagHistory:
    return LagHistory()


@pytest.fixture(scope="module")
def client(seeded: Seeded, history: LagHistory) -> Iterator[TestClient]:
    app = create_app(ClusterSource(seeded.bootstrap), sample_interval_s=0.2, history=history)
    with TestClient(app) as test_client:
        yield test_client


def text_of(html: str) -> str:
    """The page's visible text, whitespace collapsed (enough to assert on)."""
    body = re.sub(r"<[^>]+>", " ", html)
    return " ".join(body.replace("&#34;", '"').replace("&#39;", "'").split())


def row(html: str, table_id: str, first_cell: str) -> list[str]:
    """The cells of the row of table ``table_id`` whose first cell is ``first_cell``."""
    table = re.search(rf'<table id="{table_id}".*?</table>', html, re.S)
    assert table, f"no table {table_id}"
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(0), re.S):
        cells = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in {table_id}")


def committed(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([confluent_kafka.TopicPartition(topic, partition)], 10)
        return int(tp.offset)
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[confluent_kafka.TopicPartition(topic, 0, offset)], asynchronous=False
        )
    finally:
        consumer.close()


def topic_exists(bootstrap: str, name: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return name in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def test_cluster_page_lists_the_broker_and_the_quorum(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/")
    assert page.status_code == 200
    port = seeded.bootstrap.rsplit(":", 1)[1]
    broker = row(page.text, "brokers", "1 controller")
    assert broker[1:3] == ["127.0.0.1", port]
    assert broker[5].endswith("B")  # the log dir's size, from DescribeLogDirs
    assert row(page.text, "quorum", "1")[1] == "Leader"


def test_topic_pages_show_partitions_offsets_and_configs(
    client: TestClient, seeded: Seeded
) -> None:
    listing = client.get("/topics")
    assert row(listing.text, "topics", seeded.topic)[1:4] == ["2", "1", str(PRODUCED)]
    assert "__consumer_offsets" not in listing.text
    assert "__consumer_offsets" in client.get("/topics?internal=1").text
    page = client.get(f"/topics/{seeded.topic}")
    assert page.status_code == 200
    zero = row(page.text, "partitions", "0")
    assert zero[1:4] == ["1", "1", "1"]  # leader, replicas, ISR
    assert zero[5:7] == ["0", str(PRODUCED)]  # start and end offsets
    assert zero[7].endswith("B") and zero[7] != "0 B"
    assert row(page.text, "partitions", "1")[6] == "0"
    assert row(page.text, "configs", "cleanup.policy")[1:] == ["delete", "DEFAULT_CONFIG"]
    configs = re.search(r'<table id="configs".*?</table>', page.text, re.S).group(0)
    first = text_of(re.findall(r"<tr[^>]*>(.*?)</tr>", configs, re.S)[1])
    assert first == "retention.ms 86400000 DYNAMIC_TOPIC_CONFIG"  # what was set comes first


def test_group_page_shows_lag_as_produced_minus_committed(
    client: TestClient, seeded: Seeded
) -> None:
    page = client.get(f"/groups/{seeded.group}")
    assert page.status_code == 200
    offsets = row(page.text, "offsets", seeded.topic)
    assert offsets[1:5] == ["0", str(COMMITTED), str(PRODUCED), str(PRODUCED - COMMITTED)]
    assert re.search(r'id="total-lag">(\d+)<', page.text).group(1) == str(PRODUCED - COMMITTED)
    assert '<meta http-equiv="refresh"' not in page.text
    reloading = client.get(f"/groups/{seeded.group}?refresh=5").text
    assert '<meta http-equiv="refresh" content="5">' in reloading
    assert client.get(f"/groups/{seeded.group}?refresh=0").status_code == 400
    assert row(client.get("/groups").text, "groups", seeded.group)[1:] == [
        "Empty",
        "-",
        str(PRODUCED - COMMITTED),
    ]


def test_lag_is_sampled_into_the_chart(
    client: TestClient, seeded: Seeded, history: LagHistory
) -> None:
    deadline = time.monotonic() + 20
    while len(history.samples(seeded.group)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    samples = history.samples(seeded.group)
    assert len(samples) >= 2 and samples[-1][1] == PRODUCED - COMMITTED
    svg = re.search(r"<svg.*?</svg>", client.get(f"/groups/{seeded.group}").text, re.S)
    assert svg and "<polyline" in svg.group(0)


def test_message_browser_reads_from_an_offset_in_each_format(
    client: TestClient, seeded: Seeded
) -> None:
    base = f"/topics/{seeded.topic}/messages?partition=0&start=offset"
    page = client.get(f"{base}&offset={seeded.json_offset}&limit=1&format=auto")
    assert page.status_code == 200
    cells = row(page.text, "records", str(seeded.json_offset))
    assert cells[2] == "customer-7"
    assert f'"order": "{seeded.order_id}"' in cells[3] and '"amount": 42.5' in cells[3]
    assert cells[4] == "trace-id : abc-123"
    assert '<pre class="json">' in page.text
    hexed = client.get(f"{base}&offset={seeded.json_offset}&limit=1&format=hex").text
    assert "63 75 73 74 6f 6d 65 72  2d 37" in hexed or "63 75 73 74 6f 6d 65 72 2d 37" in hexed
    plain = client.get(f"{base}&offset=0&limit=5&format=utf8").text
    offsets = re.findall(r'<td class="num">(\d+)</td>\s*<td title', plain)
    assert offsets == ["0", "1", "2", "3", "4"]
    assert row(plain, "records", "0")[3] == "plain 0"
    # past the end: nothing, and the page says why
    assert "no records there" in client.get(f"{base}&offset={PRODUCED}&limit=5").text


def test_message_browser_reads_from_a_timestamp(client: TestClient, seeded: Seeded) -> None:
    base = f"/topics/{seeded.topic}/messages?partition=0&start=timestamp&limit=2"
    page = client.get(f"{base}&timestamp=2000-01-01T00:00:00")
    assert [c[0] for c in [row(page.text, "records", "0"), row(page.text, "records", "1")]]
    later = client.get(f"{base}&timestamp={int(time.time() * 1000) + 3_600_000}")
    assert later.status_code == 200 and "no record at or after" in later.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("partition=0&offset=abc", "offset must be a whole number, not 'abc'"),
        ("partition=7&offset=0", "has no partition 7"),
        ("partition=0&offset=0&limit=0", "limit must be between 1 and 500, not 0"),
        ("partition=0&offset=0&format=yaml", "format must be one of auto, utf8, json, hex"),
        ("partition=0&start=timestamp&timestamp=yesterday", "timestamp must be milliseconds"),
        ("partition=0&start=sideways", "start must be offset or timestamp"),
    ],
)
def test_bad_browser_input_is_a_one_line_400(
    client: TestClient, seeded: Seeded, query: str, message: str
) -> None:
    page = client.get(f"/topics/{seeded.topic}/messages?{query}")
    assert page.status_code == 400
    error = re.search(r'<p class="error" id="error">(.*?)</p>', page.text, re.S)
    assert error and message in text_of(error.group(1)) and "\n" not in error.group(1)
    assert "Traceback" not in page.text


def test_unknown_topic_and_group_are_404(client: TestClient) -> None:
    assert client.get("/topics/no-such-topic").status_code == 404
    assert client.get("/topics/no-such-topic/messages").status_code == 404
    assert client.get(f"/groups/no-such-group-{uuid.uuid4().hex}").status_code == 404
    assert client.get("/nowhere").status_code == 404


def test_create_and_delete_a_topic_only_after_confirming(
    client: TestClient, seeded: Seeded
) -> None:
    name = f"made-here-{uuid.uuid4().hex[:8]}"
    form = {"name": name, "partitions": "3", "replication_factor": "1"}
    preview = client.post("/topics/create", data=form)
    assert preview.status_code == 200 and 'id="confirm-create"' in preview.text
    assert not topic_exists(seeded.bootstrap, name)
    done = client.post("/topics/create", data={**form, "confirm": "yes"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith(f"/topics/{name}?")
    assert topic_exists(seeded.bootstrap, name)
    page = client.get(done.headers["location"])
    assert f"created topic {name}" in page.text and len(re.findall(r"<tr>", page.text)) >= 3
    refused = client.post(f"/topics/{name}/delete", data={"confirm_name": name[:-1]})
    assert refused.status_code == 400 and "type the topic's name" in text_of(refused.text)
    assert topic_exists(seeded.bootstrap, name)
    deleted = client.post(
        f"/topics/{name}/delete", data={"confirm_name": name}, follow_redirects=False
    )
    assert deleted.status_code == 303
    assert not topic_exists(seeded.bootstrap, name)
    bad = client.post("/topics/create", data={**form, "partitions": "many"})
    assert bad.status_code == 400 and "partitions must be a whole number" in text_of(bad.text)
    dup = client.post("/topics/create", data={**form, "name": seeded.topic, "confirm": "yes"})
    assert dup.status_code == 502 and "TOPIC_ALREADY_EXISTS" in dup.text


def test_reset_offsets_previews_then_commits_what_was_shown(
    client: TestClient, seeded: Seeded
) -> None:
    group = f"resettable-{uuid.uuid4().hex[:8]}"
    commit(seeded.bootstrap, group, seeded.topic, 9)
    preview = client.post(
        "/groups/reset", data={"group_id": group, "topic": seeded.topic, "to": "earliest"}
    )
    assert preview.status_code == 200
    assert row(preview.text, "plan", seeded.topic)[1:] == ["0", "9", "0"]
    assert committed(seeded.bootstrap, group, seeded.topic) == 9  # nothing done yet
    plan = re.findall(r'name="plan" value="([^"]+)"', preview.text)
    done = client.post(
        "/groups/reset",
        data={"group_id": group, "plan": plan, "confirm": "yes"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert committed(seeded.bootstrap, group, seeded.topic) == 0
    beyond = client.post("/groups/reset", data={"group_id": group, "to": "offset", "offset": "99"})
    assert row(beyond.text, "plan", seeded.topic)[3] == str(PRODUCED)  # clamped to the end
    bad = client.post("/groups/reset", data={"group_id": group, "to": "sideways"})
    assert bad.status_code == 400


def test_a_post_from_another_site_is_refused(client: TestClient, seeded: Seeded) -> None:
    answer = client.post(
        f"/topics/{seeded.topic}/delete",
        data={"confirm_name": seeded.topic},
        headers={"Origin": "http://elsewhere.example"},
    )
    assert answer.status_code == 403
    assert topic_exists(seeded.bootstrap, seeded.topic)


def test_an_active_group_shows_members_assignments_and_refuses_a_reset(
    client: TestClient, seeded: Seeded
) -> None:
    group = f"active-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": seeded.bootstrap,
            "group.id": group,
            "client.id": "console-test-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([seeded.topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert len(consumer.assignment()) == 2
        page = client.get(f"/groups/{group}")
        assert re.search(r'id="group-state">Stable<', page.text)
        (member,) = re.findall(r'<table id="members".*?<tbody>(.*?)</tbody>', page.text, re.S)
        member_text = text_of(member)
        assert "console-test-member" in member_text
        assert f"{seeded.topic}-0, {seeded.topic}-1" in member_text
        # nothing committed yet: both assigned partitions listed, owned, without lag
        owned = row(page.text, "offsets", seeded.topic)
        assert owned[2] == "-" and owned[4] == "-" and owned[5].startswith("console-test-member")
        preview = client.post("/groups/reset", data={"group_id": group, "to": "latest"})
        plan = re.findall(r'name="plan" value="([^"]+)"', preview.text)
        assert sorted(plan) == [f"0:1:{seeded.topic}", f"{PRODUCED}:0:{seeded.topic}"]
        refused = client.post(
            "/groups/reset", data={"group_id": group, "plan": plan, "confirm": "yes"}
        )
        assert refused.status_code == 502 and "Traceback" not in refused.text
        assert "error" in refused.text
    finally:
        consumer.close()


def test_a_read_ending_on_a_transaction_marker_returns_at_once(
    client: TestClient, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit marker takes the last offset but is no record: the read stops at the
    partition's end by position, not by waiting for a record that never comes."""
    from odradek.console import source

    topic = f"txn-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": seeded.bootstrap, "transactional.id": f"console-{topic}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(3):
        producer.produce(topic, value=f"in txn {n}".encode(), partition=0)
    producer.commit_transaction(30)
    monkeypatch.setattr(source, "BROWSE_WAIT_S", 120.0)
    began = time.monotonic()
    page = client.get(f"/topics/{topic}/messages?partition=0&offset=0&limit=10")
    assert time.monotonic() - began < 60
    assert row(client.get(f"/topics/{topic}").text, "partitions", "0")[6] == "4"
    shown = re.findall(r'<td class="num">(\d+)</td>\s*<td title', page.text)
    assert shown == ["0", "1", "2"]
