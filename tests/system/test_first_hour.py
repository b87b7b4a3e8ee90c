"""A newcomer's first hour with the real `wa-outbox` script (issue 23): commands on the embedded Postgres print their
results and nothing else (no RuntimeDirWarning, no "embedded postgres ready"); `wa-outbox dev` prints a database URL
another program connects with as printed, and never a token the user configured; shell completion; `make run`'s
ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.live import wait_for
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(sys.executable).parent / "wa-outbox")  # the console script, as a user runs it


def embedded_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No DATABASE_URL (the embedded Postgres, in its own data dir) and no XDG_RUNTIME_DIR (as in a container or over
    ssh: platformdirs warned about it on every command)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WHATSAPP_", "WA_OUTBOX_", "LOG_")) and k not in ("DATABASE_URL", "XDG_RUNTIME_DIR")}
    env.update(WA_OUTBOX_DATA_DIR=str(tmp_path / ".wa-outbox"), WHATSAPP_PHONE_NUMBER_ID="100000000000001",
               PYTHONPATH=str(ROOT), **extra)  # this checkout's code, whichever one the virtualenv was installed from
    return env


def test_commands_on_the_embedded_database_print_their_result_alone(tmp_path):
    env = embedded_env(tmp_path)

    def cli(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([SCRIPT, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done
    cli("db", "upgrade")
    sent = cli("send", "--to", "+5511987654321", "--text", "Olá")
    assert re.fullmatch(r"\d+\n", sent.stdout), sent.stdout  # the id alone
    assert sent.stderr == ""  # neither platformdirs' warning nor the embedded server's log line
    shown = cli("status", sent.stdout.strip())
    assert shown.stdout.startswith(f"message {sent.stdout.strip()}: queued") and shown.stderr == ""


@contextmanager
def running_dev(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, list[str], int]]:
    """`wa-outbox dev` on free ports, its output read line by line, until its banner is out; stopped with Ctrl-C
    (SIGINT to its process group) on the way out. (the process, its lines so far, the web's port)"""
    web_port, sim_port = free_port(), free_port()
    proc = subprocess.Popen([SCRIPT, "dev", "--port", str(web_port), "--simulator-port", str(sim_port)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("Ctrl-C stops everything" in line for line in lines), timeout=120, interval=0.2,
                 what="dev's banner")
        yield proc, lines, web_port
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(timeout=10)


def test_dev_prints_a_database_url_that_works_and_never_a_configured_token(tmp_path):
    secret = "my-own-api-token-4b1d9c0e7f"
    env = embedded_env(tmp_path, WA_OUTBOX_API_TOKENS=secret)
    with running_dev(tmp_path, env) as (_, lines, _):
        banner = "".join(lines)
        [url] = re.findall(r"DATABASE_URL='([^']+)'", banner)
        assert "***" not in url and url.startswith("postgresql://postgres@/postgres?host=")
        with psycopg.connect(url, connect_timeout=10) as conn:  # another app, with the URL as printed
            assert conn.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone() == (0,)
        assert 'Bearer $TOKEN' in banner and "not shown" in banner
    output = "".join(lines)
    assert secret not in output, output
    assert "RuntimeDirWarning" not in output and "embedded postgres ready" not in output


def test_dev_on_a_real_database_never_prints_its_token_or_password(tmp_path, database_url):
    """The issue's case: `wa-outbox dev` pointed at a deployment's DATABASE_URL (a password in it) with its
    WA_OUTBOX_API_TOKENS: neither is printed, and the curls it prints work once $TOKEN is set."""
    secret, password = "real-deployment-token-8c2e5a", "real-db-password-7f3a"
    url = database_url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@", 1)
    assert password in url  # the test server trusts its clients: the password is ignored, never refused
    env = embedded_env(tmp_path, DATABASE_URL=url, WA_OUTBOX_API_TOKENS=secret)
    with running_dev(tmp_path, env) as (proc, lines, web_port):
        [curl] = [line for line in lines if line.startswith("  ID=$(curl")]
        assert 'Bearer $TOKEN' in curl and f"127.0.0.1:{web_port}/v1/messages" in curl
        wait_for(lambda: any("Listening at" in line for line in lines), timeout=60, what="the web app")
        done = subprocess.run(["bash", "-c", curl.strip() + "; echo; echo $ID"], env={**env, "TOKEN": secret},
                              capture_output=True, text=True, timeout=60)
        *shown, message_id = done.stdout.split()  # the message's JSON, then the id the first curl queued
        assert message_id.isdigit() and f'"id":{message_id},' in "".join(shown), done
    output = "".join(lines)
    assert proc.returncode == 0, output
    assert secret not in output and password not in output, output


def test_shell_completion_scripts_and_answers():
    env = {**os.environ, "_WA_OUTBOX_COMPLETE": "bash_source"}
    script = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_wa_outbox_completion()" in script.stdout and "complete " in script.stdout
    env.update(_WA_OUTBOX_COMPLETE="bash_complete", COMP_WORDS="wa-outbox dl", COMP_CWORD="1")
    answer = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert answer.stdout.splitlines() == ["plain,dlq"], answer
    for shell in ("zsh", "fish"):
        env = {**os.environ, "_WA_OUTBOX_COMPLETE": f"{shell}_source"}
        assert "wa-outbox" in subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60).stdout


def test_make_run_takes_its_ports():
    dry = subprocess.run(["make", "-n", "run", "PORT=8123", "SIMULATOR_PORT=9123"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    [command] = [line for line in dry.stdout.splitlines() if "wa-outbox dev" in line]
    assert command.split()[-4:] == ["--port", "8123", "--simulator-port", "9123"]
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "SIMULATOR_PORT")}
    plain = subprocess.run(["make", "-n", "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert [line.split() for line in plain.stdout.splitlines() if "wa-outbox dev" in line] == [
        [".venv/bin/wa-outbox", "dev"]]


def test_ctrl_c_right_after_the_banner_stops_everything_cleanly(tmp_path):
    # The banner says Ctrl-C stops everything: from its first line on, a SIGINT stops the children (before, dev's
    # handler came after the children's start, and a Ctrl-C in between interrupted dev itself, leaving them to their
    # parent-death signal). A child still importing when it comes may print its KeyboardInterrupt: prefixed, its own.
    with running_dev(tmp_path, embedded_env(tmp_path)) as (proc, lines, _):
        pass  # SIGINT at once
    assert proc.returncode == 0, "".join(lines)
    own = [line for line in lines if " | " not in line[:12]]  # dev's own lines, not a child's ("web    | …")
    assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in own), "".join(own)
