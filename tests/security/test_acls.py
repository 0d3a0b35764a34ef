"""The ACL decision (security/acls.py) against Kafka's StandardAuthorizer rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.security.acls import (
    AclBinding,
    AclFilter,
    AclIndex,
    AclOperation,
    AuthorizerSettings,
    InvalidAcl,
    PatternType,
    Permission,
    ResourceType,
    filter_matches,
    parse_super_users,
    validate_binding,
)

Op = AclOperation
T = ResourceType.TOPIC
ALICE = "User:alice"
BOB = "User:bob"
HOST = "10.0.0.1"


def acl(
    name: str = "orders",
    op: AclOperation = Op.READ,
    perm: Permission = Permission.ALLOW,
    *,
    principal: str = ALICE,
    host: str = "*",
    pattern: PatternType = PatternType.LITERAL,
    rtype: ResourceType = T,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def index(*bindings: AclBinding, **settings: object) -> AclIndex:
    return AclIndex(bindings, AuthorizerSettings(**settings))  # type: ignore[arg-type]


def test_no_acl_denies_by_default_and_allow_everyone_allows() -> None:
    assert not index().authorize(ALICE, HOST, Op.READ, T, "orders")
    assert index(allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, T, "orders")


def test_any_acl_on_the_resource_turns_allow_everyone_off_for_it() -> None:
    # an ACL for bob on the topic: alice no longer falls back to allow-everyone
    idx = index(acl(principal=BOB), allow_if_no_acl=True)
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert idx.authorize(ALICE, HOST, Op.READ, T, "payments")  # no ACL there


def test_literal_allow_for_the_principal_only() -> None:
    idx = index(acl())
    assert idx.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not idx.authorize(BOB, HOST, Op.READ, T, "orders")
    assert not idx.authorize(ALICE, HOST, Op.WRITE, T, "orders")
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "orders2")


def test_deny_wins_over_allow() -> None:
    idx = index(acl(op=Op.ALL), acl(op=Op.WRITE, perm=Permission.DENY))
    assert idx.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not idx.authorize(ALICE, HOST, Op.WRITE, T, "orders")


def test_deny_all_on_wildcard_principal_denies_everyone() -> None:
    idx = index(acl(op=Op.ALL), acl(op=Op.ALL, perm=Permission.DENY, principal="User:*"))
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "orders")


def test_deny_is_not_widened_by_implication() -> None:
    # DENY READ does not deny DESCRIBE (only ALLOWs imply)
    idx = index(acl(op=Op.DESCRIBE), acl(op=Op.READ, perm=Permission.DENY))
    assert idx.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL])
def test_describe_is_implied(granted: AclOperation) -> None:
    assert index(acl(op=granted)).authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")


def test_describe_configs_implied_by_alter_configs_only() -> None:
    assert index(acl(op=Op.ALTER_CONFIGS)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "orders")
    assert not index(acl(op=Op.ALTER)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "orders")
    assert not index(acl(op=Op.DESCRIBE)).authorize(ALICE, HOST, Op.READ, T, "orders")


def test_wildcard_resource_and_principal() -> None:
    idx = index(acl(name="*", principal="User:*"))
    assert idx.authorize(BOB, HOST, Op.READ, T, "anything")
    assert not idx.authorize(BOB, HOST, Op.READ, ResourceType.GROUP, "anything")


def test_prefixed_patterns() -> None:
    idx = index(acl(name="fin-", pattern=PatternType.PREFIXED))
    assert idx.authorize(ALICE, HOST, Op.READ, T, "fin-ledger")
    assert idx.authorize(ALICE, HOST, Op.READ, T, "fin-")
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "fi")
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "hr-fin-")
    # a literal "fin-" binding is not a prefix
    assert not index(acl(name="fin-")).authorize(ALICE, HOST, Op.READ, T, "fin-ledger")


def test_prefixed_deny_inside_a_wider_allow() -> None:
    idx = index(
        acl(name="*", op=Op.ALL),
        acl(name="secret-", op=Op.ALL, perm=Permission.DENY, pattern=PatternType.PREFIXED),
    )
    assert idx.authorize(ALICE, HOST, Op.READ, T, "public")
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "secret-plans")


def test_hosts() -> None:
    idx = index(acl(host=HOST))
    assert idx.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not idx.authorize(ALICE, "10.0.0.2", Op.READ, T, "orders")
    idx = index(acl(op=Op.ALL), acl(host="10.0.0.2", perm=Permission.DENY))
    assert idx.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not idx.authorize(ALICE, "10.0.0.2", Op.READ, T, "orders")


def test_super_users_bypass_denies() -> None:
    deny = acl(op=Op.ALL, perm=Permission.DENY, principal="User:*", name="*")
    idx = index(deny, super_users=parse_super_users("User:admin; User:ops"))
    assert idx.authorize("User:admin", HOST, Op.DELETE, T, "orders")
    assert idx.authorize("User:ops", HOST, Op.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster")
    assert not idx.authorize(ALICE, HOST, Op.READ, T, "orders")


def test_bad_super_users() -> None:
    with pytest.raises(InvalidAcl):
        parse_super_users("admin")


def test_authorize_any_by_resource_type() -> None:
    assert index(acl(op=Op.WRITE)).authorize_any(ALICE, HOST, Op.WRITE, T)
    assert not index(acl(op=Op.READ)).authorize_any(ALICE, HOST, Op.WRITE, T)
    denied = index(acl(op=Op.WRITE), acl(name="*", op=Op.WRITE, perm=Permission.DENY))
    assert not denied.authorize_any(ALICE, HOST, Op.WRITE, T)
    prefixed_deny = index(
        acl(name="a-b", op=Op.WRITE, pattern=PatternType.PREFIXED),
        acl(name="a-", op=Op.WRITE, perm=Permission.DENY, pattern=PatternType.PREFIXED),
    )
    assert not prefixed_deny.authorize_any(ALICE, HOST, Op.WRITE, T)


def test_validate_binding() -> None:
    validate_binding(acl())
    for bad in (
        acl(rtype=ResourceType.ANY),
        acl(pattern=PatternType.MATCH),
        acl(op=Op.ANY),
        acl(perm=Permission.ANY),
        acl(principal="alice"),
        acl(host=""),
        acl(rtype=ResourceType.CLUSTER, name="other"),
    ):
        with pytest.raises(InvalidAcl):
            validate_binding(bad)


def test_filters() -> None:
    literal = acl(name="orders")
    prefixed = acl(name="ord", pattern=PatternType.PREFIXED)
    wildcard = acl(name="*")
    everything = AclFilter()
    assert all(filter_matches(everything, b) for b in (literal, prefixed, wildcard))
    by_name = AclFilter(resource_name="orders")  # ANY pattern: exact name
    assert [filter_matches(by_name, b) for b in (literal, prefixed, wildcard)] == [
        True,
        False,
        False,
    ]
    match = AclFilter(resource_name="orders", pattern_type=PatternType.MATCH)
    assert all(filter_matches(match, b) for b in (literal, prefixed, wildcard))
    assert not filter_matches(AclFilter(pattern_type=PatternType.PREFIXED), literal)
    assert not filter_matches(AclFilter(principal=BOB), literal)
    assert not filter_matches(AclFilter(operation=Op.WRITE), literal)
    assert filter_matches(AclFilter(permission_type=Permission.ALLOW), literal)
    assert not filter_matches(AclFilter(resource_type=ResourceType.GROUP), literal)


names = st.text(alphabet="ab-*", min_size=1, max_size=5)
bindings = st.builds(
    AclBinding,
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    names,
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from([ALICE, BOB, "User:*"]),
    st.sampled_from([HOST, "*", "10.0.0.2"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER_CONFIGS]),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
)


def _reference(all_bindings: list[AclBinding], op: AclOperation, rtype: int, name: str) -> bool:
    """The rules read straight off Kafka's docs, by scanning every binding."""
    from odradek.security.acls import operation_matches, pattern_covers

    covering = [b for b in all_bindings if pattern_covers(b, rtype, name)]
    if not covering:
        return False
    relevant = [
        b
        for b in covering
        if b.principal in (ALICE, "User:*")
        and b.host in (HOST, "*")
        and operation_matches(b.operation, op, b.permission_type)
    ]
    if any(b.permission_type == Permission.DENY for b in relevant):
        return False
    return any(b.permission_type == Permission.ALLOW for b in relevant)


@given(
    st.lists(bindings, max_size=12),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS]),
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    names,
)
def test_index_agrees_with_a_scan(
    all_bindings: list[AclBinding], op: AclOperation, rtype: ResourceType, name: str
) -> None:
    idx = AclIndex(all_bindings, AuthorizerSettings())
    assert idx.authorize(ALICE, HOST, op, rtype, name) == _reference(all_bindings, op, rtype, name)
