"""The real processes: gunicorn serving the checkout's wsgi:app (tests/processes.py starts the app as `wa-outbox web`
does), and the CLI's start-up errors."""

from __future__ import annotations

import signal
import subprocess
import sys

import requests

from tests.conftest import APP_SECRET, meta_body
from tests.processes import ROOT, free_port, service_env, wait_until_up
from wa_outbox.config import NO_WEBHOOK_SECRET
from wa_outbox.webhooks import sign


def test_gunicorn_serves_the_receiver_and_stops_cleanly_on_sigterm(database_url, db):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app"],
        cwd=ROOT, env=service_env(database_url, WA_OUTBOX_BIND=f"127.0.0.1:{port}"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{base}/healthz", proc)
        assert requests.get(f"{base}/readyz").json()["status"] == "ready"
        payload = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
            {"field": "messages", "value": {"metadata": {"phone_number_id": "9"},
                                            "messages": [{"id": "wamid.GUNI", "type": "text"}]}}]}]}
        body = meta_body(payload)
        headers = {"X-Hub-Signature-256": sign(APP_SECRET, body), "Content-Type": "application/json"}
        answers = [requests.post(f"{base}/webhooks/whatsapp", data=body, headers=headers) for _ in range(4)]
        assert [a.status_code for a in answers] == [200] * 4
        assert sum(a.json()["new"] for a in answers) == 1
        assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == 1
        # metrics aggregate every gunicorn worker process
        metrics = requests.get(f"{base}/metrics").text
        assert 'wa_outbox_webhook_events_total{result="duplicate"} 3.0' in metrics
        assert "flask_http_request_duration_seconds" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert APP_SECRET not in output


def test_gunicorn_refuses_to_start_without_the_app_secret_in_one_line(database_url):
    env = service_env(database_url)
    del env["WHATSAPP_APP_SECRET"]
    proc = subprocess.run([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                           "wsgi:app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    # one line naming both ways: the secret, or a registered app (issue 19: tests/system/test_webhook_apps.py)
    assert proc.stderr.strip() == f"wa-outbox: configuration error: {NO_WEBHOOK_SECRET}"


def test_cli_reports_a_malformed_variable_without_a_traceback(database_url):
    proc = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "db", "upgrade"], cwd=ROOT,
                          env=service_env(database_url, WA_OUTBOX_RATE_LIMIT_MPS="fast"),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "WA_OUTBOX_RATE_LIMIT_MPS='fast' is not valid" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_db_upgrade_migrates_and_records_the_default_sender(database_url, db):
    proc = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "db", "upgrade"], cwd=ROOT,
                          env=service_env(database_url, WHATSAPP_PHONE_NUMBER_ID="123456"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "schema at head" in proc.stdout
    assert db.execute("SELECT value FROM wa_outbox.settings WHERE key = 'default_phone_number_id'"
                      ).fetchone()[0] == "123456"
