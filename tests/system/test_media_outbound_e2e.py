"""Issue 21's outbound "Done when", end to end: a PDF handed over as bytes through the real web (gunicorn, POST
/v1/media) is sent to 1,000 recipients from two senders by two real workers through the simulator, which requires
each sender's own token: every message is sent, with one upload per sender (two in all, however many workers and
send threads wanted the file at once), each send naming its own sender's Meta media id; the stored messages keep
`upload`. Then a 30-days-old upload row makes the next send of that sender upload again, and only that sender."""

from __future__ import annotations

import hashlib
import os

import pytest
import requests

from tests.conftest import API_TOKEN
from tests.live import running_worker, wait_for, worker_settings
from tests.processes import gunicorn
from wa_outbox import enqueue_many
from wa_outbox.simulator import SimulatorServer

A, B = "106600000000001", "106600000000002"
TOKENS = {A: "EAAG-media-token-of-a", B: "EAAG-media-token-of-b"}
PDF = b"%PDF-1.4\n" + hashlib.sha256(b"invoice").digest() * 40000 + b"\n%%EOF\n"  # ~1.3 MB: two store chunks
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
WAIT = 180  # seconds: generous, for a loaded 2-core machine


def register(db) -> None:
    """Two senders of one app and WABA, each with its own token in its own environment variable."""
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('661')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES ('6601', '661')")
    for number in (A, B):
        os.environ[f"WA_OUTBOX_TEST_TOKEN_{number}"] = TOKENS[number]
        db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref) VALUES (%s, '6601', %s)",
                   (number, f"WA_OUTBOX_TEST_TOKEN_{number}"))


def count(db, sql: str, *params) -> int:
    return db.execute(sql, params).fetchone()[0]


def sent(db) -> int:
    return count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sent'")


@pytest.fixture
def accounts_sim():
    numbers = {number: {"token": token} for number, token in TOKENS.items()}
    with SimulatorServer(access_token="no-default-token", app_secret="unused", numbers=numbers, seed=21) as server:
        yield server


def test_a_pdf_from_bytes_to_1000_recipients_one_upload_per_sender(database_url, db, settings, accounts_sim):
    register(db)
    # The web's body limit bounds an upload over HTTP (its gunicorn worker buffers bodies): 2 MB here.
    with gunicorn(database_url, WA_OUTBOX_WEBHOOK_MAX_BYTES=str(2 * 1024 * 1024)) as (port, _):
        answer = requests.post(f"http://127.0.0.1:{port}/v1/media", headers=AUTH, timeout=60,
                               files={"file": ("invoice.pdf", PDF, "application/pdf")})
        too_large = requests.post(f"http://127.0.0.1:{port}/v1/media", headers=AUTH, timeout=60,
                                  files={"file": ("big.pdf", PDF * 2, "application/pdf")})
    assert answer.status_code == 201, answer.text
    assert too_large.status_code == 413 and "larger than the limit of 2097152 bytes" in too_large.json()["error"][
        "message"]
    assert count(db, "SELECT count(*) FROM wa_outbox.media") == 1
    upload = answer.json()
    assert upload["size"] == len(PDF) and upload["sha256"] == hashlib.sha256(PDF).hexdigest()
    message = {"type": "document", "document": {"upload": upload["id"], "filename": "invoice.pdf"}}
    enqueue_many(db, [{"to": f"+55119{i:08d}", "message": message, "phone_number_id": (A, B)[i % 2]}
                      for i in range(1000)])

    config = worker_settings(settings, accounts_sim.base_url, worker_concurrency=16, rate_limit_mps=200.0,
                             access_token=None)
    with running_worker(config) as first, running_worker(config) as second:
        wait_for(lambda: sent(db) == 1000, timeout=WAIT, interval=0.2, what="all 1000 messages sent")
        assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status <> 'sent'") == 0
        stats = accounts_sim.stats()["uploads"]
        assert stats == {"total": 2, "by_phone_number_id": {A: 1, B: 1}}
        assert first.sender.uploads.uploads + second.sender.uploads.uploads == 2

        meta_ids = dict(db.execute("SELECT phone_number_id, meta_media_id FROM wa_outbox.media_uploads "
                                   "WHERE media_id = %s", (upload["id"],)).fetchall())
        assert set(meta_ids) == {A, B} and meta_ids[A] != meta_ids[B]
        for number in (A, B):
            bodies = [m["body"] for m in accounts_sim.messages(phone_number_id=number)]
            assert len(bodies) == 500
            assert {b["document"]["id"] for b in bodies} == {meta_ids[number]}
            assert all("upload" not in b["document"] and b["document"]["filename"] == "invoice.pdf" for b in bodies)
        assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE message->'document'->>'upload' = %s",
                     str(upload["id"])) == 1000  # the stored messages keep their upload

        # Sender A's upload is 30 days old (Meta has forgotten it): its next send uploads again; B's does not.
        db.execute("UPDATE wa_outbox.media_uploads SET uploaded_at = now() - interval '30 days', "
                   "expires_at = now() - interval '1 day' WHERE phone_number_id = %s", (A,))
        enqueue_many(db, [{"to": "+5511900009999", "message": message, "phone_number_id": number}
                          for number in (A, B)])
        wait_for(lambda: sent(db) == 1002, timeout=WAIT, interval=0.2, what="the two later messages sent")
    assert accounts_sim.stats()["uploads"] == {"total": 3, "by_phone_number_id": {A: 2, B: 1}}
    renewed = dict(db.execute("SELECT phone_number_id, meta_media_id FROM wa_outbox.media_uploads "
                              "WHERE expires_at > now() + interval '28 days'").fetchall())
    assert set(renewed) == {A, B} and renewed[A] != meta_ids[A] and renewed[B] == meta_ids[B]
    later = {m["phone_number_id"]: m["body"]["document"]["id"] for m in accounts_sim.messages(to="+5511900009999")}
    assert later == renewed
