"""Damage files the way a bad disk or a stray write would, for recovery tests."""

from __future__ import annotations

from pathlib import Path


def flip(path: Path, position: int, mask: int = 0xFF) -> None:
    """XOR the byte at ``position`` of ``path`` with ``mask`` (every bit by default)."""
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ mask]))
