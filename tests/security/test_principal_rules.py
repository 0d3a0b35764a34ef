"""ssl.principal.mapping.rules (security/principal.py), with Kafka's documented
examples: rules tried in order, the first whose pattern matches the whole DN wins."""

from __future__ import annotations

import pytest

from odradek.security.principal import NoMatchingRule, PrincipalMapper, RuleError, parse_rules

DN = "CN=alice,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"


def test_default_is_the_dn_itself() -> None:
    assert PrincipalMapper().name(DN) == DN
    assert PrincipalMapper("DEFAULT").name("CN=x") == "CN=x"


def test_kafka_doc_rules() -> None:
    rules = (
        r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        r"RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        r"RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    mapper = PrincipalMapper(rules)
    assert mapper.name(DN) == "alice"
    assert mapper.name("CN=Bob,OU=Admin,O=A,L=B,ST=C,C=D") == "bob@admin"
    assert mapper.name("OU=x,CN=Carol.Smith,O=y") == "carol.smith"
    assert mapper.name("O=nobody") == "O=nobody"  # DEFAULT at the end


def test_upper_case_and_escaped_slash() -> None:
    mapper = PrincipalMapper(r"RULE:^CN=([^,]*),.*$/svc\/$1/U")
    assert mapper.name("CN=kafka,O=acme") == "SVC/KAFKA"


def test_pattern_must_match_the_whole_dn() -> None:
    mapper = PrincipalMapper(r"RULE:CN=alice/matched/")  # no .* : the DN has more
    with pytest.raises(NoMatchingRule, match="CN=alice,O=acme"):
        mapper.name("CN=alice,O=acme")


def test_no_rule_applies_without_default() -> None:
    mapper = PrincipalMapper(r"RULE:^CN=(.*),O=acme$/$1/")
    assert mapper.name("CN=alice,O=acme") == "alice"
    with pytest.raises(NoMatchingRule):
        mapper.name("CN=eve,O=evil")


def test_whitespace_and_newlines_between_rules() -> None:
    rules = parse_rules("RULE:^CN=(.*)$/$1/L ,\n  DEFAULT")
    assert len(rules) == 2


@pytest.mark.parametrize(
    "bad",
    ["", "RULE:^CN=(.*$/$1/", "RULE:^CN=(.*)$/$1", "NOTARULE", "RULE:x/$z/", "DEFAULT,junk"],
)
def test_bad_rules_are_refused(bad: str) -> None:
    with pytest.raises(RuleError):
        parse_rules(bad)
