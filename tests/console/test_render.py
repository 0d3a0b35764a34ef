"""The console's pure helpers: how bytes are shown, how times and sizes read, the lag
chart's geometry and the lag history's bounds."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from odradek.console import lag, render
from odradek.console.render import BadInput, show_bytes

SVG = "{http://www.w3.org/2000/svg}"


def test_auto_picks_json_then_text_then_hex() -> None:
    assert show_bytes(b'{"a":[1,2]}').format == "json"
    assert show_bytes(b'{"a":[1,2]}').text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert show_bytes(b"42") == render.Shown("42", "utf8")  # a bare number stays text
    assert show_bytes("žluťoučký".encode()) == render.Shown("žluťoučký", "utf8")
    assert show_bytes(b"\xff\xfe").format == "hex"
    assert show_bytes(bytes(range(20))).format == "hex"  # UTF-8, but control bytes
    assert show_bytes(None) == render.Shown("null", "null")


def test_an_explicit_format_falls_back_and_says_so() -> None:
    assert show_bytes(b"42", "json") == render.Shown("42", "json")
    assert show_bytes(b"plain", "json") == render.Shown("plain", "utf8", "not JSON: shown as UTF-8")
    assert show_bytes(b"\xff", "utf8").note == "not UTF-8: shown as hex"
    assert show_bytes(b"a\x00b", "utf8").text == "a\\x00b"
    assert show_bytes(b'{"a":1}', "utf8").text == '{"a":1}'
    with pytest.raises(BadInput, match="format must be one of"):
        show_bytes(b"x", "yaml")


def test_hex_dump_lines_and_limit() -> None:
    dump = render.hex_dump(b"customer-7 and more")
    assert dump.splitlines() == [
        "00000000  63 75 73 74 6f 6d 65 72 2d 37 20 61 6e 64 20 6d  |customer-7 and m|",
        "00000010  6f 72 65                                         |ore|",
    ]
    big = render.hex_dump(bytes(render.HEX_LIMIT_BYTES + 10))
    assert big.splitlines()[-1] == "… (10 more bytes)"
    assert len(big.splitlines()) == render.HEX_LIMIT_BYTES // 16 + 1


def test_timestamps_parse_as_milliseconds_or_iso_utc() -> None:
    assert render.parse_timestamp("1700000000000") == 1_700_000_000_000
    assert render.parse_timestamp("2026-11-29T09:30:00") == 1_795_944_600_000
    assert render.parse_timestamp("2026-11-29T10:30:00+01:00") == 1_795_944_600_000
    assert render.parse_timestamp("2026-11-29T09:30:00Z") == 1_795_944_600_000
    for bad in ("", "yesterday", "-5"):
        with pytest.raises(BadInput):
            render.parse_timestamp(bad)
    assert render.format_time(1_795_944_600_123) == "2026-11-29 09:30:00.123Z"


def test_integers_and_sizes() -> None:
    assert render.parse_int(" 7 ", "offset") == 7
    with pytest.raises(BadInput, match="offset must be at least 0, not -1"):
        render.parse_int("-1", "offset")
    with pytest.raises(BadInput, match="limit must be between 1 and 5, not 6"):
        render.parse_int("6", "limit", 1, 5)
    assert [render.format_bytes(n) for n in (None, 0, 1023, 1536, 5 * 2**30)] == [
        "-",
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 GiB",
    ]


def test_lag_chart_scales_samples_into_the_plot() -> None:
    svg = ET.fromstring(render.lag_chart_svg([(1000.0, 0), (1005.0, 10), (1010.0, 5)]))
    (line,) = svg.iter(f"{SVG}polyline")
    points = [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
    left, top = render.MARGIN_LEFT, render.MARGIN_TOP
    right = render.CHART_WIDTH - render.MARGIN_RIGHT
    bottom = render.CHART_HEIGHT - render.MARGIN_BOTTOM
    assert points == [(left, bottom), ((left + right) / 2, top), (right, (top + bottom) / 2)]
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert {"0", "5", "10", "00:16:40 UTC", "00:16:50 UTC"} <= set(labels)


def test_lag_chart_without_samples_says_so() -> None:
    svg = ET.fromstring(render.lag_chart_svg([]))
    assert not list(svg.iter(f"{SVG}polyline"))
    assert [t.text for t in svg.iter(f"{SVG}text")] == ["no lag samples yet"]
    one = ET.fromstring(render.lag_chart_svg([(5.0, 0)]))  # one sample, zero lag: no division
    assert len(list(one.iter(f"{SVG}polyline"))) == 1


def test_lag_history_is_bounded_and_forgets_gone_groups() -> None:
    now = [0.0]
    history = lag.LagHistory(clock=lambda: now[0])
    for n in range(lag.MAX_SAMPLES + 5):
        now[0] = float(n)
        history.add("g", n)
    history.add("other", 1)
    samples = history.samples("g")
    assert len(samples) == lag.MAX_SAMPLES and samples[0] == (5.0, 5)
    history.forget_except({"g"})
    assert history.samples("other") == [] and len(history.samples("g")) == lag.MAX_SAMPLES
