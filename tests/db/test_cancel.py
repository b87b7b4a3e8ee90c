"""Cancelling a queued message (HTTP and CLI), and Meta-`failed` messages in the dead-letter queue with Meta's code
and title (dlq list, /v1/dead, the queue gauges)."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from tests.conftest import API_TOKEN
from tests.live import running_worker, wait_for, worker_settings
from wa_outbox import db as wa_db, outbox
from wa_outbox.db import create_engine
from wa_outbox.enqueue import enqueue
from wa_outbox.states import MessageStatus, TimelineEvent

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
TEXT = {"type": "text", "text": {"body": "seu pedido saiu"}}


def status_of(db, nid: int) -> str:
    return db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()[0]


def set_status(db, nid: int, status: str) -> None:
    db.execute("UPDATE wa_outbox.notifications SET status = %s WHERE id = %s", (status, nid))


def cancel_events(db, nid: int) -> list[tuple]:
    return db.execute("SELECT event, detail->>'by' FROM wa_outbox.notification_events WHERE notification_id = %s "
                      "AND event = %s", (nid, TimelineEvent.CANCELLED)).fetchall()


def test_api_cancels_a_queued_message_with_a_timeline_event_naming_the_api(client, db, sender):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    r = client.post(f"/v1/messages/{nid}/cancel", headers=AUTH)
    assert r.status_code == 200 and r.get_json() == {"id": nid, "status": "cancelled"}
    assert status_of(db, nid) == MessageStatus.CANCELLED
    assert cancel_events(db, nid) == [("cancelled", "api")]
    timeline = client.get(f"/v1/messages/{nid}", headers=AUTH).get_json()["timeline"]
    assert timeline[-1]["event"] == "cancelled"

    again = client.post(f"/v1/messages/{nid}/cancel", headers=AUTH)  # only queued messages: this one is cancelled
    assert again.status_code == 409 and "is cancelled" in again.get_json()["error"]["message"]
    assert len(cancel_events(db, nid)) == 1


@pytest.mark.parametrize("status", ["sending", "unknown", "sent", "delivered", "read", "failed", "dead"])
def test_api_refuses_to_cancel_any_other_status_naming_it(client, db, sender, status):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    db.execute("UPDATE wa_outbox.notifications SET status = %s, locked_until = CASE WHEN %s = 'sending' "
               "THEN now() END WHERE id = %s", (status, status, nid))
    r = client.post(f"/v1/messages/{nid}/cancel", headers=AUTH)
    assert r.status_code == 409
    assert f"is {status}" in r.get_json()["error"]["message"] and r.get_json()["error"]["message_status"] == status
    assert status_of(db, nid) == status and cancel_events(db, nid) == []


def test_api_cancel_of_an_unknown_id_is_404_and_needs_a_token(client, db, sender):
    assert client.post("/v1/messages/424242/cancel", headers=AUTH).status_code == 404
    assert client.post(f"/v1/messages/{2 ** 63}/cancel", headers=AUTH).status_code == 404
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    assert client.post(f"/v1/messages/{nid}/cancel").status_code == 401
    assert status_of(db, nid) == "queued"


def test_cli_cancels_queued_ids_and_exits_non_zero_naming_the_others(run, db, sender):
    queued = [enqueue(db, to=f"+55119876543{i:02d}", message=TEXT) for i in range(2)]
    sent = enqueue(db, to="+5511987654399", message=TEXT)
    set_status(db, sent, "sent")
    r = run("cancel", str(queued[0]), str(queued[1]), str(sent), "999999")
    assert r.exit_code != 0
    assert f"{sent}: is sent" in r.output and "999999: no such message" in r.output
    assert [status_of(db, nid) for nid in queued] == ["cancelled", "cancelled"] and status_of(db, sent) == "sent"
    assert cancel_events(db, queued[0]) == [("cancelled", "cli")]
    ok = run("cancel", str(enqueue(db, to="+5511987654398", message=TEXT)))
    assert ok.exit_code == 0 and "cancelled" in ok.output
    assert run("cancel").exit_code != 0 and run("cancel", "abc").exit_code != 0


@contextmanager
def engine_of(settings):
    engine = create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        yield engine
    finally:
        engine.dispose()


def test_a_cancelled_message_is_never_sent(db, sender, sim, settings):
    cancelled = enqueue(db, to="+5511900000001", message=TEXT)
    kept = enqueue(db, to="+5511900000002", message=TEXT)
    with engine_of(settings) as engine:
        assert outbox.cancel(engine, [cancelled, 987654], actor="test") == {cancelled: ("cancelled", True)}
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: status_of(db, kept) in ("sent", "delivered", "read"), what="the other message sent")
    assert [m["to"] for m in sim.messages()] == ["+5511900000002"]
    assert status_of(db, cancelled) == "cancelled"


def test_meta_failed_messages_are_in_the_dlq_with_code_and_title(client, run, db, sender, sim, settings):
    sim.set_faults([{"mode": "failed_status", "code": 131026, "count": 1}])
    failed = enqueue(db, to="+5511987654321", message=TEXT)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: status_of(db, failed) == "failed", what="failed")
    last_error = db.execute("SELECT last_error FROM wa_outbox.notifications WHERE id = %s", (failed,)).fetchone()[0]
    assert last_error["code"] == 131026 and last_error["title"]
    assert last_error["message"].startswith(f"Meta reported the message failed: 131026 {last_error['title']}")

    listed = run("dlq", "list")
    assert listed.exit_code == 0 and f"{failed}\tfailed\t" in listed.output and "131026" in listed.output
    assert str(failed) in run("dlq", "list", "--code", "131026").output
    assert str(failed) not in run("dlq", "list", "--code", "131047").output

    dead = client.get("/v1/dead?code=131026", headers=AUTH).get_json()["dead"]
    assert [(d["id"], d["status"], d["last_error"]["code"]) for d in dead] == [(failed, "failed", 131026)]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'wa_outbox_queue_rows{queue="notifications",status="failed"} 1.0' in metrics

    assert run("dlq", "retry", "--all", "--code", "131026").output.strip() == "requeued 1"
    assert status_of(db, failed) == "queued"


def test_failed_status_with_odd_errors_still_applies(db, sender, sim, settings):
    """Meta's `errors` are stored as given; only a well-typed code and title reach the top level."""
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    db.execute("UPDATE wa_outbox.notifications SET status = 'sent', wamid = 'wamid.ODD' WHERE id = %s", (nid,))
    with engine_of(settings) as engine:
        wa_db.fetch(engine, "apply_statuses", {"statuses": json.dumps([
            {"event_id": 1, "wamid": "wamid.ODD", "status": "failed", "notification_id": None,
             "errors": [{"code": "1e400", "title": {"x": 1}}], "ts": 1749416383}])})
    last_error = db.execute("SELECT last_error FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()[0]
    assert status_of(db, nid) == "failed"
    assert last_error["message"] == "Meta reported the message failed" and "code" not in last_error
    assert last_error["errors"] == [{"code": "1e400", "title": {"x": 1}}]
