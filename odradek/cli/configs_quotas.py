"""``odradek configs`` for client quotas: kafka-configs.sh's users, clients and ips.

How this works and why: a quota entity can name two types at once (``--entity-type
users --entity-name alice --entity-type clients --entity-name app``), each type paired
with the ``--entity-name`` or ``--entity-default`` that follows it, so the order of
the words matters and click's options (one value per name, order lost) cannot carry
it. configs.py hands any ``describe``/``alter`` whose entity is a user, client or ip
here (``wants``), and this module reads the words itself: ``--entity-type``,
``--entity-name``, ``--entity-default`` and the shortcuts ``--user``/``--client``/
``--ip`` and ``--user-defaults``/``--client-defaults``/``--ip-defaults``;
``--add-config k=v,...`` and ``--delete-config k,...``; ``--bootstrap-server``.
A user's SCRAM credentials (``SCRAM-SHA-256=[...]`` keys) share the users entity:
their changes go to configs_users.py, and a user's describe prints both kinds of line.

``--alter`` sends one AlterClientQuotas entry; ``--describe`` one DescribeClientQuotas
(without a name: every entity of the given types, only those types, as Kafka) and
prints Kafka's lines: ``Quota configs for user-principal 'alice' are
producer_byte_rate=1048576.0``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Sequence
from typing import Any, Final

import click

from odradek.cli import configs_users
from odradek.cli.common import DEFAULT_BOOTSTRAP, REQUEST_TIMEOUT_S, admin_client, result
from odradek.client.admin.quotas import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
)

# kafka-configs.sh's entity types -> the protocol's
QUOTA_TYPES: Final = {
    "users": "user",
    "user": "user",
    "clients": "client-id",
    "client": "client-id",
    "ips": "ip",
    "ip": "ip",
}
_SHORTCUTS: Final = {"--user": "user", "--client": "client-id", "--ip": "ip"}
_DEFAULT_SHORTCUTS: Final = {
    "--user-defaults": "user",
    "--client-defaults": "client-id",
    "--ip-defaults": "ip",
}
_LABELS: Final = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_PLURAL: Final = {"user": "users", "client-id": "clients", "ip": "ips"}


def wants(args: Sequence[str]) -> bool:
    """Whether a configs command's words name a quota entity (configs.py's hook)."""
    for index, word in enumerate(args):
        if word in _SHORTCUTS or word in _DEFAULT_SHORTCUTS:
            return True
        value = None
        if word in ("--entity-type", "-t") and index + 1 < len(args):
            value = args[index + 1]
        elif word.startswith("--entity-type="):
            value = word.split("=", 1)[1]
        if value in QUOTA_TYPES:
            return True
    return False


class _Words:
    """The command's words as kafka-configs.sh reads them."""

    def __init__(self, args: Sequence[str]) -> None:
        self.types: list[str] = []
        self.names: list[str | None] = []
        self.add: list[str] = []
        self.delete: list[str] = []
        self.bootstrap = DEFAULT_BOOTSTRAP
        self.output = "table"
        words = list(args)
        while words:
            word = words.pop(0)
            if "=" in word and word.startswith("--"):
                word, value = word.split("=", 1)
                words.insert(0, value)
            if word in ("--entity-default",):
                self.names.append(None)
            elif word in _DEFAULT_SHORTCUTS:
                self.types.append(_DEFAULT_SHORTCUTS[word])
                self.names.append(None)
            elif word in ("--help", "-h"):
                raise click.UsageError(_USAGE)
            elif not word.startswith("-"):  # odradek's spelling: NAME -t users
                self.names.append(word)
            else:
                if not words:
                    raise click.UsageError(f"{word} needs a value")
                value = words.pop(0)
                self._take(word, value)
        if len(self.names) > len(self.types):
            raise click.UsageError("--entity-name/--entity-default without an --entity-type")

    def _take(self, word: str, value: str) -> None:
        if word in ("--entity-type", "-t"):
            if value not in QUOTA_TYPES:
                raise click.UsageError(
                    f"--entity-type {value} cannot be combined with users, clients or ips"
                )
            self.types.append(QUOTA_TYPES[value])
        elif word == "--entity-name":
            self.names.append(value)
        elif word in _SHORTCUTS:
            self.types.append(_SHORTCUTS[word])
            self.names.append(value)
        elif word == "--add-config":
            self.add.append(value)
        elif word == "--delete-config":
            self.delete.append(value)
        elif word in ("--bootstrap-server", "-b"):
            self.bootstrap = value
        elif word in ("--output", "-o"):
            if value not in ("table", "json"):
                raise click.UsageError(f"--output must be table or json, not {value!r}")
            self.output = value
        else:
            raise click.UsageError(f"no such option for quota entities: {word}")

    def raw_settings(self) -> dict[str, str]:
        from odradek.cli.configs import kafka_config_list

        found: dict[str, str] = {}
        for item in self.add:
            found.update(kafka_config_list(item))
        return found

    def settings(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for key, text in self.raw_settings().items():
            try:
                value = float(text)
            except ValueError:
                raise click.BadParameter(
                    f"{key}={text}: a quota is a number", param_hint="--add-config"
                ) from None
            if not math.isfinite(value):
                raise click.BadParameter(f"{key}={text}: not a number", param_hint="--add-config")
            found[key] = value
        return found

    def deletes(self) -> list[str]:
        return [k.strip() for item in self.delete for k in item.split(",") if k.strip()]


_USAGE: Final = (
    "configs --alter|--describe --entity-type users|clients|ips "
    "[--entity-name NAME | --entity-default] (a second --entity-type users/clients pairs "
    "them), --add-config k=v,... --delete-config k,..."
)


def entity_text(entity: ClientQuotaEntity) -> str:
    """Kafka's words for an entity: ``user-principal 'alice', client-id 'app'``."""
    parts = []
    for entity_type in ("user", "client-id", "ip"):
        if entity_type in entity:
            name = entity[entity_type]
            label = _LABELS[entity_type]
            parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(parts)


def _value_text(value: float) -> str:
    """A double as Java prints it (``1048576.0``, ``1.048576E7`` from 10^7 up)."""
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-3):
        mantissa, exponent = f"{value:.15E}".split("E")
        mantissa = mantissa.rstrip("0")
        mantissa += "0" if mantissa.endswith(".") else ""
        return f"{mantissa}E{int(exponent)}"
    return repr(float(value))


def describe_line(entity: ClientQuotaEntity, values: dict[str, float]) -> str:
    shown = ", ".join(f"{k}={_value_text(v)}" for k, v in sorted(values.items()))
    return f"Quota configs for {entity_text(entity)} are {shown}"


def run(action: str, args: Sequence[str]) -> None:
    words = _Words(args)
    if not words.types:
        raise click.UsageError(_USAGE)
    if len(set(words.types)) != len(words.types):
        raise click.UsageError("an entity type is named twice")
    if "ip" in words.types and len(words.types) > 1:
        raise click.UsageError("--entity-type ips cannot be combined with users or clients")
    if action == "alter":
        _alter(words)
    else:
        _describe(words)


def _entity(words: _Words) -> ClientQuotaEntity:
    if len(words.names) != len(words.types):
        raise click.UsageError("name each entity: --entity-name NAME or --entity-default")
    return ClientQuotaEntity(dict(zip(words.types, words.names, strict=True)))


def _alter(words: _Words) -> None:
    entity = _entity(words)
    deletes = words.deletes()
    if configs_users.scram_change(words.raw_settings(), deletes):
        _alter_scram(words, entity, deletes)
        return
    settings = words.settings()
    if not settings and not deletes:
        raise click.UsageError("nothing to alter: give --add-config or --delete-config")
    both = sorted(set(settings) & set(deletes))
    if both:
        raise click.UsageError(f"set and deleted at once: {', '.join(both)}")
    ops: dict[str, float | None] = {**settings, **{k: None for k in deletes}}
    with admin_client(words.bootstrap) as admin:
        futures = admin.alter_client_quotas(
            [ClientQuotaAlteration(entity, ops)], request_timeout=REQUEST_TIMEOUT_S
        )
        result(futures[entity], f"cannot alter quotas of {entity_text(entity)}")
    if len(entity) == 1 and next(iter(entity.values())) is None:
        click.echo(f"Completed updating default config for {_PLURAL[next(iter(entity))]}.")
    else:
        named = " ".join(f"{t} {n if n is not None else '<default>'}" for t, n in entity.items())
        click.echo(f"Completed updating config for {named.replace('client-id', 'client')}.")


def _alter_scram(words: _Words, entity: ClientQuotaEntity, deletes: list[str]) -> None:
    """A user's SCRAM credentials: configs_users.py's (which refuses quota keys beside
    them with Kafka's message)."""
    user = entity.get("user")
    if list(entity) != ["user"] or user is None:
        raise click.UsageError("SCRAM credentials belong to one named user (--entity-name)")
    with admin_client(words.bootstrap) as admin:
        configs_users.alter_user(admin, user, words.raw_settings(), deletes)
    click.echo(f"Completed updating config for user {user}.")


def _describe(words: _Words) -> None:
    components = []
    for index, entity_type in enumerate(words.types):
        if index >= len(words.names):
            components.append(ClientQuotaFilterComponent.of_entity_type(entity_type))
        elif words.names[index] is None:
            components.append(ClientQuotaFilterComponent.of_default_entity(entity_type))
        else:
            name = words.names[index]
            assert name is not None
            components.append(ClientQuotaFilterComponent.of_entity(entity_type, name))
    with admin_client(words.bootstrap) as admin:
        found: dict[ClientQuotaEntity, dict[str, float]] = result(
            admin.describe_client_quotas(
                ClientQuotaFilter.contains_only(components), request_timeout=REQUEST_TIMEOUT_S
            ),
            "cannot describe quotas",
        )
        # A user's SCRAM credentials are described with its quotas, as kafka-configs.sh.
        user = words.names[0] if words.names else None
        scram = words.types == ["user"] and (not words.names or user is not None)
        if words.output == "json":
            rows: list[dict[str, Any]] = [
                {"entity": dict(entity), "quotas": values} for entity, values in found.items()
            ]
            if scram:
                rows += _scram_rows(admin, user)
            click.echo(json.dumps(rows))
            return
        for entity, values in found.items():
            click.echo(describe_line(entity, values))
        if scram:
            configs_users.describe_users(admin, user, "table")


def _scram_rows(admin: Any, user: str | None) -> list[dict[str, Any]]:
    """configs_users.py's JSON rows (user, mechanism, iterations), to print one list."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        configs_users.describe_users(admin, user, "json")
    text = buffer.getvalue().strip()
    rows: list[dict[str, Any]] = json.loads(text) if text else []
    return rows


class QuotaCommand(click.Command):
    """``configs describe|alter`` for quota entities: takes the words as they are."""

    def __init__(self, action: str) -> None:
        super().__init__(
            action,
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
            add_help_option=False,
        )
        self.action = action

    def invoke(self, ctx: click.Context) -> None:
        run(self.action, ctx.args)


__all__ = ["QuotaCommand", "describe_line", "entity_text", "wants"]
