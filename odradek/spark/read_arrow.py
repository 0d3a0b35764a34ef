"""Fetched record batches straight into Arrow columns, without a Python object per record.

How this works and why: a Spark task reads millions of records, and building a tuple
(or a ``ConsumerRecord``) per record would cost more than everything else together.
So a fetch response (many v2 batches, as bytes) is decoded in three steps:

1. ``scan``: walk the 61-byte batch headers (skip batches before the position, control
   batches and, under read_committed, aborted transactions; stop at a truncated tail)
   and return the offset after the last whole batch — enough to send the next fetch.
2. Per kept batch, the records section (decompressed once with odradek's storage
   codecs if needed) goes into one buffer, and a Python loop reads only each record's
   length varint to find where every record starts — one ``read_signed_varint`` call
   per record.
3. numpy then decodes the fields of all records at once: each varint is read for every
   record in one vectorized step (byte by byte while any record's varint continues),
   and key, value and header slices become Arrow ``binary_view`` arrays built from
   (start, length) pairs over that one buffer, cast to ``binary`` by Arrow in C.

Record layout and zigzag varints: see ``odradek/records/codec.py``. Malformed bytes
raise ``CorruptRecordError`` naming the partition and batch offset; compressed records
expanding past the client's per-fetch budget (``ExpansionBudget`` in
odradek/client/fetch_decode.py) raise ``FetchExpansionError``. The schema is that
of Spark's Kafka source as Spark's Arrow conversion spells it (``ARROW_SCHEMA``);
Spark checks every batch against it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
from kio.serial.readers import read_signed_varint

from odradek.client.consumer.fetch_decode import ExpansionBudget, FetchExpansionError
from odradek.records.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    check_batch,
    parse_header,
)
from odradek.records.codec import ABORT_MARKER, decode_control_record, iter_records
from odradek.records.compression import ExpansionLimitError, decompress
from odradek.records.errors import CorruptRecordError
from odradek.spark.read_spec import TimestampBounds

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_COMPRESSION_MASK: Final = 0x07
_VIEW_INLINE: Final = 12  # binary_view keeps values up to 12 bytes inside the view

HEADER_STRUCT: Final = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_FIELDS: Final = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
ARROW_SCHEMA: Final = pa.schema(_FIELDS)
ARROW_SCHEMA_WITH_HEADERS: Final = pa.schema(
    [*_FIELDS, pa.field("headers", pa.list_(pa.field("element", HEADER_STRUCT)))]
)


@dataclass(slots=True)
class Scan:
    """What ``scan`` found in one fetch response."""

    batches: list[tuple[int, int, int, int, int, int, int]]  # see _batch_fields
    next_offset: int  # where the next fetch starts
    whole_batches: int  # batches complete in the response (kept or not)


def scan(
    data: bytes | memoryview,
    position: int,
    aborted: Sequence[tuple[int, int]] | None,
    verify_crc: bool = False,
    where: str = "",
) -> Scan:
    """The kept batches of ``data`` at or after ``position`` and the next fetch offset.

    A kept batch is (header position, base offset, last offset, base timestamp, max
    timestamp, attributes, record count). ``aborted`` lists (producer id, first offset)
    under read_committed (None under read_uncommitted).
    """
    kept: list[tuple[int, int, int, int, int, int, int]] = []
    next_offset = position
    pos = 0
    whole = 0
    size_total = len(data)
    pending = sorted(aborted or (), key=lambda a: a[1])
    active: set[int] = set()
    budget = ExpansionBudget(where, size_total)  # for compressed control batches
    unpack = _HEADER.unpack_from
    while pos + HEADER_SIZE <= size_total:
        (base, length, _epoch, magic, _crc, attributes, last_delta, base_ts, max_ts, pid, *_r) = (
            unpack(data, pos)
        )
        size = length + LOG_OVERHEAD
        if length <= 0 or pos + size > size_total:
            break  # the broker cut the last batch at the size limit
        if magic != MAGIC_V2:
            raise CorruptRecordError(f"{where}: batch at offset {base} has magic {magic}, not 2")
        if verify_crc:
            try:
                check_batch(data, pos)
            except CorruptRecordError as error:
                raise CorruptRecordError(f"{where}: {error}") from None
        whole += 1
        start = pos
        pos += size
        last = base + last_delta
        if last < position:
            continue
        next_offset = max(next_offset, last + 1)
        if aborted is not None:
            while pending and pending[0][1] <= last:
                active.add(pending.pop(0)[0])
        if attributes & CONTROL_MASK:
            if aborted is not None and pid in active:
                header = parse_header(data, start)
                limit = None
                if header.compression:
                    limit = budget.limit(header.record_count, header.compression, base)
                for record in iter_records(data, header, limit):
                    if decode_control_record(record)[1] == ABORT_MARKER:
                        active.discard(pid)
            continue
        if aborted is not None and attributes & TRANSACTIONAL_MASK and pid in active:
            continue
        count = _unpack_count(data, start)
        kept.append((start, base, last, base_ts, max_ts, attributes, count))
    return Scan(kept, next_offset, whole)


def _unpack_count(data: bytes | memoryview, start: int) -> int:
    return int.from_bytes(data[start + 57 : start + 61], "big", signed=True)


class ArrowDecoder:
    """Decodes scanned fetch responses of one partition into Arrow record batches."""

    def __init__(
        self,
        topic: str,
        partition: int,
        include_headers: bool,
        timestamps: TimestampBounds | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.timestamps = timestamps or TimestampBounds()
        self.schema = ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
        self._topic_bytes = topic.encode()
        self._where = f"{topic}-{partition}"

    def decode(
        self, data: bytes | memoryview, found: Scan, start: int, end: int
    ) -> pa.RecordBatch | None:
        """Records of the scanned batches with ``start <= offset < end``; None if none."""
        if not found.batches:
            return None
        chunks: list[memoryview | bytes] = []
        starts: list[int] = []
        counts: list[int] = []
        view = memoryview(data)
        total = 0
        # Without compression the response itself is the buffer the columns slice
        # (record positions are then absolute in it); otherwise the records sections,
        # decompressed where needed, are joined into one.
        in_place = not any(b[5] & _COMPRESSION_MASK for b in found.batches)
        read_varint = read_signed_varint
        budget = ExpansionBudget(self._where, len(data))
        for batch_pos, base, _last, _bts, _mts, attributes, count in found.batches:
            section_start = batch_pos + HEADER_SIZE
            section_end = batch_pos + LOG_OVERHEAD + _batch_length(data, batch_pos)
            codec = attributes & _COMPRESSION_MASK
            section: memoryview | bytes
            if codec:
                try:
                    limit = budget.limit(count, codec, base)
                    section = decompress(codec, view[section_start:section_end], limit)
                except FetchExpansionError:
                    raise
                except ExpansionLimitError:
                    raise budget.exceeded(codec, base, "its records") from None
                except CorruptRecordError as error:
                    raise CorruptRecordError(f"{self._where} batch {base}: {error}") from None
                budget.spend(count, len(section))
                scan_buf: memoryview | bytes = section
                p, limit = 0, len(section)
            else:
                section = view[section_start:section_end]
                scan_buf, p, limit = data, section_start, section_end
            offset_in_buffer = 0 if in_place else total - p
            if count < 0:
                raise CorruptRecordError(f"{self._where} batch {base}: record count {count}")
            try:
                # Only where each record starts; numpy reads the lengths again later.
                for _ in range(count):
                    starts.append(p + offset_in_buffer)
                    length, size = read_varint(scan_buf, p)
                    p += size + length
            except Exception as error:  # a truncated varint: kio's SerialError, IndexError
                raise CorruptRecordError(
                    f"{self._where} batch {base}: malformed record length ({error})"
                ) from None
            if p != limit:
                raise CorruptRecordError(
                    f"{self._where} batch {base}: {count} records do not fill the batch "
                    f"({limit - p:+d} bytes)"
                )
            counts.append(count)
            if not in_place:
                chunks.append(section)
                total += limit - (0 if codec else section_start)
        buffer = data if in_place else b"".join(chunks)
        return self._columns(buffer, found, counts, starts, start, end)

    def _columns(
        self,
        buffer: bytes | memoryview,
        found: Scan,
        counts: list[int],
        starts: list[int],
        start: int,
        end: int,
    ) -> pa.RecordBatch | None:
        n = len(starts)
        if n == 0:
            return None
        raw = np.frombuffer(buffer, dtype=np.uint8)
        length, body = _varint(raw, np.array(starts, dtype=np.int64), 5, self._where)
        record_end = body + length
        if (length < 6).any() or record_end[-1] > len(raw):
            raise CorruptRecordError(f"{self._where}: a record has a bad length")
        batches = found.batches
        count_arr = np.array(counts, dtype=np.int64)
        base_offset = np.repeat(np.array([b[1] for b in batches], dtype=np.int64), count_arr)
        base_ts = np.repeat(np.array([b[3] for b in batches], dtype=np.int64), count_arr)
        max_ts = np.repeat(np.array([b[4] for b in batches], dtype=np.int64), count_arr)
        log_append = np.repeat(
            np.array([bool(b[5] & TIMESTAMP_TYPE_MASK) for b in batches], dtype=bool), count_arr
        )

        p = body + 1  # attributes byte (unused)
        ts_delta, p = _varint(raw, p, 10, self._where)
        offset_delta, p = _varint(raw, p, 5, self._where)
        offsets = base_offset + offset_delta
        timestamps_ms = np.where(log_append, max_ts, base_ts + ts_delta)

        keep = (offsets >= start) & (offsets < end)
        keep &= self._timestamp_mask(timestamps_ms)
        if not keep.all():
            index = np.nonzero(keep)[0]
            if len(index) == 0:
                return None
            p, record_end, offsets, timestamps_ms, log_append = (
                p[index],
                record_end[index],
                offsets[index],
                timestamps_ms[index],
                log_append[index],
            )
        rows = len(p)

        key_length, p = _varint(raw, p, 5, self._where)
        key_start = p
        p = p + np.maximum(key_length, 0)
        value_length, p = _varint(raw, p, 5, self._where)
        value_start = p
        p = p + np.maximum(value_length, 0)
        header_count, p = _varint(raw, p, 5, self._where)
        if (
            (key_length < -1).any()
            or (value_length < -1).any()
            or (header_count < 0).any()
            or (p > record_end).any()
        ):
            raise CorruptRecordError(f"{self._where}: a record has a bad key or value length")

        arrow_buffer = pa.py_buffer(buffer)
        columns = [
            _binary(raw, arrow_buffer, key_start, key_length),
            _binary(raw, arrow_buffer, value_start, value_length),
            _repeated_string(self._topic_bytes, rows),
            pa.array(np.full(rows, self.partition, dtype=np.int32)),
            pa.array(offsets),
            pa.array(timestamps_ms * 1000, type=pa.timestamp("us", tz="UTC")),
            pa.array(log_append.astype(np.int32)),
        ]
        headers, p = self._headers(raw, arrow_buffer, p, header_count, record_end)
        if (p != record_end).any():
            raise CorruptRecordError(f"{self._where}: a record's fields do not fill its length")
        if self.include_headers:
            columns.append(headers)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _timestamp_mask(self, timestamps_ms: np.ndarray) -> np.ndarray:
        bounds = self.timestamps
        mask = np.ones(len(timestamps_ms), dtype=bool)
        if bounds.low_us is None and bounds.high_us is None:
            return mask
        micros = timestamps_ms * 1000
        if bounds.low_us is not None:
            mask &= micros >= bounds.low_us if bounds.low_inclusive else micros > bounds.low_us
        if bounds.high_us is not None:
            mask &= micros <= bounds.high_us if bounds.high_inclusive else micros < bounds.high_us
        return mask

    def _headers(
        self,
        raw: np.ndarray,
        arrow_buffer: pa.Buffer,
        p: np.ndarray,
        header_count: np.ndarray,
        record_end: np.ndarray,
    ) -> tuple[pa.Array | None, np.ndarray]:
        """The headers column (None unless asked for) and the positions after the headers.

        Headers are decoded even when not asked for, to find where each record ends
        (and so check it); records without headers cost nothing here.
        """
        rows = len(p)
        list_offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(header_count, out=list_offsets[1:])
        flat = int(list_offsets[-1])
        key_start = np.zeros(flat, dtype=np.int64)
        key_length = np.zeros(flat, dtype=np.int64)
        value_start = np.zeros(flat, dtype=np.int64)
        value_length = np.zeros(flat, dtype=np.int64)
        p = p.copy()
        h = 0
        while flat:
            rows_left = np.nonzero(header_count > h)[0]
            if len(rows_left) == 0:
                break
            at = p[rows_left]
            klen, at = _varint(raw, at, 5, self._where)
            kstart = at
            at = at + np.maximum(klen, 0)
            vlen, at = _varint(raw, at, 5, self._where)
            vstart = at
            at = at + np.maximum(vlen, 0)
            if (klen < 0).any() or (vlen < -1).any() or (at > record_end[rows_left]).any():
                raise CorruptRecordError(f"{self._where}: a record header has a bad length")
            slots = list_offsets[rows_left] + h
            key_start[slots], key_length[slots] = kstart, klen
            value_start[slots], value_length[slots] = vstart, vlen
            p[rows_left] = at
            h += 1
        if not self.include_headers:
            return None, p
        keys = _binary(raw, arrow_buffer, key_start, key_length)
        try:
            keys = keys.cast(pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise CorruptRecordError(f"{self._where}: a header key is not UTF-8") from None
        values = _binary(raw, arrow_buffer, value_start, value_length)
        entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT))
        column = pa.ListArray.from_arrays(
            pa.array(list_offsets.astype(np.int32)),
            entries,
            type=pa.list_(pa.field("element", HEADER_STRUCT)),
        )
        return column, p


def _batch_length(data: bytes | memoryview, start: int) -> int:
    return int.from_bytes(data[start + 8 : start + 12], "big", signed=True)


def _varint(
    raw: np.ndarray, position: np.ndarray, max_bytes: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at every ``position``: (values, positions after them)."""
    last = len(raw) - 1
    if len(position) == 0:
        return position.copy(), position
    if position.max() > last:
        raise CorruptRecordError(f"{where}: a record is truncated")
    byte = raw[position]
    value = (byte & 0x7F).astype(np.uint64)
    size = np.ones(len(position), dtype=np.int64)
    more = np.nonzero(byte & 0x80)[0]
    shift = 7
    while len(more):
        if shift >= 7 * max_bytes:
            raise CorruptRecordError(f"{where}: a varint in a record is too long")
        at = position[more] + size[more]
        if at.max() > last:
            raise CorruptRecordError(f"{where}: a record is truncated")
        byte = raw[at]
        value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[more] += 1
        more = more[(byte & 0x80) != 0]
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -((value & np.uint64(1)).astype(np.int64))
    return signed, position + size


def _binary(raw: np.ndarray, buffer: pa.Buffer, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """A ``binary`` array of ``raw[start:start+length]`` slices; length -1 = null.

    Built as a ``binary_view`` array over ``buffer`` (16 bytes per value: the length,
    then up to 12 bytes inline, or a 4-byte prefix, buffer index 0 and the offset) and
    cast to ``binary`` by Arrow, which copies each value once into a buffer of its own.
    """
    n = len(start)
    null = length < 0
    lengths = np.where(null, 0, length).astype("<u4")
    views = np.zeros((n, 4), dtype="<u4")
    views[:, 0] = lengths
    if n:
        long = lengths > _VIEW_INLINE
        at = start if long.all() else start[long]
        if len(at):
            # Every byte of raw read as the little-endian word starting there.
            words = np.ndarray((len(raw) - 3,), dtype="<u4", buffer=raw, strides=(1,))
            rows = slice(None) if len(at) == n else long
            views[rows, 1] = words[at]  # the first 4 bytes, as they lie in memory
            views[rows, 3] = at  # views[:, 2] = 0: buffer index 0, the one data buffer
        short = np.nonzero(~long & (lengths > 0))[0]
        if len(short):
            gather = start[short, None] + np.arange(_VIEW_INLINE, dtype=np.int64)
            np.minimum(gather, len(raw) - 1, out=gather)
            inline = raw[gather]
            inline[np.arange(_VIEW_INLINE)[None, :] >= lengths[short, None]] = 0
            views.view(np.uint8).reshape(n, 16)[short, 4:16] = inline
    nulls = int(null.sum())
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if nulls else None
    array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), buffer], null_count=nulls
    )
    return array.cast(pa.binary())


def _repeated_string(value: bytes, rows: int) -> pa.Array:
    offsets = (np.arange(rows + 1, dtype=np.int64) * len(value)).astype(np.int32)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(value * rows)]
    )
