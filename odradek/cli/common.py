"""Shared pieces of the client tools (``topics``, ``produce``, ``consume``, ...).

How this works and why: ``tool_failure`` turns every client-side failure (a broker
error, an unreachable bootstrap, a bad value) into click's one-line ``Error: ...``
with exit status 1 (``main`` applies it to the client tools), so no tool ever prints
a traceback; bad arguments stay click's usage errors (status 2). Every admin request
goes through the client's ``AdminClient`` (``admin_client``); ``result`` waits for one
of its futures and turns a failure into a one-line ``CliError``.
"""

from __future__ import annotations

import concurrent.futures
import json
import ssl
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.table import Table

from odradek.client._core.config import ConfigError
from odradek.client._core.connection import KafkaConnectionError, UnsupportedVersionError
from odradek.client._core.errors import KafkaError
from odradek.client._core.errors import error_code as client_error_code
from odradek.client._core.sasl import SaslCredentials
from odradek.client._core.types import KafkaException, TopicPartition
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.types import OffsetSpec, TopicCollection, TopicDescription

DEFAULT_BOOTSTRAP = "localhost:9092"
REQUEST_TIMEOUT_S = 30.0  # each admin operation, lookups included
TP = tuple[str, int]


class CliError(Exception):
    """A failure to report as one line with exit status 1."""


FAILURES = (
    CliError,
    KafkaException,
    KafkaError,
    KafkaConnectionError,
    UnsupportedVersionError,
    ConfigError,
    ConnectionError,
    OSError,
    TimeoutError,
)


def describe_failure(error: BaseException) -> str:
    inner = getattr(error, "error", None)
    if isinstance(error, KafkaException) and inner is not None and inner is not error:
        error = inner
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split())


def tool_failure(error: Exception) -> click.ClickException | None:
    """A client tool's failure (a broker error, an unreachable bootstrap, a bad value)
    as click's one-line ``Error: ...`` with exit status 1; None for anything else (a
    bug keeps its traceback). ``main`` applies it to the client tools' commands."""
    if isinstance(error, BrokenPipeError):  # before OSError: `| head` ends output quietly
        return None
    if isinstance(error, (*FAILURES, ValueError)):  # ValueError: e.g. a bad bootstrap
        return click.ClickException(describe_failure(error))
    if isinstance(error, KeyError):
        return click.ClickException(f"unknown {describe_failure(error)}")
    return None


_COMMAND_CONFIG = "odradek.command_config"
# Kafka's Java client names in a --command-config file -> the client's (librdkafka's)
# names, for the PEM stores odradek's client can read.
_PEM_STORES = {
    "ssl.truststore.location": ("ssl.truststore.type", ("ssl.ca.location",)),
    "ssl.keystore.location": (
        "ssl.keystore.type",
        ("ssl.certificate.location", "ssl.key.location"),
    ),
}


def read_command_config(path: str) -> dict[str, str]:
    """Client properties from a ``--command-config`` file (Java .properties), with
    the Java client's PEM store names taken as librdkafka's; CliError if unreadable."""
    from pathlib import Path

    from odradek.server.config import ConfigError as PropertiesError
    from odradek.server.config import read_properties_file

    try:
        properties = read_properties_file(Path(path))
    except PropertiesError as error:
        message = str(error).removeprefix("invalid value for --config: ")
        raise CliError(f"--command-config: {message}") from None
    for java_name, (type_name, names) in _PEM_STORES.items():
        location = properties.pop(java_name, None)
        kind = properties.pop(type_name, "PEM")
        if location is None:
            continue
        if kind.upper() != "PEM":
            raise CliError(
                f"--command-config {path}: {java_name} of type {kind} cannot be read; "
                f"give PEM files ({', '.join(names)})"
            )
        for name in names:
            properties.setdefault(name, location)
    if properties.get("ssl.endpoint.identification.algorithm") == "":  # Java's "off"
        properties["ssl.endpoint.identification.algorithm"] = "none"
    return properties


def _remember_command_config(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    """Read the file and build its TLS context now: a bad file, key or password is
    click's one-line usage error before the command starts."""
    if value is None:
        return
    from odradek.client._core.config import ClientConfig
    from odradek.client._core.sasl import sasl_credentials

    try:
        properties = read_command_config(value)
        config = ClientConfig({"bootstrap.servers": "-", **properties}, "admin")
        context = config.ssl_context
    except (CliError, ConfigError) as error:
        raise click.BadParameter(str(error).removeprefix("--command-config: ")) from None
    ctx.meta[_COMMAND_CONFIG] = properties
    ctx.meta[_COMMAND_CONFIG + ".ssl"] = context
    ctx.meta[_COMMAND_CONFIG + ".sasl"] = sasl_credentials(config)


def command_config() -> dict[str, str]:
    """The running command's ``--command-config`` properties ({} if none)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_COMMAND_CONFIG, {})) if ctx is not None else {}


def client_ssl_context() -> ssl.SSLContext | None:
    """The TLS context ``--command-config`` asks for, for the tools that open their own
    ``BrokerConnection`` rather than a client (None: plaintext)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_COMMAND_CONFIG + ".ssl") if ctx is not None else None


def client_sasl() -> SaslCredentials | None:
    """The SASL login ``--command-config`` asks for (security.protocol SASL_*), for the
    tools that open their own ``BrokerConnection``."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_COMMAND_CONFIG + ".sasl") if ctx is not None else None


def command_config_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """Kafka tools' ``--command-config FILE``: client properties (security.protocol,
    ssl.ca.location, ...) for every connection the command makes."""
    return click.option(
        "--command-config",
        type=click.Path(dir_okay=False),
        expose_value=False,
        is_eager=True,
        callback=_remember_command_config,
        help="client properties file (security.protocol, ssl.ca.location, ...)",
    )(function)


def bootstrap_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap-server`` and Kafka tools' ``--command-config FILE`` (client
    properties such as security.protocol and ssl.ca.location, for every client the
    command makes: ``command_config()``)."""
    function = command_config_option(function)
    return click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        help="host:port of a broker to start from",
    )(function)


def topic_argument(function: Callable[..., Any]) -> Callable[..., Any]:
    """TOPIC as an argument or as ``--topic`` (Kafka's spelling): see ``one_topic``."""
    function = click.option("--topic", "topic_option", help="the topic (Kafka's spelling)")(
        function
    )
    return click.argument("topic", required=False)(function)


def one_topic(topic: str | None, option: str | None) -> str:
    if (topic is None) == (option is None) or not (topic or option):
        raise click.UsageError("Missing argument: name one topic (TOPIC or --topic TOPIC)")
    return topic if topic is not None else str(option)


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people, json for scripts",
    )(function)


def parse_pairs(items: Iterable[str], what: str = "config") -> dict[str, str]:
    """``k=v`` strings (each may hold several, comma-separated) to a dict."""
    pairs: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise click.BadParameter(f"{part!r} is not KEY=VALUE", param_hint=what)
            pairs[key] = value
    return pairs


def emit(
    output: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], title: str | None = None
) -> None:
    """Print rows as a rich table (``table``) or a JSON list (``json``)."""
    if output == "json":
        click.echo(json.dumps(list(rows), default=str))
        return
    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.upper().replace("_", "-"), overflow="fold")
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    Console(width=max(Console().width, 120) if not sys.stdout.isatty() else None).print(table)


def error_code(error: BaseException) -> ErrorCode | None:
    """The broker's error code inside a client failure, if it carries one."""
    code = client_error_code(getattr(error, "error", error))  # inside a KafkaException
    return code if isinstance(code, ErrorCode) else None


@contextmanager
def admin_client(bootstrap: str) -> Iterator[AdminClient]:
    client = AdminClient(
        {"bootstrap.servers": bootstrap, "client.id": "odradek-cli", **command_config()}
    )
    try:
        yield client
    finally:
        client.close()


def result(future: concurrent.futures.Future[Any], what: str) -> Any:
    """Wait for one admin future; a failure is one line naming ``what``."""
    try:
        return future.result(REQUEST_TIMEOUT_S + 5)
    except KafkaException as error:
        text = describe_failure(error)
        # the client names the item too ("CODE: topic t: message"): say it once
        code, sep, rest = text.partition(": ")
        if sep and rest.startswith(f"{what}: "):
            text = f"{code}: {rest[len(what) + 2 :]}"
        raise CliError(f"{what}: {text}") from None
    except concurrent.futures.TimeoutError:
        raise CliError(f"{what}: no answer within {REQUEST_TIMEOUT_S:.0f} s") from None


def describe_topics(
    admin: AdminClient, names: Sequence[str], skip_missing: bool = False
) -> dict[str, TopicDescription]:
    """Descriptions of ``names``; unknown topics are skipped (``skip_missing``, for
    listings racing a deletion) or one ``CliError`` naming them all."""
    if not names:
        return {}
    futures = admin.describe_topics(TopicCollection(list(names)), request_timeout=REQUEST_TIMEOUT_S)
    found: dict[str, TopicDescription] = {}
    missing = []
    for name, future in futures.items():
        try:
            found[name] = future.result(REQUEST_TIMEOUT_S + 5)
        except KafkaException as error:
            if error_code(error) != ErrorCode.unknown_topic_or_partition:
                raise CliError(f"topic {name}: {describe_failure(error)}") from None
            missing.append(name)
    if missing and not skip_missing:
        raise CliError(f"unknown topic: {', '.join(missing)}")
    return found


def topic_partitions(admin: AdminClient, topic: str) -> list[int]:
    return [p.id for p in describe_topics(admin, [topic])[topic].partitions]


def list_offsets(admin: AdminClient, tps: Iterable[TP], spec: OffsetSpec) -> dict[TP, int]:
    """Each partition's offset for ``spec`` (earliest, latest or a timestamp: -1 if none)."""
    wanted = {TopicPartition(t, p): spec for t, p in tps}
    if not wanted:
        return {}
    futures = admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
    return {
        (tp.topic, tp.partition): int(result(f, f"offsets of {tp.topic}-{tp.partition}").offset)
        for tp, f in futures.items()
    }
