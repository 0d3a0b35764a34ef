"""Kafka's ``ssl.principal.mapping.rules``: a client certificate's DN to a user name.

How this works and why: on an mTLS listener Kafka names the client after its
certificate's subject, written as an RFC 2253 distinguished name
(``CN=alice,OU=eng,O=acme``: the most specific attribute first, no spaces after the
commas — Java's ``X500Principal.getName()``). ``ssl.principal.mapping.rules`` then
rewrites that string. Kafka documents the rules as a comma-separated list, tried in
order, the first that matches deciding:

- ``RULE:pattern/replacement/`` — when the regex ``pattern`` matches the *whole* DN,
  the name is the DN with the match replaced by ``replacement`` (Java's ``$1`` group
  references); a trailing ``L`` or ``U`` (``RULE:.../.../L``) lower- or upper-cases the
  result. ``/`` inside a pattern or replacement is written ``\\/``.
- ``DEFAULT`` — the DN itself. It is the default value of the property.

When no rule matches, Kafka fails the authentication (``NoMatchingRule``): the caller
gets ``NoMatchingRule`` and closes the connection. Java's regex dialect is close to
Python's for what rules use (groups, classes, anchors, lazy quantifiers); the one
translation made is the replacement's ``$n`` to Python's ``\\g<n>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DEFAULT_RULES: Final = "DEFAULT"

# One rule and the separator after it: DEFAULT, RULE:pattern/replacement/[LU], or
# anything else (refused). Inside pattern and replacement a backslash escapes the
# next character, so "\/" is a slash that does not end the part.
_RULE: Final = re.compile(
    r"\s*(?:(?P<default>DEFAULT)"
    r"|RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?)"
    r"|(?P<other>[^,]*))\s*(?:,|$)"
)


class RuleError(ValueError):
    """``ssl.principal.mapping.rules`` does not parse."""


class NoMatchingRule(Exception):
    """No rule applies to a DN: Kafka refuses the client."""


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self.replacement, dn, count=1)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name


def _java_replacement(text: str) -> str:
    """Java's replacement syntax (``$1``, ``\\x`` escapes) as Python's (``\\g<1>``)."""
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            escaped = text[i + 1]
            out.append("\\\\" if escaped == "\\" else escaped)
            i += 2
        elif char == "$":
            match = re.match(r"\d+|\{(\w+)\}", text[i + 1 :])
            if match is None:
                raise RuleError(f"illegal group reference in replacement {text!r}")
            group = match[1] or match[0]
            out.append(f"\\g<{group}>")
            i += 1 + len(match[0])
        else:
            out.append("\\\\" if char == "\\" else char)
            i += 1
    return "".join(out)


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of ``ssl.principal.mapping.rules``; RuleError names a bad one."""
    rules: list[Rule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise RuleError(f"invalid rule: {text[position:]!r}")
        position = match.end()
        if match["default"]:
            rules.append(Rule(None))
        elif match["pattern"] is not None:
            pattern = match["pattern"].replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as error:
                raise RuleError(f"invalid rule pattern {pattern!r}: {error}") from None
            replacement = _java_replacement(match["replacement"].replace("\\/", "/"))
            rules.append(Rule(compiled, replacement, match["case"]))
        elif match["other"] and match["other"].strip():
            raise RuleError(f"invalid rule: {match['other'].strip()!r}")
    if not rules:
        raise RuleError("no rules given (the default is DEFAULT)")
    return tuple(rules)


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` compiled once per listener."""

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        self.rules = parse_rules(rules)

    def name(self, dn: str) -> str:
        """The user name for a certificate DN; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")


def subject_dn(der_certificate: bytes) -> str:
    """A DER certificate's subject as Kafka's principal builder sees it (RFC 2253)."""
    from cryptography import x509  # only mTLS connections pay for the import

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
