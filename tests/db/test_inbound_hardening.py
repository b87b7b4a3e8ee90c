"""The inbound pipeline under bad input: one bad webhook event never holds back another.

Events are stored by the real receiver (the Flask test client, signed as Meta signs), then processed by
InboundProcessor.process_batch on real Postgres. The field parsers are pure and tested without a database.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.conftest import post_webhook
from tests.live import SENDER, wait_for
from wa_outbox import db as wdb
from wa_outbox.enqueue import enqueue
from wa_outbox.queries import WebhookEvent
from wa_outbox.retry import RetryPolicy
from wa_outbox.states import TimelineEvent
from wa_outbox.worker import _inbound
from wa_outbox.worker._inbound import (
    KNOWN_STATUS_WORDS,
    InboundProcessor,
    contact_of,
    error_text,
    outbox_id_from_callback,
    parse_errors,
    parse_timestamp,
    status_entry,
)
from wa_outbox.worker._reconciler import settle_unknown
from wa_outbox.worker._rescuer import rescue

TEXT = {"type": "text", "text": {"body": "x"}}
FAST = RetryPolicy(base_seconds=0.01, max_seconds=0.05, max_attempts=3)
TS = "1749416400"


# --- pure parsing --------------------------------------------------------------------------------------------------

def test_timestamps_outside_a_sane_range_are_ignored_not_errors():
    assert parse_timestamp("1749416400") == 1749416400 == parse_timestamp(1749416400)
    for garbage in ("99999999999999999999", "-5", "0", "12.5", "", " ", "１７４９４１６４００", "abc", None, True,
                    1.7e9, [], {}, 10 ** 30, -1749416400):
        assert parse_timestamp(garbage) is None, garbage


def test_the_outbox_id_is_the_leading_digits_before_an_optional_colon():
    assert outbox_id_from_callback("17") == 17
    assert outbox_id_from_callback("17:order-9") == 17
    assert outbox_id_from_callback("17:") == 17
    assert outbox_id_from_callback("17:a:b") == 17
    assert outbox_id_from_callback("999999999999999999") == 999999999999999999  # 18 digits: a bigint
    for foreign in ("x17", "17x", "17 ", "17\n", "", ":17", "99999999999999999999", "²", "１７", "-17", 17, None,
                    ["17"]):
        assert outbox_id_from_callback(foreign) is None, foreign


def test_errors_are_a_list_of_objects_or_none():
    assert parse_errors([{"code": 131026}]) == [{"code": 131026}]
    assert parse_errors({"code": 131026}) == [{"code": 131026}]
    assert parse_errors([{"code": 1}, "noise", 3]) == [{"code": 1}]
    for garbage in ("boom", 42, None, [], ["a"], True):
        assert parse_errors(garbage) is None


def stored_event(*, id: int, payload: dict, phone_number_id: str | None = SENDER, wamid: str | None = None,
                 update_status: str | None = None) -> WebhookEvent:
    """A claimed webhook event as claim_webhook_events.sql gives it."""
    return WebhookEvent(id=id, kind="message", field="messages", phone_number_id=phone_number_id, wamid=wamid,
                        update_status=update_status, payload=payload, attempts=1, max_attempts=None,
                        correlation_id=None)


def test_a_contact_survives_garbage_fields():
    event = stored_event(id=1, payload={"field": "messages", "value": {
        "contacts": [{"wa_id": "5511912345678", "profile": "not an object"}],
        "messages": [{"from": "5511912345678", "id": "wamid.X", "timestamp": "99999999999999999999"}]}})
    assert contact_of(event) == {"phone_number_id": SENDER, "wa_id": "5511912345678", "profile_name": None,
                                 "ts": None}
    event.payload["value"]["contacts"] = [{"wa_id": "5511912345678", "profile": {"name": "Ana"}}]
    assert contact_of(event)["profile_name"] == "Ana"
    event.payload["value"]["contacts"] = "nope"
    event.payload["value"]["messages"][0]["from"] = 5511912345678
    assert contact_of(event)["wa_id"] is None and contact_of(event)["profile_name"] is None


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=12)
item_fields = st.fixed_dictionaries({}, optional={
    "status": json_values, "timestamp": json_values | st.text(alphabet="0123456789", max_size=30),
    "biz_opaque_callback_data": json_values | st.from_regex(r"[0-9]{0,25}(:.*)?", fullmatch=True),
    "errors": json_values, "from": json_values, "id": json_values})


@given(item=item_fields, value_extra=st.dictionaries(st.sampled_from(["contacts", "metadata"]), json_values),
       update_status=st.none() | st.text())
def test_parsing_never_raises_and_yields_what_postgres_accepts(item, value_extra, update_status):
    for list_name in ("statuses", "messages"):
        event = stored_event(id=7, wamid="wamid.X", update_status=update_status,
                             payload={"field": "messages", "value": {**value_extra, list_name: [item]}})
        entry, contact = status_entry(event), contact_of(event)
        json.dumps([entry, contact])
        assert entry["notification_id"] is None or 0 <= entry["notification_id"] < 2 ** 63
        for ts in (entry["ts"], contact["ts"]):
            assert ts is None or _inbound.EARLIEST_TIMESTAMP <= ts <= _inbound.LATEST_TIMESTAMP
        assert entry["errors"] is None or all(isinstance(e, dict) for e in entry["errors"])
        assert len(entry["status"]) <= _inbound.MAX_WORD_CHARS


def test_an_error_text_is_always_storable():
    text = error_text(ValueError("bad \x00 byte and a lone \ud800 surrogate" + "x" * 5000))
    assert "\x00" not in text and len(text) <= _inbound.MAX_ERROR_CHARS
    text.encode("utf-8")  # no lone surrogate left: Postgres would refuse it, and the whole batch's finish with it
    assert text.startswith("ValueError: bad \\0 byte")


# --- the parsers agree with the schema -------------------------------------------------------------------------------

def test_the_known_status_words_are_those_status_rank_ranks(db):
    ranked = {w for (w,) in db.execute("SELECT w FROM unnest(%s::text[]) w WHERE wa_outbox.status_rank(w) > 0",
                                       ([e.value for e in TimelineEvent] + ["deleted", "warning"],))}
    assert ranked == KNOWN_STATUS_WORDS


@hsettings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200, deadline=None)
@given(callback=st.from_regex(r"[0-9²１]{0,22}(:[a-z0-9:]{0,5})?", fullmatch=True)
       | st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))))
def test_python_and_sql_read_the_outbox_id_alike(db, callback):
    [(in_sql,)] = db.execute("SELECT wa_outbox.callback_outbox_id(%s)", (callback,)).fetchall()
    assert in_sql == outbox_id_from_callback(callback)


# --- helpers for the database tests ------------------------------------------------------------------------------

@pytest.fixture
def engine(database_url):
    engine = wdb.create_engine(database_url, pool_size=4, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def envelope(*, statuses=(), messages=(), contacts=None, field="messages", value=None) -> dict:
    if value is None:
        value = {"messaging_product": "whatsapp",
                 "metadata": {"display_phone_number": "15550783881", "phone_number_id": SENDER}}
        if statuses:
            value["statuses"] = list(statuses)
        if messages:
            value["messages"] = list(messages)
            value["contacts"] = contacts if contacts is not None else [
                {"profile": {"name": f"Customer {m['from']}"}, "wa_id": m["from"]} for m in messages]
    return {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": field,
                                                                                       "value": value}]}]}


def status(wamid: str, word: str, nid: int | str | None = None, **extra) -> dict:
    item = {"id": wamid, "status": word, "timestamp": TS, "recipient_id": "5511987654321"}
    if nid is not None:
        item["biz_opaque_callback_data"] = str(nid)
    return {**item, **extra}


def text_message(wamid: str, sender: str, body: str) -> dict:
    return {"from": sender, "id": wamid, "timestamp": TS, "type": "text", "text": {"body": body}}


def post(client, payload: dict) -> None:
    r = post_webhook(client, payload)
    assert r.status_code == 200, r.get_data(as_text=True)


def message_in(db, status: str, wamid: str | None = None, to: str = "+5511987654321") -> int:
    nid = enqueue(db, to=to, message=TEXT)
    db.execute("UPDATE wa_outbox.notifications SET status = %s, wamid = %s, attempts = 1, "
               "unknown_since = CASE WHEN %s = 'unknown' THEN now() - interval '1 hour' END, "
               "locked_until = CASE WHEN %s = 'sending' THEN now() + interval '1 minute' END, "
               "locked_by = CASE WHEN %s = 'sending' THEN 'elsewhere' END WHERE id = %s",
               (status, wamid, status, status, status, nid))
    return nid


def message_row(db, nid: int) -> dict:
    cur = db.execute("SELECT status, wamid, attempts, last_error, delivered_at FROM wa_outbox.notifications "
                     "WHERE id = %s", (nid,))
    return dict(zip(("status", "wamid", "attempts", "last_error", "delivered_at"), cur.fetchone(), strict=True))


def timeline(db, nid: int) -> list[tuple]:
    return db.execute("SELECT event, detail FROM wa_outbox.notification_events WHERE notification_id = %s "
                      "ORDER BY id", (nid,)).fetchall()


def event_states(db) -> Counter:
    return Counter(s for (s,) in db.execute("SELECT status FROM wa_outbox.webhook_events"))


def pending_events(db) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE status IN ('queued', 'processing')"
                      ).fetchone()[0]


def processor(engine, worker_id: str = "in-1", handlers=(), policy: RetryPolicy = FAST,
              lease_seconds: float = 30.0) -> InboundProcessor:
    return InboundProcessor(engine, worker_id, list(handlers), policy, lease_seconds)


# --- bad fields are parsed, not fatal --------------------------------------------------------------------------------

def test_garbage_fields_no_longer_hold_back_the_batch(client, db, engine, sender):
    ok = message_in(db, "sent", "wamid.OK")
    overflow = message_in(db, "sent", "wamid.TS", to="+5511987654322")
    failed = message_in(db, "sent", "wamid.ERR", to="+5511987654323")
    weird = message_in(db, "unknown", to="+5511987654324")
    post(client, envelope(statuses=[
        status("wamid.OK", "delivered"),
        status("wamid.TS", "delivered", timestamp="99999999999999999999"),  # to_timestamp overflow, before
        status("wamid.ERR", "failed", errors="not a list"),
        status("wamid.W", "sent", nid="²"),  # str.isdigit(), yet int() refuses it
        status("wamid.W2", "sent", nid=f"{weird}:app-tracker"),
    ]))
    post(client, envelope(messages=[text_message("wamid.IN", "5511912345678", "oi")],
                          contacts=[{"wa_id": "5511912345678", "profile": "a string"}]))
    proc = processor(engine)
    assert proc.process_batch() == 6
    assert event_states(db) == {"done": 6}
    assert message_row(db, ok)["status"] == "delivered"
    assert message_row(db, overflow)["status"] == "delivered"  # its timestamp ignored, not fatal
    assert message_row(db, failed)["status"] == "failed"
    assert message_row(db, weird)["status"] == "sent" and message_row(db, weird)["wamid"] == "wamid.W2"
    assert db.execute("SELECT profile_name FROM wa_outbox.contacts WHERE wa_id = '5511912345678'"
                      ).fetchone() == (None,)


def test_a_status_waiting_for_its_send_spends_no_attempt(client, db, engine, sender):
    nid = message_in(db, "sending")
    post(client, envelope(statuses=[status("wamid.S", "delivered", nid=nid)]))
    proc = processor(engine)
    for _ in range(FAST.max_attempts + 2):
        db.execute("UPDATE wa_outbox.webhook_events SET next_attempt_at = now()")
        assert proc.process_batch() == 1
    assert db.execute("SELECT status, attempts FROM wa_outbox.webhook_events").fetchone() == ("queued", 0)


def test_a_batch_whose_worker_died_before_finishing_it_is_not_written_twice_on_the_timeline(
        client, db, engine, sender, monkeypatch):
    """The statuses are applied and committed, then the worker dies before marking its events done (found by the
    chaos run: SIGKILLed workers left `delivered` and `read` twice on a timeline). The events come back by their
    lease; applying them again must not repeat them on the timeline."""
    nid = message_in(db, "sent", "wamid.TWICE")
    post(client, envelope(statuses=[status("wamid.TWICE", "delivered"), status("wamid.TWICE", "read")]))
    finish = _inbound.queries.finish_webhook_events

    def dies_before_finishing(engine_, **kwargs):
        raise KeyboardInterrupt("killed")  # stands for SIGKILL: nothing after the apply runs
    monkeypatch.setattr(_inbound.queries, "finish_webhook_events", dies_before_finishing)
    with pytest.raises(KeyboardInterrupt):
        processor(engine, lease_seconds=0.01).process_batch()
    monkeypatch.setattr(_inbound.queries, "finish_webhook_events", finish)
    assert event_states(db) == {"processing": 2}
    wait_for(lambda: rescue(engine, "rescuer", FAST)[1] == 2, timeout=10, what="the expired lease rescued")
    assert processor(engine, "in-2").process_batch() == 2
    assert event_states(db) == {"done": 2}
    assert message_row(db, nid)["status"] == "read"
    assert [event for event, _ in timeline(db, nid)].count("delivered") == 1
    assert [event for event, _ in timeline(db, nid)].count("read") == 1


# --- unknown status words ------------------------------------------------------------------------------------------

def test_an_unrecognized_status_word_moves_no_message(client, db, engine, sender, caplog, monkeypatch):
    monkeypatch.setattr(_inbound, "_logged_words", set())
    unknown = message_in(db, "unknown")
    dead = message_in(db, "dead", to="+5511987654322")
    queued = message_in(db, "queued", to="+5511987654323")
    sent = message_in(db, "sent", "wamid.SENT", to="+5511987654324")
    post(client, envelope(statuses=[status("wamid.U", "deleted", nid=unknown), status("wamid.D", "deleted", nid=dead),
                                    status("wamid.Q", "deleted", nid=queued), status("wamid.SENT", "warning")]))
    proc = processor(engine)
    with caplog.at_level(logging.WARNING, logger="wa_outbox.inbound"):
        assert proc.process_batch() == 4
    assert event_states(db) == {"done": 4}
    for nid, was in ((unknown, "unknown"), (dead, "dead"), (queued, "queued"), (sent, "sent")):
        assert message_row(db, nid)["status"] == was
        event, detail = timeline(db, nid)[-1]
        assert event == "unrecognized_status"
        assert detail["status"] in ("deleted", "warning") and isinstance(detail["webhook_event_id"], int)
    assert proc.stats["unrecognized_statuses"] == 4
    logged = [r for r in caplog.records if "not one this version knows" in r.getMessage()]
    assert sorted(r.args[0] for r in logged) == ["deleted", "warning"]  # once per word, not per event
    # a known status after it still applies
    post(client, envelope(statuses=[status("wamid.SENT", "read")]))
    proc.process_batch()
    assert message_row(db, sent)["status"] == "read"


# --- the reconciler waits for stored status events -----------------------------------------------------------------

def test_an_unknown_message_is_not_resent_while_its_status_event_waits_and_is_dead_if_it_died(client, db, engine,
                                                                                               sender):
    waiting = message_in(db, "unknown")
    plain = message_in(db, "unknown", to="+5511987654322")
    post(client, envelope(statuses=[status("wamid.WAIT", "sent", nid=f"{waiting}:order-7")]))
    assert settle_unknown(engine, 0, "resend", FAST) == {"queued": 1}  # status webhooks flow: `plain` is resent
    assert message_row(db, plain)["status"] == "queued"
    assert message_row(db, waiting)["status"] == "unknown"  # its status event will settle it
    db.execute("UPDATE wa_outbox.webhook_events SET status = 'processing', locked_by = 'w', "
               "locked_until = now() + interval '1 minute'")
    assert settle_unknown(engine, 0, "resend", FAST) == {}
    [(event_id,)] = db.execute("UPDATE wa_outbox.webhook_events SET status = 'dead', locked_by = NULL, "
                               "locked_until = NULL, last_error = 'CheckViolation: refused' RETURNING id")
    assert settle_unknown(engine, 0, "resend", FAST) == {"dead": 1}
    row = message_row(db, waiting)
    assert row["status"] == "dead" and row["last_error"]["webhook_event_id"] == event_id
    assert f"webhook event {event_id}" in row["last_error"]["message"]
    assert "CheckViolation: refused" in row["last_error"]["message"]
    assert "requeued" not in [e for e, _ in timeline(db, waiting)]


def test_the_status_event_look_up_of_the_reconciler_is_index_backed(db):
    db.execute("SET enable_seqscan = off")  # an empty test table would be scanned anyway
    try:
        plan = "\n".join(r[0] for r in db.execute(
            "EXPLAIN " + wdb.query("settle_unknown"),
            {"window_seconds": 600, "policy": "resend", "limit": 1000, "max_attempts": 10}))
    finally:
        db.execute("RESET enable_seqscan")
    assert "webhook_events_status_outbox_id" in plan  # only status events not yet done are read
    assert "webhook_events_wamid" in plan  # the same, by wamid (partial on them: schema.sql)
    assert "Seq Scan on webhook_events" not in plan


# --- the whole story: a batch with poison in it ----------------------------------------------------------------------

def test_a_batch_with_three_poison_events_applies_the_good_ones_at_once_and_kills_only_the_poison(
        client, db, engine, sender):
    sent = [message_in(db, "sent", f"wamid.G{i}", to=f"+55119{i:08d}") for i in range(20)]
    settled_by_batch = message_in(db, "unknown", to="+5511900000100")
    refused = message_in(db, "unknown", to="+5511900000101")
    post(client, envelope(statuses=[status(f"wamid.G{i}", "delivered", **(
        {"timestamp": "99999999999999999999"} if i == 3 else {"errors": "x"} if i == 4 else {}))
        for i in range(20)]))
    post(client, envelope(statuses=[status(f"wamid.G{i}", "read") for i in range(5)]))
    post(client, envelope(statuses=[status("wamid.U", "sent", nid=f"{settled_by_batch}:app-tracker"),
                                    status("wamid.POISON", "sent", nid=refused)]))  # poison 1: Postgres refuses it
    customers = [f"55119100000{i:02d}" for i in range(20)]
    for i, customer in enumerate(customers):
        body = "poison" if i == 7 else f"mensagem {i}"  # poison 2: the app's handler raises on it
        post(client, envelope(messages=[text_message(f"wamid.IN{i}", customer, body)],
                              contacts=[{"wa_id": customer, "profile": "a string" if i == 9 else {"name": "C"}}]))
    post(client, envelope(field="account_update", value={"event": "POISON"}))  # poison 3: the handler raises
    post(client, envelope(field="account_update", value={"event": "VERIFIED_ACCOUNT"}))
    assert event_states(db) == {"queued": 49}

    handled = []

    def handler(event):
        value = event["payload"]["value"]
        if value.get("event") == "POISON" or (value.get("messages") or [{}])[0].get("text", {}).get("body") == \
                "poison":
            raise ValueError(f"the app cannot handle event {event['id']}")
        handled.append(event["id"])

    # The unknown messages' status events are stored: the reconciler must not resend them meanwhile.
    assert settle_unknown(engine, 0, "resend", FAST) == {}

    db.execute("ALTER TABLE wa_outbox.notifications ADD CONSTRAINT test_refuses_poison "
               "CHECK (wamid IS DISTINCT FROM 'wamid.POISON') NOT VALID")
    try:
        proc = processor(engine, handlers=[handler])
        assert proc.process_batch() == 49
        # every good event applied by that one batch; the three poison ones wait for their retry
        assert event_states(db) == {"done": 46, "queued": 3}
        assert {message_row(db, nid)["status"] for nid in sent[:5]} == {"read"}
        assert {message_row(db, nid)["status"] for nid in sent[5:]} == {"delivered"}
        assert message_row(db, settled_by_batch)["status"] == "sent"
        assert "reconciled" in [e for e, _ in timeline(db, settled_by_batch)]
        assert len(handled) == 20  # 19 good messages and the good account update
        assert db.execute("SELECT count(*) FROM wa_outbox.contacts").fetchone()[0] == 20
        assert settle_unknown(engine, 0, "resend", FAST) == {}  # `refused` still has a status event to come

        def poison_dead():
            proc.process_batch()
            return pending_events(db) == 0
        wait_for(poison_dead, timeout=30, what="the poison events dead")
    finally:
        db.execute("ALTER TABLE wa_outbox.notifications DROP CONSTRAINT test_refuses_poison")

    dead = db.execute("SELECT attempts, last_error FROM wa_outbox.webhook_events WHERE status = 'dead' "
                      "ORDER BY id").fetchall()
    assert [attempts for attempts, _ in dead] == [FAST.max_attempts] * 3
    errors = [error for _, error in dead]
    assert "test_refuses_poison" in errors[0]
    assert errors[1].startswith("ValueError: the app cannot handle event")
    assert errors[2].startswith("ValueError: the app cannot handle event")
    assert len(handled) == 20 and proc.stats["dead"] == 3

    # The message whose status event died is dead, with that reason: not resent on a guess.
    assert settle_unknown(engine, 0, "resend", FAST) == {"dead": 1}
    row = message_row(db, refused)
    assert row["status"] == "dead" and "could not be processed" in row["last_error"]["message"]
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'requeued'"
                      ).fetchone()[0] == 0
    assert message_row(db, settled_by_batch)["status"] == "sent"


# --- slow handlers keep their lease --------------------------------------------------------------------------------

def test_slow_handlers_keep_their_lease_and_never_run_twice_at_once(client, db, engine, sender):
    lease = 2.0  # renewed every third of it: slack for a loaded machine
    for i in range(2):
        post(client, envelope(messages=[text_message(f"wamid.SLOW{i}", f"551191234567{i}", "devagar")]))
    running: set[int] = set()
    calls: Counter = Counter()
    overlaps: list[int] = []
    lock = threading.Lock()

    def slow(event):
        with lock:
            if event["id"] in running:
                overlaps.append(event["id"])
            running.add(event["id"])
            calls[event["id"]] += 1
        time.sleep(lease * 1.5)  # the behaviour under test: a handler busy for longer than its lease
        with lock:
            running.discard(event["id"])

    stop = threading.Event()

    def loop(worker_id):
        proc = processor(engine, worker_id, handlers=[slow], lease_seconds=lease)
        while not stop.is_set():
            if not proc.process_batch():
                stop.wait(0.05)

    def rescuer():
        while not stop.wait(0.1):
            rescue(engine, "rescuer", FAST)

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in ("A", "B")]
    threads.append(threading.Thread(target=rescuer, daemon=True))
    for t in threads:
        t.start()
    try:
        wait_for(lambda: event_states(db) == {"done": 2} or overlaps, timeout=30, what="every event done")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert overlaps == []
    assert event_states(db) == {"done": 2}
    assert sorted(calls.values()) == [1, 1]
