"""The ``odradek`` command as one click group: shell completion (through click's
env-var protocol and through a real bash running the printed script), lazy command
imports, and the exit statuses every command shares."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.cli.main import COMMANDS, cli, main


def completions(line: str, env: dict[str, str] | None = None) -> list[str]:
    """What click's bash protocol offers for ``line`` (the last word is completed)."""
    words = line.split(" ")
    done = subprocess.run(
        [sys.executable, "-m", "odradek"],
        env={
            **os.environ,
            **(env or {}),
            "_ODRADEK_COMPLETE": "bash_complete",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [item.partition(",")[2] for item in done.stdout.splitlines()]


def test_every_command_is_listed_and_loads() -> None:
    for name in COMMANDS:
        command = cli.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None and command.name == name, name


def test_completion_protocol_offers_commands_and_flags() -> None:
    assert completions("odradek to") == ["topics"]
    assert {"get-offsets"} == set(completions("odradek get-"))
    topic_flags = completions("odradek topics --")
    assert {"--create", "--list", "--describe", "--help"} <= set(topic_flags)
    # Kafka's action flag stands for the subcommand, so its own flags complete after it
    assert completions("odradek topics --create --part") == ["--partitions"]
    assert "--add-config" in completions("odradek configs --alter --")
    assert {"--data-dir", "--listen"} <= set(completions("odradek serve --"))
    assert sorted(completions("odradek storage ")) == ["format", "info", "random-uuid"]


def test_completion_scripts_print_for_each_shell() -> None:
    for shell in ("bash", "zsh", "fish"):
        done = subprocess.run(
            [sys.executable, "-m", "odradek", "completion", shell],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "_ODRADEK_COMPLETE" in done.stdout, shell
    assert main(["completion", "tcsh"]) == 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_through_the_printed_script(tmp_path: Path) -> None:
    shim = tmp_path / "odradek"  # the script calls `odradek` back: this one runs ours
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m odradek "$@"\n')
    shim.chmod(0o755)
    script = (
        'eval "$(odradek completion bash)"\n'
        "complete -p odradek >/dev/null || exit 3\n"
        "COMP_WORDS=(odradek to); COMP_CWORD=1; _odradek_completion odradek\n"
        'printf "%s\\n" "${COMPREPLY[@]}"; COMPREPLY=()\n'
        "echo ---\n"
        "COMP_WORDS=(odradek topics --); COMP_CWORD=2; _odradek_completion odradek\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    commands, flags = done.stdout.split("---\n")
    assert commands.split() == ["topics"]
    assert {"--create", "--list", "--help"} <= set(flags.split())


def test_help_imports_no_command_module() -> None:
    probe = (
        "import sys\n"
        "from odradek.cli.main import main\n"
        "assert main(['--help']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith(('odradek.client', 'rich'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "get-offsets" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--version"], 0),
        (["--help"], 0),
        (["-h"], 0),
        (["topics", "--help"], 0),
        (["serve", "-h"], 0),
        ([], 2),
        (["no-such-command"], 2),
        (["storage"], 2),
        (["serve", "--no-such-flag"], 2),
        (["topics", "create"], 2),
        (["metadata-quorum", "--bootstrap-server", "a:1", "--bootstrap-controller", "b:1"], 2),
    ],
)
def test_exit_statuses(argv: list[str], status: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if status == 2:  # one line naming the problem and the usage it broke
        assert len(err.strip().splitlines()) == 1 and "usage: odradek" in err, err


def test_ctrl_c_exits_130_without_a_word() -> None:
    """A command waiting on a broker that never answers, interrupted: status 130 and
    nothing on stderr (click's Abort would print a newline)."""
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        quorum = ["metadata-quorum", "--bootstrap-server", address, "describe", "--status"]
        waiting = subprocess.Popen(
            [sys.executable, "-m", "odradek", *quorum],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            time.sleep(3)
            assert waiting.poll() is None
            waiting.send_signal(signal.SIGINT)
            out, err = waiting.communicate(timeout=30)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()
    assert (waiting.returncode, out, err) == (130, b"", b"")
