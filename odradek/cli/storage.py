"""``odradek storage``: format log dirs and show their identity, as ``kafka-storage.sh``.

How this works and why: every node of a KRaft cluster must agree on one cluster id
before it starts, so the operator picks it once and writes it into each node's dirs:

    odradek storage random-uuid                    # prints a new cluster id
    odradek storage format -t <id> -c node1.properties
    odradek storage info -c node1.properties

``format`` reads the config as ``odradek serve`` does (``BrokerConfig.load``, with
``--override KEY=VALUE``) and writes ``meta.properties`` (version, cluster.id,
node.id, a new directory.id per dir) into every dir of ``log.dirs`` and
``metadata.log.dir``; the checks and the writing live in
``storage/meta_properties.py`` (``format_dirs``), so this module only parses and
prints. Every dir is checked before any is written: a dir already formatted is
refused unless ``--ignore-formatted``, one formatted for another cluster or node
always. ``info`` prints, per dir, whether it is formatted and its meta.properties.

``--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'`` (repeatable; also
``[name=...,iterations=...,salt=...,saltedpassword=...]``, base64) writes SCRAM
credentials into ``bootstrap.checkpoint`` in the metadata log dir
(metadata/bootstrap.py), which the active controller commits as the first batch of
the cluster's metadata log, so an admin user exists before any broker is reachable.
Each value is checked before anything is written; the file is written only when the
metadata log dir is formatted by this run.

Exit status: 0 done, 1 a refusal or I/O error (one line), 2 bad usage (the usage
error, an invalid cluster id, or an invalid config, one line as ``serve`` does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import click

from odradek.cli.subcommand import ArgparseStyleGroup, Args, invoke
from odradek.metadata.bootstrap import scram_bootstrap_record, write_bootstrap
from odradek.metadata.image import MetadataRecord
from odradek.server.config import BrokerConfig, ConfigError
from odradek.storage.errors import StorageError
from odradek.storage.meta_properties import (
    META_PROPERTIES_FILE,
    MetaPropertiesError,
    describe_dirs,
    format_dirs,
    parse_uuid,
    random_uuid,
    read_meta_properties,
)

NAME: Final = "storage"
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2


def _error(message: str) -> None:
    print(f"odradek storage: {message}", file=sys.stderr)


def _load(args: Args) -> BrokerConfig | None:
    try:
        return BrokerConfig.load(args.config, args.override)
    except ConfigError as error:
        _error(str(error))
        return None


def run_random_uuid(args: Args) -> int:
    print(random_uuid())
    return 0


def run_format(args: Args) -> int:
    try:
        parse_uuid(args.cluster_id)
    except ValueError as error:
        _error(f"invalid cluster id: {error}")
        return EXIT_USAGE
    config = _load(args)
    if config is None:
        return EXIT_USAGE
    bootstrap = _scram_records(args.add_scram or ())
    if bootstrap is None:
        return EXIT_USAGE
    try:
        formatted_before = bool(bootstrap) and bool(read_meta_properties(config.metadata_log_dir))
    except (StorageError, OSError) as error:
        _error(_one_line(error))
        return EXIT_ERROR
    if formatted_before:
        # its log may hold data already: bootstrap records would never be applied
        _error(
            f"metadata log dir {config.metadata_log_dir} is already formatted: "
            "--add-scram applies only to a node formatted by this run"
        )
        return EXIT_ERROR
    try:
        results = format_dirs(
            config.identity_dirs,
            args.cluster_id,
            config.node_id,
            ignore_formatted=args.ignore_formatted,
        )
    except (StorageError, OSError) as error:
        _error(_one_line(error))
        return EXIT_ERROR
    metadata_dir = config.metadata_log_dir
    if bootstrap:
        try:
            write_bootstrap(metadata_dir, bootstrap)
        except OSError as error:
            _error(_one_line(error))
            return EXIT_ERROR
    for result in results:
        kind = "metadata" if result.log_dir == metadata_dir else "data"
        if result.formatted:
            print(
                f"Formatting {kind} directory {result.log_dir} "
                f"(cluster.id={args.cluster_id}, node.id={config.node_id})"
            )
        else:
            print(f"{kind.capitalize()} directory {result.log_dir} is already formatted.")
    if not any(result.formatted for result in results):
        print("All of the log directories are already formatted.")
    return 0


def _scram_records(values: Sequence[str]) -> list[MetadataRecord] | None:
    """The records of every --add-scram value; None (after one line) on a bad one."""
    records: list[MetadataRecord] = []
    seen: set[tuple[str, str]] = set()
    for value in values:
        try:
            record = scram_bootstrap_record(value)
        except ValueError as error:
            _error(f"--add-scram: {error}")
            return None
        key = (record.fields["name"], record.fields["mechanism"])
        if key in seen:
            _error(f"--add-scram: {key[1]} of {key[0]!r} given twice")
            return None
        seen.add(key)
        records.append(record)
    return records


def run_info(args: Args) -> int:
    config = _load(args)
    if config is None:
        return EXIT_USAGE
    try:
        report = describe_dirs(config.identity_dirs, config.node_id)
    except OSError as error:
        _error(_one_line(error))
        return EXIT_ERROR
    print("Found log directories:")
    for log_dir in report.dirs:
        print(f"  {log_dir}")
    if report.found:
        print()
    for log_dir, properties in report.found.items():
        shown = ", ".join(f"{key}={value}" for key, value in sorted(properties.items()))
        print(f"Found {META_PROPERTIES_FILE} in {log_dir}: {{{shown}}}")
    if report.problems:
        print(f"\nFound problem{'s' if len(report.problems) > 1 else ''}:")
        for problem in report.problems:
            print(f"  {problem}")
        return EXIT_ERROR
    return 0


def _one_line(error: Exception) -> str:
    if isinstance(error, MetaPropertiesError):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        where = f" {error.filename}" if error.filename else ""
        return f"cannot write{where}: {error.strerror}"
    return " ".join(str(error).split())


@click.group(
    NAME,
    cls=ArgparseStyleGroup,
    short_help="format log dirs with a cluster id and show their identity (kafka-storage.sh)",
    help="Format the log dirs of a node with the cluster's id before its first "
    "start, and show what they hold, like Kafka's kafka-storage.sh.",
)
def command() -> None:
    pass


def _config_options(function: Callable[..., Any]) -> Callable[..., Any]:
    function = click.option(
        "--override", multiple=True, metavar="KEY=VALUE", help="set a property"
    )(function)
    return click.option(
        "-c",
        "--config",
        type=click.Path(path_type=Path),
        required=True,
        help="the node's server.properties",
    )(function)


@command.command("random-uuid", help="print a new random cluster id")
def _random_uuid_command(**params: Any) -> int:
    return invoke(run_random_uuid, params)


@command.command(
    "format",
    short_help="write meta.properties into every log dir and the metadata log dir",
    help="Write meta.properties (cluster.id, node.id, a new directory.id) into "
    "every dir of log.dirs and metadata.log.dir. Every dir is checked first: one "
    "already formatted is refused unless --ignore-formatted, one formatted for "
    "another cluster or node always.",
)
@click.option(
    "-t", "--cluster-id", required=True, help="the cluster id (odradek storage random-uuid)"
)
@_config_options
@click.option(
    "-g",
    "--ignore-formatted",
    is_flag=True,
    help="leave dirs already formatted for this cluster and node as they are",
)
@click.option(
    "-S",
    "--add-scram",
    multiple=True,
    metavar="SCRAM_CREDENTIAL",
    help="a SCRAM credential for the metadata log's first batch, e.g. "
    "'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
    '\'SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]\' '
    "(repeatable)",
)
def _format_command(**params: Any) -> int:
    return invoke(run_format, params)


@command.command(
    "info",
    short_help="show, per log dir, whether it is formatted and its meta.properties",
    help="Show, for every dir of log.dirs and metadata.log.dir, whether it is "
    "formatted and what its meta.properties says. Exit status 1 if a problem is found.",
)
@_config_options
def _info_command(**params: Any) -> int:
    return invoke(run_info, params)
