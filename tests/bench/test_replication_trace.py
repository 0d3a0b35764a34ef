"""bench/replication_trace.py's analysis: one leader append followed through a
follower from a hand-made trace, so every hop it prints is the difference it claims
to be (the traced runs themselves need three nodes; the script runs them)."""

from __future__ import annotations

from bench.replication_trace import HOOK, chain, spans


def row(began: float, end: float, tag: str, *rest: object) -> list[str]:
    return [f"{began:.3f}", f"{end:.3f}", tag, *(str(r) for r in rest)]


def test_the_chain_splits_one_append_into_its_hops() -> None:
    leader = [
        row(100.0, 101.0, "LAPP", 0, 967),  # partition 0, log end 967
        row(90.0, 101.5, "RMFETCH", 2),  # follower 2's parked fetch answered
        row(109.0, 109.0, "FFETCH", 0, 2, 967, 0, 967),  # its next fetch: the HW moves
        row(100.5, 109.5, "AWAIT"),
        row(112.0, 113.0, "LAPP", 0, 1934),
    ]
    follower = [
        row(104.0, 104.5, "FAPPLY", 999_875),  # the response crossed, applied
        row(105.0, 105.0, "FBUILD", "0:967"),
    ]
    lines = chain(leader, {2: follower})
    by_name = {line.split("  ")[1].strip(): line for line in lines if "n=" in line}

    def p50(name: str) -> float:
        return float(by_name[name].split("p50=")[1].split()[0])

    assert p50("leader append") == 1.0
    assert p50("append end -> acks=all answered") == 8.5
    assert p50("answered -> next append starts") == 2.5
    assert p50("append end -> its parked fetch answered") == 0.5
    assert p50("answered -> follower's apply starts") == 2.5
    assert p50("apply starts -> next Fetch built") == 1.0
    assert p50("next Fetch built -> leader reads it") == 4.0
    assert p50("append end -> follower's log end known") == 8.0


def test_spans_read_began_end_tag_and_the_hook_compiles() -> None:
    assert spans([row(1.0, 2.0, "WRITE", 1024)], "WRITE") == [(1.0, 2.0, ["1024"])]
    compile(HOOK, "sitecustomize.py", "exec")  # written to the nodes' PYTHONPATH
