"""The quorum harness's pure parts: its checkers find what they must (and nothing on a
clean history), and its fault schedule is seeded and keeps its shape."""

from __future__ import annotations

import itertools

from tests.chaos.checks import check_metadata_logs, check_topics
from tests.chaos.faults import LEADER, QuorumPlan, resolve_targets, schedule_quorum


def kinds(violations: list) -> list[str]:  # type: ignore[type-arg]
    return [violation.kind for violation in violations]


def test_topics_clean_history_passes() -> None:
    listed = {"node-1": {"admin-0", "admin-2", "chaos"}, "node-2": {"admin-0", "admin-2"}}
    assert (
        check_topics(["admin-0", "admin-1", "admin-2"], ["admin-1"], ["admin-1"], listed, "admin-")
        == []
    )


def test_topics_missing_resurrected_and_differing_are_found() -> None:
    listed = {"node-1": {"admin-1"}, "node-2": {"admin-0", "admin-1"}}
    found = check_topics(["admin-0", "admin-1"], ["admin-1"], ["admin-1"], listed, "admin-")
    assert sorted(kinds(found)) == [
        "topic_missing",
        "topic_not_deleted",
        "topic_not_deleted",
        "topics_differ",
    ]


def test_a_topic_whose_delete_was_sent_but_not_answered_may_be_either_way() -> None:
    for listed in ({"admin-0"}, set()):
        assert check_topics(["admin-0"], [], ["admin-0"], {"n": listed}, "admin-") == []


def test_metadata_logs_agree_below_the_high_watermark_only() -> None:
    a = {0: b"x", 5: b"y", 9: b"tail-a"}
    b = {0: b"x", 5: b"y", 9: b"tail-b"}
    assert check_metadata_logs({"a": a, "b": b}, {"a": 12, "b": 12}, 9) == []
    # A snapshot deleted node b's prefix: only what both hold is compared.
    assert check_metadata_logs({"a": a, "b": {5: b"y"}}, {"a": 12, "b": 9}, 9) == []


def test_metadata_logs_differing_short_or_with_a_hole_are_found() -> None:
    a = {0: b"x", 5: b"y", 9: b"z"}
    assert kinds(check_metadata_logs({"a": a, "b": {0: b"x", 5: b"Y"}}, {"a": 12, "b": 12}, 9)) == [
        "metadata_diverged"
    ]
    assert kinds(check_metadata_logs({"a": a, "b": {0: b"x"}}, {"a": 12, "b": 5}, 9)) == [
        "metadata_diverged",
        "metadata_diverged",
    ]
    assert kinds(
        check_metadata_logs({"a": a, "b": {0: b"x", 9: b"z"}}, {"a": 12, "b": 12}, 12)
    ) == ["metadata_diverged"]


def test_quorum_schedule_is_seeded_and_shaped() -> None:
    plan = QuorumPlan(cycles=200, pair=0.3, every_kind=True)
    faults = schedule_quorum(7, plan, 3)
    assert faults == schedule_quorum(7, plan, 3)
    assert {f.kind for f in faults[:4]} == {"kill", "pause", "term", "crashloop"}
    assert all(len(f.targets) == 1 for f in faults if f.kind == "crashloop")
    assert {len(f.targets) for f in faults} == {1, 2}
    assert any(LEADER in f.targets for f in faults)
    assert all(f2.at_s > f1.at_s for f1, f2 in itertools.pairwise(faults))


def test_targets_resolve_to_distinct_nodes() -> None:
    assert resolve_targets((LEADER, 2), 1, 3) == (1, 2)
    assert resolve_targets((LEADER, 1), 1, 3) == (1, 0)
    assert resolve_targets((LEADER,), None, 3) == (0,)
    assert resolve_targets((LEADER, 0), None, 3) == (1, 0)
