"""Webhooks for several Meta apps through a real gunicorn (two worker processes, each holding the registry in memory)
started without WHATSAPP_APP_SECRET: each app's bodies verified by its own secret and recorded so, another app's WABA
refused, an app registered while it runs verifying without a restart; and gunicorn refusing, in one line, to start
with neither the secret nor a registered app."""

from __future__ import annotations

import subprocess
import sys

import requests

from tests.conftest import meta_body
from tests.db.test_webhook_apps import (
    APP_A,
    APP_B,
    APP_C,
    KEY,
    NUMBER_A,
    NUMBER_B,
    NUMBER_C,
    SECRET_A,
    SECRET_B,
    SECRET_C,
    WABA_A,
    WABA_B,
    WABA_C,
    message,
    register_app,
    register_sender,
    stored,
)
from tests.live import wait_for
from tests.processes import ROOT, gunicorn, service_env
from wa_outbox.config import NO_WEBHOOK_SECRET
from wa_outbox.webhooks import sign


def post(port: int, payload: dict, secret: str) -> requests.Response:
    body = meta_body(payload)
    return requests.post(f"http://127.0.0.1:{port}/webhooks/whatsapp", data=body, timeout=10,
                         headers={"X-Hub-Signature-256": sign(secret, body), "Content-Type": "application/json"})


def test_gunicorn_without_the_app_secret_verifies_each_registered_app(database_url, db):
    register_app(db, APP_A, SECRET_A)
    register_app(db, APP_B, SECRET_B)
    register_sender(db, APP_A, WABA_A, NUMBER_A)
    register_sender(db, APP_B, WABA_B, NUMBER_B)
    with gunicorn(database_url, WHATSAPP_APP_SECRET="", WA_OUTBOX_SECRET_KEY=KEY) as (port, output):
        assert post(port, message(WABA_A, NUMBER_A, "wamid.GA"), SECRET_A).status_code == 200
        assert post(port, message(WABA_B, NUMBER_B, "wamid.GB"), SECRET_B).status_code == 200
        refused = post(port, message(WABA_B, NUMBER_B, "wamid.GX"), SECRET_A)
        assert refused.status_code == 403 and refused.json()["error"]["message"].startswith(f"signed by app {APP_A}")
        with db.transaction():  # one commit: a reload between the two would see app C without its number
            register_app(db, APP_C, SECRET_C)
            register_sender(db, APP_C, WABA_C, NUMBER_C)
        # every worker process reloads on its own: several POSTs in a row, spread over them, all verify
        wait_for(lambda: all(post(port, message(WABA_C, NUMBER_C, "wamid.GC"), SECRET_C).status_code == 200
                             for _ in range(6)), timeout=30, what="app C to verify in every worker process")
        metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert 'wa_outbox_webhook_rejected_total{reason="wrong_app"} 1.0' in metrics
    assert stored(db) == [("messages", WABA_A, NUMBER_A, APP_A, False), ("messages", WABA_B, NUMBER_B, APP_B, False),
                          ("messages", WABA_C, NUMBER_C, APP_C, False)]
    for secret in (SECRET_A, SECRET_B, SECRET_C, KEY):
        assert secret not in output[0]


def test_gunicorn_refuses_to_start_with_neither_the_secret_nor_an_app_in_one_line(database_url):
    env = service_env(database_url, WHATSAPP_APP_SECRET="", WA_OUTBOX_SECRET_KEY=KEY)  # a key, but no app
    proc = subprocess.run([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                           "wsgi:app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"wa-outbox: configuration error: {NO_WEBHOOK_SECRET}"
