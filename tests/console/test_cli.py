"""``odradek console`` as a command: it serves after one ready line, stops cleanly on
SIGTERM, and every start-up failure is one line with status 1."""

from __future__ import annotations

import socket
import sys
import urllib.request
from pathlib import Path

import pytest

from odradek.cli.main import main
from tests.console.conftest import Seeded, running_console


def test_serves_pages_and_stops_cleanly_on_sigterm(seeded: Seeded, tmp_path: Path) -> None:
    with running_console(seeded.bootstrap, tmp_path / "console.log") as console:
        assert console.url.startswith("http://127.0.0.1:") and console.url.endswith("/")
        with urllib.request.urlopen(f"{console.url}topics/{seeded.topic}", timeout=30) as page:
            assert page.status == 200 and seeded.topic in page.read().decode()
        assert console.stop() == 0
    assert "Traceback" not in (tmp_path / "console.log").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bootstrap-server", "127.0.0.1:1"], "console: cannot reach 127.0.0.1:1: "),
        (["--bootstrap-server", "127.0.0.1:1", "--listen", "nowhere"], "console: --listen: "),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--sample-interval", "-1"],
            "console: --sample-interval must not be negative",
        ),
    ],
)
def test_start_up_failures_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["console", "--listen", "127.0.0.1:0", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_a_busy_listen_port_is_one_line(seeded: Seeded, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        status = main(["console", "--bootstrap-server", seeded.bootstrap, "--listen", address])
    assert status == 1
    assert capsys.readouterr().err.startswith(f"console: cannot listen on {address}: ")


def test_without_the_console_extra_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn raises ImportError
    assert main(["console", "--bootstrap-server", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == (
        "console: uvicorn is not installed: pip install 'odradek[console]'\n"
    )
