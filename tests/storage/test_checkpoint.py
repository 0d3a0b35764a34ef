"""Tests for odradek.storage.checkpoint: format, strict reading, atomic writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.storage.checkpoint import (
    CheckpointError,
    read_checkpoint_lines,
    read_offset_checkpoint,
    write_checkpoint_lines,
    write_offset_checkpoint,
)
from odradek.storage.errors import StorageError

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TOPICS = st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True)
PARTITIONS = st.integers(min_value=0, max_value=2**31 - 1)
OFFSETS = st.dictionaries(st.tuples(TOPICS, PARTITIONS), INT64, max_size=20)


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


# -- round trips and the exact format ---------------------------------------------


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offsets=OFFSETS)
def test_offset_checkpoint_round_trip(tmp_path: Path, offsets: dict[tuple[str, int], int]) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, offsets)
    assert read_offset_checkpoint(path) == offsets


def test_reads_known_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "cp", "0\n2\nfoo 0 10\nbar-baz 3 7\n")
    assert read_offset_checkpoint(path) == {("foo", 0): 10, ("bar-baz", 3): 7}


def test_writes_known_bytes_sorted(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("foo", 0): 10, ("bar-baz", 3): 7})
    assert path.read_bytes() == b"0\n2\nbar-baz 3 7\nfoo 0 10\n"


def test_empty_mapping_writes_zero_entries(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_generic_lines_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint_lines(path, 0, ["1 0", "4 100"])
    assert path.read_bytes() == b"0\n2\n1 0\n4 100\n"
    assert read_checkpoint_lines(path, 0) == [["1", "0"], ["4", "100"]]


def test_last_line_without_newline_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path / "cp", "0\n1\nfoo 0 10")
    assert read_offset_checkpoint(path) == {("foo", 0): 10}


def test_zero_byte_file_reads_as_empty(tmp_path: Path) -> None:
    path = _write(tmp_path / "cp", "")
    assert read_checkpoint_lines(path, 0) == []
    assert read_offset_checkpoint(path) == {}


def test_missing_file(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "nope") == {}
    assert read_checkpoint_lines(tmp_path / "nope", 0) is None


def test_overwrite_replaces_contents(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("a", 0): 1, ("b", 1): 2})
    write_offset_checkpoint(path, {("c", 2): 3})
    assert read_offset_checkpoint(path) == {("c", 2): 3}


# -- malformed files ----------------------------------------------------------------

MALFORMED = {
    "wrong version": ("1\n0\n", 1, "version"),
    "non-integer version": ("zero\n0\n", 1, "version"),
    "missing count": ("0\n", 2, "count"),
    "non-integer count": ("0\ntwo\nfoo 0 1\n", 2, "count"),
    "negative count": ("0\n-1\n", 2, "count"),
    "count too high": ("0\n2\nfoo 0 1\n", 2, "found 1"),
    "count too low": ("0\n1\nfoo 0 1\nbar 0 2\n", 2, "found 2"),
    "too few fields": ("0\n1\nfoo 0\n", 3, "fields"),
    "too many fields": ("0\n1\nfoo 0 1 2\n", 3, "fields"),
    "double space": ("0\n1\nfoo  0 1\n", 3, "fields"),
    "blank entry": ("0\n2\nfoo 0 1\n\n", 4, "blank"),
    "non-integer partition": ("0\n1\nfoo x 1\n", 3, "partition"),
    "negative partition": ("0\n1\nfoo -1 1\n", 3, "partition"),
    "non-integer offset": ("0\n1\nfoo 0 1.5\n", 3, "offset"),
    "plus sign": ("0\n1\nfoo 0 +1\n", 3, "offset"),
    "offset beyond int64": ("0\n1\nfoo 0 9223372036854775808\n", 3, "offset"),
    "absurdly long offset": ("0\n1\nfoo 0 " + "9" * 5000 + "\n", 3, "offset"),
    "illegal topic": ("0\n1\nfo/o 0 1\n", 3, "topic"),
    "duplicate entry": ("0\n2\nfoo 0 1\nfoo 0 2\n", 4, "duplicate"),
    "crlf line ends": ("0\r\n1\r\nfoo 0 1\r\n", 1, "version"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_raises_naming_file_and_line(tmp_path: Path, case: str) -> None:
    text, line, word = MALFORMED[case]
    path = _write(tmp_path / "replication-offset-checkpoint", text)
    with pytest.raises(CheckpointError) as info:
        read_offset_checkpoint(path)
    message = str(info.value)
    assert str(path) in message
    assert f"line {line}:" in message
    assert word in message
    assert "\n" not in message and len(message) < 300
    assert info.value.line == line and info.value.path == path
    assert isinstance(info.value, StorageError)


def test_invalid_utf8_raises(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\nf\xffo 0 1\n")
    with pytest.raises(CheckpointError, match="UTF-8"):
        read_offset_checkpoint(path)


def test_generic_reader_checks_expected_version(tmp_path: Path) -> None:
    path = _write(tmp_path / "cp", "1\n1\na b\n")
    assert read_checkpoint_lines(path, 1) == [["a", "b"]]
    with pytest.raises(CheckpointError, match="version 1"):
        read_checkpoint_lines(path, 0)


# -- atomicity and durability -------------------------------------------------------


def test_leftover_tmp_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("foo", 0): 10})
    _write(tmp_path / "cp.tmp", "garbage from a crash\n0 0")
    assert read_offset_checkpoint(path) == {("foo", 0): 10}
    write_offset_checkpoint(path, {("foo", 0): 11})
    assert read_offset_checkpoint(path) == {("foo", 0): 11}
    assert not (tmp_path / "cp.tmp").exists()


def test_tmp_without_real_file_reads_as_missing(tmp_path: Path) -> None:
    _write(tmp_path / "cp.tmp", "0\n1\nfoo 0 1\n")
    assert read_offset_checkpoint(tmp_path / "cp") == {}


def test_write_order_is_fsync_replace_fsync_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cp"
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(f"fsync {kind}")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        assert Path(src).read_bytes() == b"0\n1\nfoo 0 1\n"  # complete before the rename
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_offset_checkpoint(path, {("foo", 0): 1})
    assert events == ["fsync file", "replace", "fsync dir"]


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("foo", 0): 1})

    def crash(src: str | Path, dst: str | Path) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        write_offset_checkpoint(path, {("foo", 0): 2})
    assert read_offset_checkpoint(path) == {("foo", 0): 1}
    assert not (tmp_path / "cp.tmp").exists()


def test_writing_bad_entries_is_a_bug(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        write_offset_checkpoint(tmp_path / "cp", {("has space", 0): 1})
    with pytest.raises(AssertionError):
        write_checkpoint_lines(tmp_path / "cp", 0, ["two\nlines"])
    assert not (tmp_path / "cp").exists()
