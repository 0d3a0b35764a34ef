"""Kafka's JAAS configuration syntax (``sasl.jaas.config``), parsed without Java.

How this works and why: Kafka brokers take SASL users for PLAIN from a JAAS login
module line such as::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

The grammar (Kafka's JaasConfig, after Java's ConfigFile): one or more entries, each
a login module class name, a control flag (``required``, ``requisite``,
``sufficient``, ``optional``), then ``key=value`` options, and a closing ``;``. A
value is a bare token or a double-quoted string; inside quotes a backslash escapes
the next character. Kafka's broker property holds exactly one entry; more is an
error there as here. Errors are ``JaasError`` with a one-line message that never
echoes option values (they are passwords).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

CONTROL_FLAGS: Final = frozenset({"required", "requisite", "sufficient", "optional"})
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PUNCTUATION: Final = "=;"


class JaasError(ValueError):
    """A JAAS configuration that does not parse; the message is one line."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users: each ``user_<name>="<password>"`` option (Kafka's
        PlainServerCallbackHandler reads the same)."""
        return {
            key[len("user_") :]: value
            for key, value in self.options.items()
            if key.startswith("user_") and len(key) > len("user_")
        }


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(token, quoted) pairs; ``=`` and ``;`` are tokens of their own."""
    tokens: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace():
            i += 1
        elif char in _PUNCTUATION:
            tokens.append((char, False))
            i += 1
        elif char == '"':
            i += 1
            out = []
            while True:
                if i >= n:
                    raise JaasError("unterminated quoted value")
                char = text[i]
                if char == "\\" and i + 1 < n:
                    out.append(text[i + 1])
                    i += 2
                elif char == '"':
                    i += 1
                    break
                else:
                    out.append(char)
                    i += 1
            tokens.append(("".join(out), True))
        elif text.startswith("//", i):  # Java ConfigFile comments
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasError("unterminated comment")
            i = end + 2
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in _PUNCTUATION + '"':
                i += 1
            tokens.append((text[start:i], False))
    return tokens


def parse_jaas(text: str) -> list[JaasEntry]:
    """Every login module entry of ``text`` (at least one)."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    position = 0

    def take() -> tuple[str, bool]:
        nonlocal position
        if position >= len(tokens):
            raise JaasError("unexpected end: an entry must end with ';'")
        token = tokens[position]
        position += 1
        return token

    while position < len(tokens):
        module, quoted = take()
        if quoted or module in _PUNCTUATION:
            raise JaasError(f"expected a login module class name, got {module!r}")
        flag, quoted = take()
        if quoted or flag.lower() not in CONTROL_FLAGS:
            shown = "a quoted value" if quoted else repr(flag)
            raise JaasError(
                f"{module}: expected a control flag ({', '.join(sorted(CONTROL_FLAGS))}), "
                f"got {shown}"
            )
        options: dict[str, str] = {}
        while True:
            key, quoted = take()
            if key == ";" and not quoted:
                break
            if quoted or key in _PUNCTUATION:
                raise JaasError(f"{module}: expected an option name or ';'")
            equals, quoted = take()
            if equals != "=" or quoted:
                raise JaasError(f"{module}: option {key!r} has no '=' value")
            value, quoted = take()
            if value in _PUNCTUATION and not quoted:
                raise JaasError(f"{module}: option {key!r} has no value")
            if key in options:
                raise JaasError(f"{module}: option {key!r} given twice")
            options[key] = value
        entries.append(JaasEntry(module, flag.lower(), options))
    if not entries:
        raise JaasError("no login module entry")
    return entries


def parse_broker_jaas(text: str) -> JaasEntry:
    """A broker's ``sasl.jaas.config`` value: exactly one login module entry."""
    entries = parse_jaas(text)
    if len(entries) != 1:
        raise JaasError(f"expected one login module entry, got {len(entries)}")
    return entries[0]
