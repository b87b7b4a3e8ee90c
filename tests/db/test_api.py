"""The /v1 API through the real Flask app on real Postgres."""

from __future__ import annotations

import pytest

from tests.conftest import API_TOKEN

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
TEXT = {"type": "text", "text": {"body": "Olá"}}



def post(client, body, headers=None):
    return client.post("/v1/messages", json=body, headers={**AUTH, **(headers or {})})


def count(db) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0]


def test_enqueue_answers_202_with_id_and_status(client, db, sender):
    r = post(client, {"to": "+5511987654321", "message": TEXT, "correlation_id": "checkout-9"})
    assert r.status_code == 202
    assert r.json == {"id": r.json["id"], "status": "queued"}
    assert r.headers["Location"] == f"/v1/messages/{r.json['id']}"
    row = db.execute("SELECT recipient, correlation_id, message FROM wa_outbox.notifications").fetchone()
    assert row == ("5511987654321", "checkout-9", TEXT)


def test_header_correlation_id_is_used_when_the_body_has_none(client, db, sender):
    r = post(client, {"to": "+5511987654321", "message": TEXT}, {"X-Correlation-Id": "req-77"})
    assert r.headers["X-Correlation-Id"] == "req-77"
    assert db.execute("SELECT correlation_id FROM wa_outbox.notification_events").fetchone()[0] == "req-77"


def test_idempotency_key_same_id_and_409_on_a_different_body(client, db, sender):
    key = {"Idempotency-Key": "order-1-paid"}
    first = post(client, {"to": "+5511987654321", "message": TEXT}, key)
    again = post(client, {"to": "+5511987654321", "message": TEXT}, key)
    assert first.status_code == again.status_code == 202
    assert first.json["id"] == again.json["id"]
    assert "Idempotent-Replayed" not in first.headers and again.headers["Idempotent-Replayed"] == "true"
    other = post(client, {"to": "+5511987654321", "message": {"type": "text", "text": {"body": "other"}}}, key)
    assert other.status_code == 409 and "order-1-paid" in other.json["error"]["message"]
    assert count(db) == 1


@pytest.mark.parametrize("body, fragment", [
    ({"to": "123", "message": TEXT}, "invalid recipient"),
    ({"to": "+5511987654321", "message": {"type": "hologram", "hologram": {}}}, "unknown message type"),
    ({"to": "+5511987654321"}, "JSON object"),
    ({"to": "+5511987654321", "message": TEXT, "mesage": 1}, "unknown field(s): mesage"),
    ({"to": "+5511987654321", "message": TEXT, "phone_number_id": "abc"}, "phone_number_id"),
    ({"to": "+5511987654321", "message": {"type": "text", "text": {"body": "x" * 5000}}}, "4096"),
    ([1, 2], "JSON object"),
])
def test_bad_input_is_400_and_writes_nothing(client, db, sender, body, fragment):
    r = post(client, body)
    assert r.status_code == 400
    assert fragment in r.json["error"]["message"]
    assert count(db) == 0


def test_malformed_json_and_oversize_bodies(client, db, sender):
    r = client.post("/v1/messages", data=b"{oops", headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json["error"]["message"]
    big = {"to": "+5511987654321", "message": {"type": "text", "text": {"body": "x" * 200_000}}}
    assert post(client, big).status_code == 413
    assert count(db) == 0


def test_missing_or_wrong_token_is_401(client, db, sender):
    r = client.post("/v1/messages", json={"to": "+5511987654321", "message": TEXT})
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    r = client.post("/v1/messages", json={"to": "+5511987654321", "message": TEXT},
                    headers={"Authorization": "Bearer wrong-token-wrong-token"})
    assert r.status_code == 401
    assert client.get("/v1/dead").status_code == 401
    assert count(db) == 0


def test_get_message_shows_status_and_timeline(client, db, sender):
    nid = post(client, {"to": "+5511987654321", "message": TEXT}).json["id"]
    r = client.get(f"/v1/messages/{nid}", headers=AUTH)
    assert r.status_code == 200
    assert r.json["status"] == "queued" and r.json["attempts"] == 0 and r.json["wamid"] is None
    assert [e["event"] for e in r.json["timeline"]] == ["queued"]
    assert r.json["created_at"].startswith("20")  # ISO 8601
    assert client.get("/v1/messages/999999", headers=AUTH).status_code == 404


def test_find_by_phone_or_correlation_id(client, db, sender):
    post(client, {"to": "+5511987654321", "message": TEXT, "correlation_id": "corr-x"})
    assert len(client.get("/v1/messages?q=%2B55%2011%2098765-4321", headers=AUTH).json["messages"]) == 1
    assert len(client.get("/v1/messages?q=corr-x", headers=AUTH).json["messages"]) == 1
    assert client.get("/v1/messages", headers=AUTH).status_code == 400


def test_dead_letter_list_and_retry(client, db, sender):
    nid = post(client, {"to": "+5511987654321", "message": TEXT}).json["id"]
    other = post(client, {"to": "+5511987654322", "message": TEXT}).json["id"]
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead', attempts = 10, "
               "last_error = '{\"message\": \"131026: undeliverable\", \"code\": 131026}' WHERE id = %s", (nid,))
    dead = client.get("/v1/dead", headers=AUTH).json["dead"]
    assert [d["id"] for d in dead] == [nid] and dead[0]["last_error"]["code"] == 131026
    assert client.get("/v1/dead?code=131026", headers=AUTH).json["dead"][0]["id"] == nid
    assert client.get("/v1/dead?code=1", headers=AUTH).json["dead"] == []
    assert client.get("/v1/dead?limit=abc", headers=AUTH).status_code == 400

    r = client.post(f"/v1/messages/{nid}/retry", headers=AUTH)
    assert r.status_code == 200 and r.json == {"id": nid, "status": "queued"}
    row = db.execute("SELECT status, attempts FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()
    assert row == ("queued", 0)
    events = [e["event"] for e in client.get(f"/v1/messages/{nid}", headers=AUTH).json["timeline"]]
    assert events[-1] == "requeued"
    assert client.post(f"/v1/messages/{other}/retry", headers=AUTH).status_code == 409  # queued, not dead
    assert client.post("/v1/messages/999999/retry", headers=AUTH).status_code == 404


def test_enqueue_without_a_configured_sender_is_a_clear_400(client, db):
    r = post(client, {"to": "+5511987654321", "message": TEXT})
    assert r.status_code == 400 and "no sender" in r.json["error"]["message"]
    assert post(client, {"to": "+5511987654321", "message": TEXT, "phone_number_id": "123"}).status_code == 202


def test_metrics_report_queue_depth_and_workers(client, db, sender):
    post(client, {"to": "+5511987654321", "message": TEXT})
    text = client.get("/metrics").get_data(as_text=True)
    assert 'wa_outbox_queue_rows{queue="notifications",status="queued"} 1.0' in text
    assert 'wa_outbox_queue_rows{queue="notifications",status="dead"} 0.0' in text
    assert "wa_outbox_workers_alive 0.0" in text
