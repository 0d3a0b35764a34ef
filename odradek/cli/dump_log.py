"""``odradek dump-log``: print what is on disk in segments, indexes and state files.

How this works and why: when a partition misbehaves the first question is what the
files really hold. Like Kafka's DumpLogSegments, this command reads them directly
instead of opening the log, because opening recovers: it would truncate a torn tail
and rebuild indexes, hiding exactly what we want to see. Nothing here ever writes.

Each FILE is dispatched on its name: ``.log``, ``.index``, ``.timeindex``,
``.snapshot``, ``.checkpoint`` (a KIP-630 metadata snapshot) or
``leader-epoch-checkpoint`` (a trailing ``.deleted`` is allowed).

- ``.log`` files are read batch by batch through a read-ahead window of
  ``READ_CHUNK_BYTES``, so memory is bounded by one chunk (or one batch, when a batch
  is larger and its records are printed) whatever the segment's size; the CRC of a
  larger batch is computed chunk by chunk. The dump of a file stops at the first bad
  batch (bad magic or length, CRC mismatch, offsets going backwards, undecodable
  records), the point where recovery would cut the log, with a line naming its position.
- ``.index`` and ``.timeindex`` files print their entries, or with
  ``--verify-index-only`` are checked against the sibling ``.log``: the entries and
  the log's batch headers are walked together in one forward pass (both are sorted),
  so verification costs one scan of the headers and no per-batch memory.
- producer snapshots and the epoch checkpoint are small and decoded by the storage
  layer; a metadata snapshot (``<offset>-<epoch>.checkpoint``) is checked whole by
  ``metadata/snapshot.py`` and printed as header, batches (records through the
  cluster-metadata decoder with ``--print-data-log``) and footer.

With ``--print-data-log`` the records of internal topics are decoded by the decoder
their directory implies (or that a flag names): ``__consumer_offsets`` (offsets_decoder.py),
``__transaction_state`` (transaction_log_decoder.py; ``--transaction-log-decoder``
also implies ``--print-data-log``, as in Kafka) and ``__cluster_metadata``; control
batches show their marker (``endTxnMarker: COMMIT coordinatorEpoch: N``).

Index dumping and verification live in dump_index.py; the file reading both share
(read-ahead window, header scan, error types) in dump_common.py.

Exit status: 0 when every file was read and valid, 1 otherwise (a problem with one
file is reported on one line and the next file is still dumped), 2 for bad usage.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TextIO

import click

from odradek.cli import metadata_decoder, offsets_decoder, transaction_log_decoder
from odradek.cli.dump_common import (
    DumpError,
    InvalidBatch,
    Options,
    Target,
    TornTail,
    Window,
    batch_crc,
    open_regular,
    scan_headers,
    tail_text,
)
from odradek.cli.dump_index import dump_offset_index, dump_time_index
from odradek.cli.subcommand import ArgparseStyleCommand, Args, Checked, invoke
from odradek.metadata.snapshot import read_snapshot as read_metadata_snapshot
from odradek.raft.snapshots import SNAPSHOT_SUFFIX as METADATA_SNAPSHOT_SUFFIX
from odradek.records.batch import (
    COMPRESSION_NAMES,
    LOG_APPEND_TIME,
    NO_SEQUENCE,
    BatchHeader,
    unpack_header,
)
from odradek.records.codec import (
    ABORT_MARKER,
    COMMIT_MARKER,
    Record,
    decode_control_record,
    decode_end_txn_marker,
    iter_records,
)
from odradek.records.errors import CorruptRecordError
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from odradek.storage.errors import StorageError
from odradek.storage.producer_state import SNAPSHOT_SUFFIX, ProducerEntry, read_snapshot
from odradek.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
)

NAME: Final = "dump-log"
SEQUENCE_MODULUS: Final = 2**31
# A metadata snapshot is read whole (its records are checked before any is printed);
# one of 100,000 records is ~13 MB.
MAX_SNAPSHOT_DUMP_BYTES: Final = 2**30
# Kafka's ControlRecordType ids; only ABORT and COMMIT have a value we decode.
CONTROL_TYPE_NAMES: Final = {
    ABORT_MARKER: "ABORT",
    COMMIT_MARKER: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

# records.py names the batch by its position in the buffer it was given, which is
# not the file position; the dump says the file position itself.
_RECORDS_ERROR_PREFIX = re.compile(r"^batch at base offset -?\d+ \(position \d+\): ")


# -- command line ----------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def run(args: Args) -> int:
    options = Options(
        # Kafka's --transaction-log-decoder implies --print-data-log
        args.print_data_log or args.transaction_log_decoder,
        args.verify_index_only,
        args.max_bytes,
        args.offsets_decoder,
        args.cluster_metadata_decoder,
        args.transaction_log_decoder,
    )
    for stream in (sys.stdout, sys.stderr):  # odd file names or terminals never crash a dump
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    files = list(args.files) + [
        Path(item) for given in args.files_option for item in given.split(",") if item
    ]
    if not files:
        args.print_usage(sys.stderr)
        print(
            "odradek dump-log: error: name the files to dump (FILE... or --files)", file=sys.stderr
        )
        return 2
    status = 0
    for path in files:
        if not dump_file(path, options, sys.stdout, sys.stderr):
            status = 1
    return status


def dump_file(path: Path, options: Options, out: TextIO, err: TextIO) -> bool:
    """Dump one file to ``out``; False if it is unreadable or holds invalid data."""
    try:
        dumper, stem = _classify(path)
        return dumper(Target(path, stem, options, out))
    except DumpError as error:
        print(f"odradek {NAME}: error: {error}", file=err)
    except StorageError as error:  # a damaged snapshot or checkpoint
        print(f"odradek {NAME}: error: {_storage_error_text(path, error)}", file=err)
    except OSError as error:
        print(f"odradek {NAME}: error: {_os_error_text(path, error)}", file=err)
    return False


def _storage_error_text(path: Path, error: StorageError) -> str:
    text = str(error)
    return text if str(path) in text else f"{path}: {text}"  # most already name the file


def _os_error_text(path: Path, error: OSError) -> str:
    where = error.filename if error.filename is not None else path
    return f"{where}: {error.strerror or error}"


_Dumper = Callable[[Target], bool]


def _classify(path: Path) -> tuple[_Dumper, str]:
    name = path.name.removesuffix(DELETED_SUFFIX)
    if name == LEADER_EPOCH_CHECKPOINT:
        return _dump_epoch_checkpoint, name
    dumpers: dict[str, _Dumper] = {
        LOG_SUFFIX: _dump_log,
        INDEX_SUFFIX: dump_offset_index,
        TIME_INDEX_SUFFIX: dump_time_index,
        SNAPSHOT_SUFFIX: _dump_snapshot,
        METADATA_SNAPSHOT_SUFFIX: _dump_metadata_snapshot,
    }
    stem, dot, suffix = name.rpartition(".")
    dumper = dumpers.get(dot + suffix)
    if not stem or dumper is None:
        raise DumpError(
            f"{path}: unknown file type (expected .log, .index, .timeindex, .snapshot, "
            f".checkpoint or {LEADER_EPOCH_CHECKPOINT})"
        )
    return dumper, stem


# -- .log ------------------------------------------------------------------------


def _dump_log(target: Target) -> bool:
    base_offset = target.base_offset
    with open_regular(target.path) as (fd, size):
        target.emit(f"Dumping {target.path}")
        target.emit(f"Log starting offset: {base_offset}")
        limit = size if target.options.max_bytes is None else min(size, target.options.max_bytes)
        try:
            _dump_batches(target, Window(fd), base_offset, limit)
        except InvalidBatch as invalid:
            target.emit(f"Found invalid batch at position {invalid.position}: {invalid.reason}")
            return False
        except TornTail as tail:
            if limit < size:
                return True  # --max-bytes cut the batch off, the file may well be fine
            target.emit(tail_text(target, tail))
            return False
    return True


def _dump_batches(target: Target, window: Window, base_offset: int, limit: int) -> None:
    next_offset = base_offset
    for header in scan_headers(window, limit):
        crc = batch_crc(window, header)
        target.emit(_batch_line(header, crc == header.crc))
        if crc != header.crc:
            raise InvalidBatch(
                header.position, f"CRC32C mismatch: stored {header.crc}, computed {crc}"
            )
        _check_offsets(header, next_offset)
        if target.options.print_data:
            _dump_records(target, window, header)
        next_offset = header.next_offset


def _check_offsets(header: BatchHeader, next_offset: int) -> None:
    if header.last_offset_delta < 0:
        raise InvalidBatch(
            header.position, f"negative last offset delta {header.last_offset_delta}"
        )
    if header.base_offset < next_offset:
        raise InvalidBatch(
            header.position,
            f"base offset {header.base_offset} is below the next expected offset {next_offset}",
        )


def _dump_records(target: Target, window: Window, header: BatchHeader) -> None:
    buffer, start = window.view(header.position, header.size)
    local = unpack_header(buffer, start)  # the same header, positioned in ``buffer``
    try:
        decoder = _decoder(target)
        for record in iter_records(buffer, local):
            target.emit(_record_line(record, local, decoder))
    except CorruptRecordError as error:
        reason = _RECORDS_ERROR_PREFIX.sub("", str(error))
        raise InvalidBatch(header.position, reason) from None


def _batch_line(header: BatchHeader, crc_ok: bool) -> str:
    codec = COMPRESSION_NAMES.get(header.compression, f"unknown({header.compression})")
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {header.position} "
        f"{_timestamp_label(header)}: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: {codec} crc: {header.crc} "
        f"isvalid: {_bool(crc_ok)}"
    )


def _decoder(target: Target) -> str | None:
    """Which record decoder applies: asked for, or implied by the partition directory."""
    options = target.options
    if options.transaction_decoder:  # the only flag naming a decoder against its directory
        return "transactions"
    directory = target.path.parent.name
    if options.metadata_decoder or directory.startswith(metadata_decoder.METADATA_TOPIC_PREFIX):
        return "metadata"
    if options.offsets_decoder or directory.startswith(offsets_decoder.OFFSETS_TOPIC_PREFIX):
        return "offsets"
    if directory.startswith(transaction_log_decoder.TRANSACTION_TOPIC_PREFIX):
        return "transactions"
    return None


def _record_line(record: Record, header: BatchHeader, decoder: str | None = None) -> str:
    header_keys = ",".join(h.key for h in record.headers)
    line = (
        f"| offset: {record.offset} {_timestamp_label(header)}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
        f"sequence: {_record_sequence(header, record.offset)} headerKeys: [{header_keys}]"
    )
    if header.is_control:
        return f"{line} {_control_text(record)}"
    if decoder == "offsets":
        key, payload = offsets_decoder.describe(record.key, record.value)
        return f"{line} key: {key} payload: {payload}"
    if decoder == "transactions":
        key, payload = transaction_log_decoder.describe(record.key, record.value)
        return f"{line} key: {key} payload: {payload}"
    if decoder == "metadata":
        return f"{line} payload: {metadata_decoder.describe(record.key, record.value)}"
    return f"{line} key: {_text(record.key)} payload: {_text(record.value)}"


def _control_text(record: Record) -> str:
    _, control_type = decode_control_record(record)
    if control_type in (ABORT_MARKER, COMMIT_MARKER):
        commit, coordinator_epoch = decode_end_txn_marker(record)
        marker = CONTROL_TYPE_NAMES[COMMIT_MARKER if commit else ABORT_MARKER]
        return f"endTxnMarker: {marker} coordinatorEpoch: {coordinator_epoch}"
    return f"controlType: {CONTROL_TYPE_NAMES.get(control_type, 'UNKNOWN')}({control_type})"


def _record_sequence(header: BatchHeader, offset: int) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + offset - header.base_offset) % SEQUENCE_MODULUS


def _timestamp_label(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


# -- .snapshot and leader-epoch-checkpoint ------------------------------------------


def _dump_snapshot(target: Target) -> bool:
    with open_regular(target.path):
        pass  # a missing or irregular file is reported like any other
    producers = read_snapshot(target.path)  # SnapshotCorruptError: one line
    target.emit(f"Dumping {target.path}")
    for producer in producers:
        target.emit(_producer_line(producer))
    return True


def _dump_metadata_snapshot(target: Target) -> bool:
    """A KIP-630 metadata snapshot: header, batches (records with --print-data-log), footer.

    The whole file is checked first (every CRC, header first, footer last); a damaged
    one is reported on one line, as recovery would refuse it."""
    with open_regular(target.path) as (_fd, size):
        if size > MAX_SNAPSHOT_DUMP_BYTES:
            raise DumpError(f"{target.path}: {size} bytes, more than this tool reads")
    data = target.path.read_bytes()
    contents = read_metadata_snapshot(data, str(target.path))  # SnapshotCorruptError: 1 line
    target.emit(f"Dumping {target.path}")
    end_offset, _, epoch = target.stem.partition("-")
    if end_offset.isdigit() and epoch.isdigit():
        target.emit(f"Snapshot end offset: {int(end_offset)} epoch: {int(epoch)}")
    target.emit(
        f"Snapshot header: version: 0 lastContainedLogTimestamp: "
        f"{contents.last_contained_timestamp}"
    )
    for header in contents.batches:
        target.emit(_batch_line(header, True))
        if target.options.print_data:
            for record in iter_records(data, header):
                target.emit(_record_line(record, header, "metadata"))
    target.emit("Snapshot footer: version: 0")
    target.emit(f"Records: {len(contents.records)}")
    return True


def _producer_line(producer: ProducerEntry) -> str:
    batches = ", ".join(
        f"{b.first_seq}-{b.last_seq}@{b.first_offset}-{b.last_offset}" for b in producer.batches
    )
    return (
        f"producerId: {producer.producer_id} producerEpoch: {producer.epoch} "
        f"coordinatorEpoch: {producer.coordinator_epoch} "
        f"currentTxnFirstOffset: {producer.current_txn_first_offset} "
        f"lastTimestamp: {producer.last_timestamp} batches: [{batches}]"
    )


def _dump_epoch_checkpoint(target: Target) -> bool:
    with open_regular(target.path):
        pass  # a missing or odd file is an error here; the cache would treat it as empty
    entries = LeaderEpochCache(target.path).entries  # CheckpointError: one line
    target.emit(f"Dumping {target.path}")
    for entry in entries:
        target.emit(f"epoch: {entry.epoch} startOffset: {entry.start_offset}")
    return True


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="print the contents of log segments, indexes, snapshots and checkpoints",
    help="Print the contents of .log, .index, .timeindex and .snapshot files, "
    "metadata snapshots (.checkpoint) and leader-epoch-checkpoint files, like Kafka's "
    "DumpLogSegments. Exit status "
    "is 1 if any file is missing or holds invalid data.",
)
@click.argument("files", nargs=-1, type=click.Path(path_type=Path), metavar="[FILE]...")
@click.option(
    "--files",
    "files_option",
    multiple=True,
    metavar="FILE[,FILE...]",
    help="the files to dump, comma-separated (Kafka's spelling; FILE... works too)",
)
@click.option(
    "--print-data-log",
    is_flag=True,
    help="print every record of every batch, with its key and value",
)
@click.option(
    "--verify-index-only",
    is_flag=True,
    help="check .index/.timeindex entries against the sibling .log instead of printing them",
)
@click.option(
    "--offsets-decoder",
    is_flag=True,
    help="decode records as __consumer_offsets commits and group metadata "
    "(automatic for files under a __consumer_offsets-N directory)",
)
@click.option(
    "--transaction-log-decoder",
    is_flag=True,
    help="decode records as __transaction_state transaction metadata "
    "(automatic for files under a __transaction_state-N directory)",
)
@click.option(
    "--cluster-metadata-decoder",
    is_flag=True,
    help="decode records as __cluster_metadata changes "
    "(automatic for files under a __cluster_metadata-N directory)",
)
@click.option(
    "--max-bytes",
    type=Checked(_positive_int, "N"),
    metavar="N",
    help="read only the batches that lie within the first N bytes of each .log file",
)
def command(**params: Any) -> int:
    return invoke(run, params)
