"""Real processes for the system tests: a free port, the environment a service starts with, and a gunicorn started
as `wa-outbox web` (the Procfile's web) starts it (`gunicorn --config python:wa_outbox.gunicorn_conf
wa_outbox.web.wsgi:app`), up when it answers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import requests

from tests.conftest import API_TOKEN, APP_SECRET
from tests.live import wait_for

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    """This process's environment less every wa-outbox and WhatsApp variable, plus a web's required ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(DATABASE_URL=database_url, WHATSAPP_APP_SECRET=APP_SECRET, WHATSAPP_VERIFY_TOKEN="vt",
               WA_OUTBOX_API_TOKENS=API_TOKEN, WEB_CONCURRENCY="2", WA_OUTBOX_WEB_THREADS="2", LOG_LEVEL="INFO")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(extra)
    return env


def wait_until_up(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    """Until `url` answers 200 (a loaded machine may take a while to boot gunicorn's workers)."""
    def up() -> bool:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            return requests.get(url, timeout=5).ok
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or slow to answer under load
            return False
    wait_for(up, timeout=seconds, interval=0.1, what=f"{url} to come up")


@contextlib.contextmanager
def gunicorn(database_url: str, ready_path: str = "/healthz", **extra: str) -> Iterator[tuple[int, list[str]]]:
    """A real gunicorn on a free port with `service_env(database_url, **extra)`; yields (port, output), the output
    filled once it stopped. Stopped with SIGTERM; it must exit 0."""
    port = free_port()
    env = service_env(database_url, WA_OUTBOX_BIND=f"127.0.0.1:{port}", **extra)
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                             "wa_outbox.web.wsgi:app"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    try:
        wait_until_up(f"http://127.0.0.1:{port}{ready_path}", proc)
        yield port, output
    finally:
        proc.send_signal(signal.SIGTERM)
        output.append(proc.communicate(timeout=60)[0])
    assert proc.returncode == 0, output[0]


def push_env(database_url: str, secret_key: str, **extra: str) -> dict[str, str]:
    """`service_env` for a process that stores or pushes to endpoints on this machine: the secret key, private
    addresses allowed, retries a fraction of a second apart, no sends to Meta (dry run)."""
    return service_env(database_url, WA_OUTBOX_SECRET_KEY=secret_key, WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE="true",
                       WA_OUTBOX_DELIVERY_SCHEDULE="0.2,0.2,0.2,0.2,0.2", WA_OUTBOX_DELIVERY_TIMEOUT="5",
                       WA_OUTBOX_POLL_INTERVAL="0.2", WA_OUTBOX_DRY_RUN="true", WA_OUTBOX_SHUTDOWN_GRACE="5",
                       WHATSAPP_ACCESS_TOKEN="test-access-token", WHATSAPP_PHONE_NUMBER_ID="100000000000001",
                       WHATSAPP_API_BASE_URL="http://127.0.0.1:9", **extra)


@contextlib.contextmanager
def cli_worker(env: dict[str, str]) -> Iterator[list[str]]:
    """`wa-outbox worker` as a real process with `env` (e.g. push_env(...)); yields its output lines as they come.
    Stopped with SIGTERM; it must exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "worker"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(timeout=10)
    assert proc.returncode == 0, "".join(lines)


def pg_dump_for(database_url: str) -> str | None:
    """A pg_dump that can dump this server (pg_dump refuses a server newer than itself): the embedded Postgres's own
    (pgserver ships one) or the system's, whichever is new enough; None when there is none."""
    import re
    import shutil

    import psycopg
    with psycopg.connect(database_url) as conn:
        server_major = conn.info.server_version // 10000
    candidates = []
    try:
        import pgserver  # the embedded Postgres's binaries
        candidates.append(str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"))
    except ImportError:
        pass
    candidates.append(shutil.which("pg_dump") or "")
    for path in candidates:
        if not path or not os.access(path, os.X_OK):
            continue
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"(\d+)(?:\.\d+)?", version)
        if found and int(found.group(1)) >= server_major:
            return path
    return None
