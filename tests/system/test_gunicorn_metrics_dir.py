"""The Prometheus multiprocess directory of a real gunicorn (wa_outbox/gunicorn_conf.py): one it made goes when the
master exits; one given in PROMETHEUS_MULTIPROC_DIR stays."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from tests.conftest import API_TOKEN, APP_SECRET

ROOT = Path(__file__).resolve().parents[2]


def _serve_and_stop(database_url: str, tmp: Path, **extra: str) -> None:
    """Start gunicorn with TMPDIR=tmp, scrape /metrics once, stop it with SIGTERM."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(DATABASE_URL=database_url, WHATSAPP_APP_SECRET=APP_SECRET, WHATSAPP_VERIFY_TOKEN="vt",
               WA_OUTBOX_API_TOKENS=API_TOKEN, WEB_CONCURRENCY="1", WA_OUTBOX_WEB_THREADS="2",
               WA_OUTBOX_BIND=f"127.0.0.1:{port}", TMPDIR=str(tmp), **extra)
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                             "wsgi:app"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "gunicorn did not come up"
            try:
                if requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).ok:
                    break
            except (requests.ConnectionError, requests.Timeout):
                threading.Event().wait(0.1)  # not listening yet: poll again
        made = list(tmp.glob("wa-outbox-metrics-*"))
        if "PROMETHEUS_MULTIPROC_DIR" not in extra:
            assert len(made) == 1 and any(made[0].iterdir()), made  # the workers' metric files are in it
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output


def test_the_directory_gunicorn_made_is_removed_when_the_master_exits(database_url, tmp_path):
    _serve_and_stop(database_url, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_given_directory_is_left_alone(database_url, tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    _serve_and_stop(database_url, tmp_path, PROMETHEUS_MULTIPROC_DIR=str(given))
    assert given.is_dir() and any(given.iterdir())  # still there, with the workers' files
    assert list(tmp_path.glob("wa-outbox-metrics-*")) == []
