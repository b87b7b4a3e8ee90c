"""The worker's uploads of outbound files (issue 21) through real HTTP to the simulator: failures judged like sends
(a 5xx retried with the message's backoff, a refusal dead with its reason, 190 pausing the sender), and a message
with a public link sent as before, beside them."""

from __future__ import annotations

from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox import enqueue, upload_media
from wa_outbox.config import Settings

DONE = ("sent", "delivered", "read")  # the simulator's status webhooks move a sent message on
PDF = b"%PDF-1.4\n" + b"0123456789" * 1000 + b"\n%%EOF\n"


def document(upload: int) -> dict:
    return {"type": "document", "document": {"upload": upload, "filename": "invoice.pdf"}}


def status(db, notification_id: int) -> tuple:
    return db.execute("SELECT status, attempts, last_error->>'message' FROM wa_outbox.notifications WHERE id = %s",
                      (notification_id,)).fetchone()


def test_upload_5xx_is_retried_then_sent_beside_a_linked_document(db, sender, sim, settings):
    sim.set_faults([{"mode": "http_error", "status": 503, "count": 2, "match": {"route": "upload"}}])
    media_id = upload_media(db, PDF, "application/pdf", "invoice.pdf")
    with_upload = enqueue(db, to="+5511987650001", message=document(media_id))
    linked = enqueue(db, to="+5511987650002", message={"type": "document", "document": {
        "link": "https://example.com/invoice.pdf", "filename": "invoice.pdf"}})
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: status(db, with_upload)[0] in DONE and status(db, linked)[0] in DONE, timeout=60,
                 what="both documents sent")
    reasons = [r for (r,) in db.execute(
        "SELECT detail->>'reason' FROM wa_outbox.notification_events WHERE notification_id = %s "
        "AND event = 'retry_scheduled' ORDER BY id", (with_upload,))]
    assert len(reasons) == 2 and all(r.startswith(f"upload of file {media_id} failed: ") for r in reasons)
    assert sim.stats()["uploads"] == {"total": 1, "by_phone_number_id": {SENDER: 1}}
    sent = {m["wa_id"]: m["body"]["document"] for m in sim.messages()}
    assert sent["5511987650002"] == {"link": "https://example.com/invoice.pdf", "filename": "invoice.pdf"}
    assert set(sent["5511987650001"]) == {"id", "filename"}


def test_an_upload_meta_refuses_is_dead_with_its_reason(db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": 131053, "details": "Unsupported file", "count": 1,
                     "match": {"route": "upload"}}])
    media_id = upload_media(db, PDF, "application/pdf")
    notification_id = enqueue(db, to="+5511987650003", message=document(media_id))
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: status(db, notification_id)[0] == "dead", timeout=60, what="the message dead")
    assert status(db, notification_id)[2] == (f"upload of file {media_id} failed: 131053: (#131053) Media upload "
                                              "error (Unsupported file)")
    assert sim.messages() == [] and sim.stats()["uploads"]["total"] == 0


def test_an_upload_refused_for_the_token_pauses_the_sender_and_spends_no_attempt(db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": 190, "count": 1, "match": {"route": "upload"}}])
    media_id = upload_media(db, PDF, "application/pdf")
    notification_id = enqueue(db, to="+5511987650004", message=document(media_id))
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: db.execute("SELECT paused_until > now() FROM wa_outbox.rate_limits "
                                    "WHERE phone_number_id = %s", (SENDER,)).fetchone() == (True,),
                 timeout=60, what="the sender paused")
        wait_for(lambda: status(db, notification_id)[0] == "queued", timeout=30, what="the message back in queue")
    queued, attempts, reason = status(db, notification_id)
    assert attempts == 0 and reason.startswith(f"upload of file {media_id} failed: 190")
    assert sim.messages() == []


def test_an_upload_refused_for_a_token_rotated_since_goes_again_with_the_new_one(db, settings, monkeypatch):
    """As a send does (worker/_sender.py _with_new_token): the worker read the sender's token before it was rotated;
    the upload refused with 190 is made once more with the token read again, and the sender is not paused."""
    from wa_outbox.simulator import SimulatorServer
    number = "106700000000001"
    monkeypatch.setenv("WA_OUTBOX_TEST_ROTATED_TOKEN", "token-before")
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('671')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES ('6701', '671')")
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref) "
               "VALUES (%s, '6701', 'WA_OUTBOX_TEST_ROTATED_TOKEN')", (number,))
    with SimulatorServer(access_token="none", app_secret="unused", numbers={number: {"token": "token-before"}},
                         seed=3) as accounts_sim, \
            running_worker(worker_settings(settings, accounts_sim.base_url, access_token=None)):
        first = enqueue(db, to="+5511987650005", message={"type": "text", "text": {"body": "hi"}},
                        phone_number_id=number)
        wait_for(lambda: status(db, first)[0] == "sent", timeout=60, what="the text sent (the token read)")
        accounts_sim.configure(numbers={number: {"token": "token-after"}})
        monkeypatch.setenv("WA_OUTBOX_TEST_ROTATED_TOKEN", "token-after")
        media_id = upload_media(db, PDF, "application/pdf")
        notification_id = enqueue(db, to="+5511987650006", message=document(media_id), phone_number_id=number)
        wait_for(lambda: status(db, notification_id)[0] == "sent", timeout=60, what="the document sent")
    assert accounts_sim.stats()["uploads"] == {"total": 1, "by_phone_number_id": {number: 1}}
    assert db.execute("SELECT paused_until FROM wa_outbox.rate_limits WHERE phone_number_id = %s",
                      (number,)).fetchone() in (None, (None,))


def test_a_claims_lookup_finds_each_senders_live_id_and_forgets_an_expired_one(db, database_url):
    """media_uploads_known.sql, as prefetch() runs it for a claim (a failure there would only cost uploads under
    the locks, so it is checked here directly)."""
    from wa_outbox import db as wa_db, queries
    from wa_outbox.queries import Claimed
    from wa_outbox.worker._uploads import Uploads
    media_id = upload_media(db, PDF, "application/pdf", "invoice.pdf")
    db.execute("INSERT INTO wa_outbox.media_uploads (media_id, phone_number_id, meta_media_id, expires_at) VALUES "
               "(%(m)s, '1', 'live', now() + interval '2 days'), (%(m)s, '2', 'old', now() + interval '10 minutes')",
               {"m": media_id})
    engine = wa_db.create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        found = queries.media_uploads_known(engine, media_ids=[media_id, media_id], senders=["1", "2"], margin_s=3600)
        assert [(u.phone_number_id, u.meta_media_id, u.filename) for u in found] == [("1", "live", "invoice.pdf")]
        uploads = Uploads(engine, None, Settings.from_env({}))  # type: ignore[arg-type]  # the lookup sends nothing
        uploads._known[(media_id, "2")] = ("old", None)
        uploads.prefetch([Claimed(id=i, phone_number_id=sender, recipient="5511987650007", message=document(media_id),
                                  attempts=1, max_attempts=None, correlation_id=None)
                          for i, sender in enumerate(("1", "2"))])
        assert uploads._known == {(media_id, "1"): ("live", "invoice.pdf")}
    finally:
        engine.dispose()
