"""POST /webhooks/whatsapp and GET /webhooks/whatsapp through the real Flask app on real Postgres."""

from __future__ import annotations

import copy
import json
import re
import threading
from pathlib import Path

import pytest

from tests.conftest import APP_SECRET, meta_body, post_webhook
from wa_outbox.webhooks import sign

ROOT = Path(__file__).resolve().parents[2]


def text_message(wamid: str, body: str = "hello", phone_number_id: str = "106540352242922") -> dict:
    return {"from": "16505551234", "id": wamid, "timestamp": "1749416383", "type": "text", "text": {"body": body}}


def status(wamid: str, state: str) -> dict:
    return {"id": wamid, "status": state, "timestamp": "1749416400", "recipient_id": "16505551234",
            "biz_opaque_callback_data": "42"}


def envelope(*, messages=(), statuses=(), account="419561257915477") -> dict:
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
             "contacts": [{"profile": {"name": "Sheena Nelson"}, "wa_id": "16505551234"}]}
    if messages:
        value["messages"] = list(messages)
    if statuses:
        value["statuses"] = list(statuses)
    return {"object": "whatsapp_business_account",
            "entry": [{"id": account, "changes": [{"field": "messages", "value": value}]}]}


def stored(db) -> list[tuple]:
    return db.execute("SELECT dedup_key, kind, field, status FROM wa_outbox.webhook_events ORDER BY id").fetchall()


def count(db) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0]


# --- verification handshake ------------------------------------------------------------------------------------------

def test_handshake_echoes_challenge_with_the_right_token(client):
    r = client.get("/webhooks/whatsapp?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=test-verify-token")
    assert r.status_code == 200
    assert r.get_data(as_text=True) == "1158201444"


def test_handshake_refuses_a_wrong_token_or_mode(client):
    r = client.get("/webhooks/whatsapp?hub.mode=subscribe&hub.challenge=1&hub.verify_token=nope")
    assert r.status_code == 403 and r.json["error"]["status"] == 403
    r = client.get("/webhooks/whatsapp?hub.mode=unsubscribe&hub.challenge=1&hub.verify_token=test-verify-token")
    assert r.status_code == 403


# --- signature --------------------------------------------------------------------------------------------------------

def test_missing_signature_is_401_and_stores_nothing(client, db):
    body = meta_body(envelope(messages=[text_message("wamid.A")]))
    r = client.post("/webhooks/whatsapp", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 401
    assert "X-Hub-Signature-256" in r.json["error"]["message"]
    assert count(db) == 0


def test_wrong_signature_is_403_and_stores_nothing(client, db):
    r = post_webhook(client, envelope(messages=[text_message("wamid.A")]), secret="another-secret")
    assert r.status_code == 403
    assert r.json["error"]["status"] == 403
    r = post_webhook(client, envelope(messages=[text_message("wamid.A")]), headers={"X-Hub-Signature-256": "sha256=zz"})
    assert r.status_code == 403
    assert count(db) == 0


def test_signature_over_a_tampered_body_is_refused(client, db):
    body = meta_body(envelope(messages=[text_message("wamid.A")]))
    tampered = body.replace(b"hello", b"hellO")
    r = client.post("/webhooks/whatsapp", data=tampered, headers={"X-Hub-Signature-256": sign(APP_SECRET, body)})
    assert r.status_code == 403
    assert count(db) == 0


def test_body_signed_as_meta_signs_unicode_verifies_and_stores_the_text(client, db):
    payload = envelope(messages=[text_message("wamid.U", body="Olá 😀 a@b/c")])
    body = meta_body(payload)
    assert b"\\u00e1" in body and b"\\ud83d" in body  # escaped exactly as Meta sends it
    r = post_webhook(client, body)
    assert r.status_code == 200, r.json
    stored_text = db.execute("SELECT payload #>> '{value,messages,0,text,body}' FROM wa_outbox.webhook_events"
                             ).fetchone()[0]
    assert stored_text == "Olá 😀 a@b/c"


def test_signature_is_checked_before_parsing(client, db):
    r = client.post("/webhooks/whatsapp", data=b"not json", headers={"X-Hub-Signature-256": "sha256=00"})
    assert r.status_code == 403  # not 400: an unsigned body is never parsed


# --- malformed and oversize bodies ------------------------------------------------------------------------------------

def test_malformed_json_is_400_naming_the_problem(client, db):
    r = post_webhook(client, b'{"object": "whatsapp_business_account", "entry": [')
    assert r.status_code == 400
    assert "not valid JSON" in r.json["error"]["message"]
    assert count(db) == 0


def test_wrong_object_is_400(client, db):
    r = post_webhook(client, {"object": "page", "entry": []})
    assert r.status_code == 400
    assert "whatsapp_business_account" in r.json["error"]["message"]


def test_structurally_broken_payloads_are_400_and_store_nothing(client, db):
    good = envelope(messages=[text_message("wamid.A")])
    broken = []

    def breaking(change, message: str) -> None:
        b = copy.deepcopy(good)
        change(b)
        broken.append((b, message))

    breaking(lambda b: b.update(entry={"id": "x"}), "entry must be a list")
    breaking(lambda b: b["entry"][0].pop("changes"), "entry[0].changes must be a list")
    breaking(lambda b: b["entry"][0]["changes"][0].update(value="x"), "value must be an object")
    breaking(lambda b: b["entry"][0]["changes"][0].pop("field"), "field must be")
    breaking(lambda b: b["entry"][0]["changes"][0]["value"].update(messages={"id": "x"}), "messages must be a list")
    # a valid change in the same POST as a broken one: nothing of it is stored either
    breaking(lambda b: b["entry"].append({"id": "2", "changes": [None]}), "entry[1].changes[0]")
    for payload, message in broken:
        r = post_webhook(client, payload)
        assert r.status_code == 400, payload
        assert message in r.json["error"]["message"]
    r = post_webhook(client, b"[1, 2]")
    assert r.status_code == 400 and "JSON object" in r.json["error"]["message"]
    assert count(db) == 0


def test_oversize_body_is_413_with_json_error(app, client, db):
    limit = app.config["MAX_CONTENT_LENGTH"]
    payload = envelope(messages=[text_message("wamid.BIG", body="x" * (limit + 1))])
    r = post_webhook(client, payload)
    assert r.status_code == 413
    assert r.json["error"]["status"] == 413 and str(limit) in r.json["error"]["message"]
    assert count(db) == 0


def test_a_body_of_meta_maximum_size_is_accepted(client, db):
    # Meta sends up to 3 MB; the default limit leaves margin above that.
    payload = envelope(messages=[text_message(f"wamid.M{i}", body="y" * 3000) for i in range(1000)])
    body = meta_body(payload)
    assert len(body) > 3_000_000
    r = post_webhook(client, body)
    assert r.status_code == 200 and r.json["new"] == 1000


# --- storing and deduplication ----------------------------------------------------------------------------------------

def test_each_update_is_stored_with_its_key_and_queued(client, db):
    payload = envelope(messages=[text_message("wamid.M1"), text_message("wamid.M2")],
                       statuses=[status("wamid.S1", "sent"), status("wamid.S1", "delivered")])
    r = post_webhook(client, payload)
    assert r.status_code == 200
    assert r.json == {"received": 4, "new": 4, "duplicate": 0}
    assert sorted(stored(db)) == sorted([
        ("m:wamid.M1", "message", "messages", "queued"), ("m:wamid.M2", "message", "messages", "queued"),
        ("s:wamid.S1:sent", "status", "messages", "queued"), ("s:wamid.S1:delivered", "status", "messages", "queued"),
    ])
    row = db.execute("SELECT payload, attempts, next_attempt_at <= now(), phone_number_id, account_id, wamid "
                     "FROM wa_outbox.webhook_events WHERE dedup_key = 'm:wamid.M2'").fetchone()
    value = row[0]["value"]
    assert row[0]["field"] == "messages"
    assert [m["id"] for m in value["messages"]] == ["wamid.M2"]  # narrowed to this one message
    assert value["contacts"][0]["wa_id"] == "16505551234"        # with the context a handler needs
    assert "statuses" not in value
    assert row[1:] == (0, True, "106540352242922", "419561257915477", "wamid.M2")


def test_the_same_post_again_stores_nothing_new(client, db):
    payload = envelope(messages=[text_message("wamid.M1")], statuses=[status("wamid.S1", "read")])
    assert post_webhook(client, payload).json == {"received": 2, "new": 2, "duplicate": 0}
    assert post_webhook(client, payload).json == {"received": 2, "new": 0, "duplicate": 2}
    assert count(db) == 2


def test_redelivery_rebatched_differently_stores_nothing_new(client, db):
    m = [text_message(f"wamid.M{i}") for i in range(6)]
    s = [status(f"wamid.S{i}", "delivered") for i in range(4)]
    first = envelope(messages=m, statuses=s)
    assert post_webhook(client, first).json["new"] == 10
    # Meta redelivers: split over several POSTs, in another order, some merged with new updates.
    assert post_webhook(client, envelope(messages=m[3:], statuses=s[:1])).json == {
        "received": 4, "new": 0, "duplicate": 4}
    assert post_webhook(client, envelope(messages=list(reversed(m[:3])))).json["new"] == 0
    merged = envelope(messages=[text_message("wamid.NEW")], statuses=list(reversed(s)))
    merged["entry"].append(envelope(messages=m[1:2])["entry"][0])
    assert post_webhook(client, merged).json == {"received": 6, "new": 1, "duplicate": 5}
    assert count(db) == 11


def test_duplicates_inside_one_post_are_stored_once(client, db):
    payload = envelope(messages=[text_message("wamid.D"), text_message("wamid.D")],
                       statuses=[status("wamid.S", "sent")] * 3)
    r = post_webhook(client, payload)
    assert r.json == {"received": 5, "new": 2, "duplicate": 3}
    assert count(db) == 2


def test_dedup_keys_are_compared_byte_by_byte(db):
    """Every stored update probes and enters the unique index on dedup_key: it is in byte order (COLLATE "C"), so no
    comparison goes through the database's collation (strcoll), and the INSERT sorts its rows in that same order."""
    [(collation,)] = db.execute(
        "SELECT collation_name FROM information_schema.columns WHERE table_schema = 'wa_outbox' "
        "AND table_name = 'webhook_events' AND column_name = 'dedup_key'").fetchall()
    assert collation == "C"
    from wa_outbox.db import query
    assert 'ORDER BY e.k COLLATE "C"' in query("insert_webhook_events")
    assert 'ORDER BY e.k COLLATE "C"' in query("insert_webhook_events_with_bodies")


def test_same_payload_posted_concurrently_is_stored_once(app, db):
    payload = envelope(messages=[text_message(f"wamid.C{i}") for i in range(50)],
                       statuses=[status(f"wamid.CS{i}", "read") for i in range(50)])
    # Each thread posts the batch in its own order, so overlapping inserts race on the unique index.
    payloads = [payload, envelope(messages=payload["entry"][0]["changes"][0]["value"]["messages"][::-1],
                                  statuses=payload["entry"][0]["changes"][0]["value"]["statuses"][::-1]), payload]
    results, errors = [], []
    barrier = threading.Barrier(len(payloads))

    def post(p):
        try:
            c = app.test_client()
            barrier.wait()
            results.append(post_webhook(c, p))
        except Exception as exc:  # noqa: BLE001 - any failure of a thread is reported below
            errors.append(exc)

    threads = [threading.Thread(target=post, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [r.status_code for r in results] == [200, 200, 200]
    assert sum(r.json["new"] for r in results) == 100
    assert sum(r.json["duplicate"] for r in results) == 200
    assert count(db) == 100
    assert db.execute("SELECT count(DISTINCT dedup_key) FROM wa_outbox.webhook_events").fetchone()[0] == 100


def test_group_read_receipts_per_participant_are_distinct(client, db):
    read = [dict(status("wamid.G", "read"), recipient_type="group", recipient_participant_id=p) for p in ("111", "222")]
    assert post_webhook(client, envelope(statuses=read)).json["new"] == 2
    assert {k for k, *_ in stored(db)} == {"s:wamid.G:read:111", "s:wamid.G:read:222"}


def test_unknown_fields_are_acknowledged_and_stored(client, db):
    payload = {"object": "whatsapp_business_account", "entry": [{"id": "1", "time": 1, "changes": [
        {"field": "some_future_field", "value": {"anything": [1, 2, {"x": None}]}},
        {"field": "account_update", "value": {"event": "VERIFIED_ACCOUNT"}},
    ]}]}
    r = post_webhook(client, payload)
    assert r.status_code == 200 and r.json["new"] == 2
    rows = db.execute("SELECT field, kind, payload FROM wa_outbox.webhook_events ORDER BY field").fetchall()
    assert [(f, k) for f, k, _ in rows] == [("account_update", "change"), ("some_future_field", "change")]
    assert rows[1][2]["value"] == {"anything": [1, 2, {"x": None}]}
    assert post_webhook(client, payload).json["new"] == 0  # digest keys deduplicate too


def test_account_level_errors_riding_with_messages_are_kept(client, db):
    payload = envelope(messages=[text_message("wamid.E")])
    payload["entry"][0]["changes"][0]["value"]["errors"] = [{"code": 131051, "title": "Unsupported message type"}]
    r = post_webhook(client, payload)
    assert r.json["new"] == 2
    kinds = sorted(k for _, k, *_ in stored(db))
    assert kinds == ["change", "message"]


def test_empty_entry_list_is_acknowledged(client, db):
    r = post_webhook(client, {"object": "whatsapp_business_account", "entry": []})
    assert r.status_code == 200 and r.json == {"received": 0, "new": 0, "duplicate": 0}


# --- correlation ids --------------------------------------------------------------------------------------------------

def test_correlation_id_is_echoed_and_stored(client, db):
    r = post_webhook(client, envelope(messages=[text_message("wamid.X")]), headers={"X-Correlation-Id": "req-123"})
    assert r.headers["X-Correlation-Id"] == "req-123"
    assert db.execute("SELECT correlation_id FROM wa_outbox.webhook_events").fetchone()[0] == "req-123"


def test_correlation_id_is_generated_when_absent_or_unusable(client, db):
    r = post_webhook(client, envelope(messages=[text_message("wamid.Y")]),
                     headers={"X-Correlation-Id": "bad id <script>"})
    generated = r.headers["X-Correlation-Id"]
    assert len(generated) == 32 and generated != "bad id <script>"
    assert db.execute("SELECT correlation_id FROM wa_outbox.webhook_events").fetchone()[0] == generated


def test_metrics_count_new_and_duplicate_updates(client, db):
    payload = envelope(messages=[text_message("wamid.MET")])
    post_webhook(client, payload)
    post_webhook(client, payload)
    text = client.get("/metrics").get_data(as_text=True)
    assert 'wa_outbox_webhook_events_total{result="duplicate"}' in text


def test_response_is_json(client, db):
    r = post_webhook(client, envelope(messages=[text_message("wamid.J")]))
    assert r.headers["Content-Type"].startswith("application/json")
    assert json.loads(r.get_data()) == {"received": 1, "new": 1, "duplicate": 0}


def test_receiver_recovers_when_the_database_drops_its_connections(client, db):
    assert post_webhook(client, envelope(messages=[text_message("wamid.R1")])).status_code == 200
    terminated = db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = 'wa-outbox-web' AND datname = current_database()"
                            ).fetchone()[0]
    assert terminated >= 1
    r = post_webhook(client, envelope(messages=[text_message("wamid.R2")]))
    assert r.status_code == 200 and r.json["new"] == 1
    assert count(db) == 2


# --- the README's signed webhook --------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", ["README.md", "docs/tour.md"])
def test_the_tours_signed_webhook_answers_as_the_page_says(client, db, page):
    """The tour's BODY, signed and posted twice: the answers are the ones its comment shows, byte for byte."""
    text = (ROOT / page).read_text(encoding="utf-8")
    body = re.search(r"^BODY='([^']+)'$", text, re.M).group(1).encode()
    first, again = re.search(r"^# (\{.*\})   \.\.\. and again: (\{.*\})$", text, re.M).groups()
    assert post_webhook(client, body).get_data(as_text=True).strip() == first
    assert post_webhook(client, body).get_data(as_text=True).strip() == again
    assert count(db) == 1
