"""Pure presentation helpers of the console: record bytes as text, times, sizes, the lag chart.

How this works and why: these are the parts of a page that carry logic worth testing
without a browser or a broker, so they are plain functions of their inputs. A key or
value is shown as the user picks: UTF-8 text, pretty JSON or a hex dump, or ``auto``
(JSON if it parses, else UTF-8 if it decodes, else hex) — a value that is not what the
user picked falls back and says so rather than failing the page; ``auto`` treats
UTF-8 with control characters as binary. The lag chart is an
inline SVG drawn here from the samples ``lag.LagHistory`` keeps, so the console needs
no chart library and no JavaScript.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from xml.sax.saxutils import escape

FORMATS: Final = ("auto", "utf8", "json", "hex")
HEX_LIMIT_BYTES: Final = 4096  # a hex dump past this is cut: a page, not a file viewer
TEXT_LIMIT_CHARS: Final = 20_000


class BadInput(ValueError):
    """A form or query value the console cannot use; its text is the one-line reason."""


@dataclass(frozen=True, slots=True)
class Shown:
    """Bytes as shown on a page: the text and the format actually used."""

    text: str
    format: str  # utf8, json, hex or null
    note: str = ""  # why the format differs from the one asked for


def show_bytes(data: bytes | None, wanted: str = "auto") -> Shown:
    if data is None:
        return Shown("null", "null")
    if wanted not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, not {wanted!r}")
    if wanted == "hex":
        return Shown(hex_dump(data), "hex")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        note = "" if wanted == "auto" else f"not {_NAMES[wanted]}: shown as hex"
        return Shown(hex_dump(data), "hex", note)
    if wanted in ("auto", "json"):
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            if wanted == "json" or isinstance(parsed, dict | list):
                return Shown(_cut(json.dumps(parsed, indent=2, ensure_ascii=False)), "json")
    binary = any(c in _CONTROL for c in text)
    if wanted == "utf8":  # asked for text: control characters shown as escapes
        return Shown(_cut(text.translate(_ESCAPES) if binary else text), "utf8")
    if binary:  # valid UTF-8, but control bytes say it is not text
        note = "not JSON: shown as hex" if wanted == "json" else ""
        return Shown(hex_dump(data), "hex", note)
    return Shown(_cut(text), "utf8", "not JSON: shown as UTF-8" if wanted == "json" else "")


_NAMES: Final = {"utf8": "UTF-8", "json": "JSON"}
_CONTROL: Final = frozenset(chr(c) for c in [*range(32), 127]) - {"\t", "\n", "\r"}
_ESCAPES: Final = {ord(c): f"\\x{ord(c):02x}" for c in _CONTROL}


def _cut(text: str) -> str:
    if len(text) <= TEXT_LIMIT_CHARS:
        return text
    return text[:TEXT_LIMIT_CHARS] + f"\n… ({len(text) - TEXT_LIMIT_CHARS} more characters)"


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex, and printable ASCII (as ``hexdump -C``)."""
    lines = []
    for start in range(0, min(len(data), HEX_LIMIT_BYTES), 16):
        chunk = data[start : start + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hexes:<47}  |{ascii_}|")
    if len(data) > HEX_LIMIT_BYTES:
        lines.append(f"… ({len(data) - HEX_LIMIT_BYTES} more bytes)")
    return "\n".join(lines)


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from an integer or an ISO-8601 time (a time
    without a zone is UTC, which is what the page's time fields show)."""
    text = text.strip()
    if not text:
        raise BadInput("a timestamp is needed")
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < 0:
            raise BadInput(f"timestamp must not be negative: {text}")
        return value
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"timestamp must be milliseconds or an ISO time like 2026-11-29T09:30:00, not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def parse_int(text: str | None, what: str, low: int = 0, high: int | None = None) -> int:
    """A non-negative (or bounded) integer form field, or ``BadInput`` naming it."""
    try:
        value = int((text or "").strip())
    except ValueError:
        raise BadInput(f"{what} must be a whole number, not {text!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadInput(f"{what} must be {bound}, not {value}")
    return value


def format_time(ms: int) -> str:
    if ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


# -- the lag chart -------------------------------------------------------------------
CHART_WIDTH: Final = 640
CHART_HEIGHT: Final = 200
MARGIN_LEFT: Final = 56  # room for the y-axis labels
MARGIN_BOTTOM: Final = 24
MARGIN_TOP: Final = 10
MARGIN_RIGHT: Final = 10


def lag_chart_svg(samples: Sequence[tuple[float, int]]) -> str:
    """An SVG line chart of ``(unix seconds, total lag)`` samples, oldest first.

    The y axis runs from 0 to the largest lag (at least 1), labelled at 0, half and
    the top; the x axis spans the samples' times, labelled at both ends. With no
    samples yet the chart says so instead of drawing an empty frame."""
    w, h = CHART_WIDTH, CHART_HEIGHT
    plot_w = w - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = h - MARGIN_TOP - MARGIN_BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lag-chart" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="consumer lag over time">',
        f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" '
        'fill="#fafafa" stroke="#ccc"/>',
    ]
    if not samples:
        parts.append(
            f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle" fill="#888">'
            "no lag samples yet</text></svg>"
        )
        return "".join(parts)
    top = max(1, max(lag for _, lag in samples))
    first, last = samples[0][0], samples[-1][0]
    span = max(last - first, 1e-9)

    def x(t: float) -> float:
        if len(samples) == 1:
            return MARGIN_LEFT + plot_w / 2
        return MARGIN_LEFT + (t - first) / span * plot_w

    def y(lag: int) -> float:
        return MARGIN_TOP + plot_h - lag / top * plot_h

    for value in (0, top / 2, top):
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{y(int(value)):.1f}" '
            f'y2="{y(int(value)):.1f}" stroke="#e4e4e4"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{y(int(value)) + 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="#555">{int(value)}</text>'
        )
    points = " ".join(f"{x(t):.1f},{y(lag):.1f}" for t, lag in samples)
    parts.append(f'<polyline fill="none" stroke="#2a6fdb" stroke-width="2" points="{points}"/>')
    for t, lag in samples[-1:]:
        parts.append(f'<circle cx="{x(t):.1f}" cy="{y(lag):.1f}" r="3" fill="#2a6fdb"/>')
    for t, at, anchor in ((first, MARGIN_LEFT, "start"), (last, MARGIN_LEFT + plot_w, "end")):
        label = datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%H:%M:%S")
        parts.append(
            f'<text x="{at}" y="{h - 6}" text-anchor="{anchor}" font-size="11" fill="#555">'
            f"{escape(label)} UTC</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
