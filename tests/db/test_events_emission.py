"""Events are written in the same statement as the facts they report (the emission triggers of 0007_events), by
every path: the webhook receiver, the worker's outcomes and statuses (against the simulator), cancel, the DLQ."""

from __future__ import annotations

import copy
import json

import psycopg
import pytest

from tests.conftest import post_webhook
from tests.live import running_worker, wait_for, worker_settings
from wa_outbox import db as wa_db, events as ev, outbox, queries
from wa_outbox.enqueue import enqueue
from wa_outbox.states import EventType

TEXT = {"type": "text", "text": {"body": "Seu pedido saiu"}}
PHONE = "106540352242922"
ACCOUNT = "419561257915477"


@pytest.fixture
def engine(database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def feed(db, type_: str | None = None) -> list[dict]:
    rows = db.execute("SELECT seq, type, phone_number_id, wa_id, data FROM wa_outbox.events "
                      "WHERE %(t)s::text IS NULL OR type = %(t)s ORDER BY seq", {"t": type_}).fetchall()
    return [{"seq": r[0], "type": r[1], "phone_number_id": r[2], "wa_id": r[3], "data": r[4]} for r in rows]


def statuses(db, nid: int) -> list[str]:
    return [e["data"]["status"] for e in feed(db, "message.status") if e["data"]["outbox_id"] == nid]


def change(field: str, value: dict, account: str = ACCOUNT) -> dict:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": account, "changes": [{"field": field, "value": value}]}]}


def inbound(wamid: str, *, echo: bool = False) -> dict:
    message = {"from": "16505551234", "id": wamid, "timestamp": "1749416383", "type": "text",
               "text": {"body": "Quando chega?"}}
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "15550783881", "phone_number_id": PHONE},
             "contacts": [{"profile": {"name": "Sheena Nelson"}, "wa_id": "16505551234"}]}
    if echo:
        message = {**message, "from": "15550783881", "to": "16505551234"}
        value = {**value, "message_echoes": [message]}
        return change("smb_message_echoes", value)
    return change("messages", {**value, "messages": [message]})


# --- webhooks ------------------------------------------------------------------------------------------------------

def test_an_inbound_message_is_one_message_received_and_a_redelivery_emits_nothing(client, db):
    payload = inbound("wamid.IN1")
    assert post_webhook(client, payload).status_code == 200
    [event] = feed(db)
    webhook_id = db.execute("SELECT id FROM wa_outbox.webhook_events").fetchone()[0]
    assert event["type"] == EventType.MESSAGE_RECEIVED
    assert (event["phone_number_id"], event["wa_id"]) == (PHONE, "16505551234")
    value = payload["entry"][0]["changes"][0]["value"]
    assert event["data"] == {
        "schema_version": ev.SCHEMA_VERSION, "phone_number_id": PHONE, "display_phone_number": "15550783881",
        "account_id": ACCOUNT, "wa_id": "16505551234", "contact": value["contacts"][0],
        "message": value["messages"][0], "dedup_key": "m:wamid.IN1", "webhook_event_id": webhook_id, "app_id": None}
    # Meta redelivers: the same update again, alone and inside a bigger batch
    assert post_webhook(client, payload).status_code == 200
    bigger = copy.deepcopy(payload)
    bigger["entry"][0]["changes"][0]["value"]["messages"].append(inbound("wamid.IN2")["entry"][0]["changes"][0]
                                                                 ["value"]["messages"][0])
    assert post_webhook(client, bigger).status_code == 200
    assert [e["data"]["dedup_key"] for e in feed(db)] == ["m:wamid.IN1", "m:wamid.IN2"]


def test_an_echo_is_message_echo_in_the_customers_conversation(client, db):
    assert post_webhook(client, inbound("wamid.ECHO", echo=True)).status_code == 200
    [event] = feed(db)
    assert event["type"] == EventType.MESSAGE_ECHO
    assert event["wa_id"] == "16505551234" and event["data"]["message"]["to"] == "16505551234"


def test_each_change_field_is_its_type_with_metas_value_as_received(client, db):
    fields = [*ev.FIELD_EVENT_TYPES, "some_field_meta_adds_later"]
    for n, field in enumerate(fields):
        value = {"event": "APPROVED", "message_template_id": 1000 + n, "message_template_name": "order_update",
                 "metadata": {"phone_number_id": PHONE}}
        assert post_webhook(client, change(field, value)).status_code == 200
    events = feed(db)
    assert [e["type"] for e in events] == [ev.event_type_of(f) for f in fields]
    assert events[-1]["type"] == EventType.WEBHOOK_OTHER
    for field, event in zip(fields, events, strict=True):
        assert event["data"]["field"] == field
        assert event["data"]["account_id"] == ACCOUNT and event["data"]["phone_number_id"] == PHONE
        assert event["data"]["value"]["message_template_id"] == 1000 + fields.index(field)
        assert event["data"]["schema_version"] == ev.SCHEMA_VERSION


def test_statuses_and_unprocessable_bodies_emit_nothing_when_stored(client, db):
    status = {"id": "wamid.X", "status": "delivered", "timestamp": "1749416400", "recipient_id": "16505551234"}
    assert post_webhook(client, change("messages", {"metadata": {"phone_number_id": PHONE},
                                                    "statuses": [status]})).status_code == 200
    assert post_webhook(client, b'{"object": "whatsapp_business_account", "entry": ' + b"[" * 100_000 +
                        b"]" * 100_000 + b"}").status_code == 200
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == 2
    assert feed(db) == []


def test_garbage_shapes_never_fail_the_insert(db):
    db.execute("""INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, payload) VALUES
                  ('m:a', 'messages', 'message', '{}'),
                  ('m:b', 'messages', 'message', '{"value": "text"}'),
                  ('m:c', 'messages', 'message', '{"value": {"contacts": {"no": "list"}, "messages": [7]}}'),
                  ('d:d', 'calls', 'change', '{"value": [1, 2]}')""")
    assert [e["type"] for e in feed(db)] == ["message.received"] * 3 + ["call"]


def test_the_sql_type_table_is_the_python_one(db):
    for field in [*ev.FIELD_EVENT_TYPES, "messages", "statuses", "", "x" * 300]:
        assert db.execute("SELECT wa_outbox.event_type_of(%s)", (field,)).fetchone()[0] == ev.event_type_of(field)


def test_a_statement_that_wrote_events_wakes_the_listeners(client, db, database_url):
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN wa_outbox_events")
        assert post_webhook(client, inbound("wamid.N1")).status_code == 200
        got = list(listener.notifies(timeout=10, stop_after=1))
        assert [n.channel for n in got] == ["wa_outbox_events"]


def test_one_transaction_at_a_time_notifies(db, database_url):
    """A NOTIFY serializes the commits of every notifying transaction: while one that wrote events is open, the
    others' statements do not notify (its commit wakes the readers; they poll anyway)."""
    insert = ("INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, payload) "
              "VALUES (%s, 'account_update', 'change', '{\"value\": {}}')")
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN wa_outbox_events")
        with psycopg.connect(database_url) as first, psycopg.connect(database_url) as second:
            first.execute(insert, ("d:1",))
            second.execute(insert, ("d:2",))
            second.commit()
            first.commit()
        assert len(list(listener.notifies(timeout=10, stop_after=1))) == 1  # the first's
        with psycopg.connect(database_url) as third:
            third.execute(insert, ("d:3",))  # alone again: it notifies
        assert len(list(listener.notifies(timeout=10, stop_after=1))) == 1
    assert len(feed(db)) == 3


# --- the outbox: the worker's outcomes and statuses, cancel, dlq ----------------------------------------------------

def test_sent_delivered_read_with_the_callers_ids(db, sender, sim, settings):
    nid = enqueue(db, to="+5511987654321", message={**TEXT, "biz_opaque_callback_data": "order-77"},
                  correlation_id="corr-1", idempotency_key="idem-1")
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: statuses(db, nid) == ["sent", "delivered", "read"], what="sent, delivered, read")
    wamid = sim.messages()[0]["wamid"]
    events = feed(db, "message.status")
    assert {(e["phone_number_id"], e["wa_id"]) for e in events} == {("100000000000001", "5511987654321")}
    for e in events:
        assert {k: e["data"][k] for k in ("outbox_id", "phone_number_id", "recipient", "wamid", "correlation_id",
                                          "idempotency_key", "tracker", "attempt", "schema_version")} == {
            "outbox_id": nid, "phone_number_id": "100000000000001", "recipient": "5511987654321", "wamid": wamid,
            "correlation_id": "corr-1", "idempotency_key": "idem-1", "tracker": "order-77", "attempt": 1,
            "schema_version": ev.SCHEMA_VERSION}
        assert "error" not in e["data"]


def test_a_failed_status_carries_metas_error(db, sender, sim, settings):
    sim.set_faults([{"mode": "failed_status", "code": 131026}])
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: "failed" in statuses(db, nid), what="failed")
    failed = [e for e in feed(db, "message.status") if e["data"]["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["data"]["error"]["errors"][0]["code"] == 131026
    assert failed[0]["data"]["error"]["code"] == 131026


def test_a_dead_send_carries_its_reason_and_error(db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": 131026}])
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: statuses(db, nid) == ["dead"], what="dead")
    [dead] = feed(db, "message.status")
    assert dead["data"]["error"]["code"] == 131026 and dead["data"]["reason"]
    assert dead["data"]["wamid"] is None


def test_an_unknown_send_settled_by_its_webhooks_is_sent_once(db, sender, sim, settings):
    sim.set_faults([{"mode": "lost_response", "count": 1}])
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: statuses(db, nid)[-1:] == ["read"], what="settled")
    assert statuses(db, nid) == ["sent", "delivered", "read"]
    assert feed(db, "message.status")[0]["data"]["wamid"] == sim.messages()[0]["wamid"]


def test_played_and_out_of_order_statuses_are_one_event_each(db, sender, engine):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    db.execute("UPDATE wa_outbox.notifications SET status = 'sent', wamid = 'wamid.V' WHERE id = %s", (nid,))
    entries = [{"event_id": i, "wamid": "wamid.V", "status": s, "notification_id": nid, "errors": None, "ts": None}
               for i, s in enumerate(["read", "played", "delivered"], start=1)]
    queries.apply_statuses(engine, statuses=json.dumps(entries))
    assert statuses(db, nid) == ["read", "played", "delivered"]  # one per transition on the timeline, in order
    queries.apply_statuses(engine, statuses=json.dumps(entries))  # applied again: the timeline skips them
    assert statuses(db, nid) == ["read", "played", "delivered"]


def test_cancel_and_dlq_retry(db, sender, engine, run):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    assert outbox.cancel(engine, [nid], actor="cli") == {nid: ("cancelled", True)}
    [cancelled] = feed(db, "message.status")
    assert cancelled["data"]["status"] == "cancelled" and cancelled["data"]["by"] == "cli"
    other = enqueue(db, to="+5511987654322", message=TEXT)
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead' WHERE id = %s", (other,))
    assert run("dlq", "retry", str(other)).exit_code == 0
    assert statuses(db, other) == []  # requeued is an internal step: the send that follows reports itself


def test_internal_steps_are_no_events(db, sender, engine):
    enqueue(db, to="+5511987654321", message=TEXT)
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt) "
               "SELECT id, e, 1 FROM wa_outbox.notifications, unnest(%s::text[]) e",
               (["sending", "retry_scheduled", "throttled", "released", "unknown", "requeued", "pair_limited",
                 "sender_paused", "unrecognized_status"],))
    assert feed(db) == []


def test_the_python_transition_table_is_the_triggers(db, sender):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    words = [str(w) for w in ev.STATUS_TRANSITIONS]
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt) "
               "SELECT %s, e, 1 FROM unnest(%s::text[]) WITH ORDINALITY AS u(e, o) ORDER BY o", (nid, words))
    assert statuses(db, nid) == list(ev.STATUS_TRANSITIONS.values())


# --- the Python handlers see what an endpoint sees ------------------------------------------------------------------

def test_handlers_get_the_feeds_envelope_beside_the_fields_they_always_had(app, client, db, engine):
    from wa_outbox.retry import RetryPolicy
    from wa_outbox.worker._inbound import InboundProcessor
    received: list[dict] = []
    assert post_webhook(client, inbound("wamid.H1")).status_code == 200
    assert post_webhook(client, change("account_update", {"event": "VERIFIED_ACCOUNT"})).status_code == 200
    status = {"id": "wamid.X", "status": "delivered", "timestamp": "1749416400", "recipient_id": "16505551234"}
    assert post_webhook(client, change("messages", {"statuses": [status]})).status_code == 200
    processor = InboundProcessor(engine, "in-1", [received.append], RetryPolicy(0.01, 0.02, 3), 30.0)
    assert processor.process_batch() == 3
    assert [h["kind"] for h in received] == ["message", "change"]  # statuses go to their messages, as before
    assert set(received[0]) == {"id", "kind", "field", "phone_number_id", "wamid", "payload", "correlation_id",
                                "event"}
    feed_page = wait_for(lambda: len((page := ev.read_feed(engine)).data) == 2 and page, timeout=120, what="the feed")
    assert [h["event"] for h in received] == feed_page.data  # the same envelopes as GET /v1/events
    assert received[0]["event"]["data"]["webhook_event_id"] == received[0]["id"]
    assert received[1]["event"]["type"] == EventType.ACCOUNT_UPDATE


def test_calls_and_user_preferences_are_in_their_customers_conversation(client, db):
    metadata = {"display_phone_number": "15550783881", "phone_number_id": PHONE}
    calls = [{"id": "wacid.1", "from": "15550783881", "to": "16505551234", "event": "connect",
              "direction": "BUSINESS_INITIATED", "timestamp": "1752582933"}]
    prefs = [{"wa_id": "16505551235", "category": "marketing_messages", "value": "stop", "timestamp": 1731705721}]
    assert post_webhook(client, change("calls", {"metadata": metadata, "calls": calls})).status_code == 200
    calls = [{**calls[0], "id": "wacid.2", "from": "16505551236", "to": "15550783881", "direction": "USER_INITIATED"}]
    assert post_webhook(client, change("calls", {"metadata": metadata, "calls": calls})).status_code == 200
    assert post_webhook(client, change("user_preferences", {"metadata": metadata,
                                                            "user_preferences": prefs})).status_code == 200
    assert [(e["type"], e["phone_number_id"], e["wa_id"]) for e in feed(db)] == [
        ("call", PHONE, "16505551234"), ("call", PHONE, "16505551236"), ("user.preferences", PHONE, "16505551235")]
