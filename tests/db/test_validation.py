"""One set of rules for every entry point: the same cases through Python enqueue(), SQL enqueue(), SQL
enqueue_many() and POST /v1/messages get the same verdict and the same reason."""

from __future__ import annotations

import dataclasses
import json
import math

import psycopg
import pytest
import sqlalchemy as sa

from tests.conftest import API_TOKEN
from wa_outbox import InvalidMessage, enqueue
from wa_outbox.db import sqlalchemy_url
from wa_outbox.messages import MESSAGE_TYPES, message_problem
from wa_outbox.worker._outcomes import Claimed, request_body

TO = "+5511987654321"
TEXT = {"type": "text", "text": {"body": "Your order shipped"}}
TYPES = ", ".join(MESSAGE_TYPES)


def nested(levels: int) -> dict:
    """A text message with a value `levels` deep (the message itself is level 0)."""
    value: object = 1
    for _ in range(levels - 1):
        value = {"a": value}
    return {**TEXT, "extra": value}


# (id, to, message, reason or None for accepted, reason given by every path (else: SQL can't even be sent it))
CASES = [
    ("text", TO, TEXT, None),
    ("separators", "+55 (11) 98765-4321", TEXT, None),
    ("form feed", TO + "\f", TEXT, None),
    ("vertical tab", "\v" + TO, TEXT, None),
    ("no-break space", TO + "\u00a0", TEXT,
     'invalid recipient "+5511987654321\u00a0": expected an E.164 phone number such as +5511987654321'),
    ("short number", "123", TEXT, 'invalid recipient "123": expected an E.164 phone number such as +5511987654321'),
    ("number not string", 5511987654321, TEXT, "`to` must be a string such as '+5511987654321'"),
    ("no to", None, TEXT, "`to` must be a string such as '+5511987654321'"),
    ("not an object", TO, ["text"], "`message` must be a JSON object (a Cloud API message body)"),
    ("read receipt", TO, {"status": "read", "message_id": "wamid.X"},
     "read receipts and typing indicators (status/message_id) are not outbound messages: send them directly, they "
     "need no outbox"),
    ("unknown type", TO, {"type": "fax", "fax": {}}, f'unknown message type "fax": expected one of {TYPES}'),
    ("type not a string", TO, {"type": 5, "text": {"body": "x"}}, f"unknown message type 5: expected one of {TYPES}"),
    ("empty type", TO, {"type": "", "text": {"body": "x"}}, f'unknown message type "": expected one of {TYPES}'),
    ("implied interactive", TO, {"interactive": {"type": "button", "body": {"text": "ok?"}}}, None),
    ("null type implied", TO, {"type": None, "text": {"body": "x"}}, None),
    ("text without text", TO, {"type": "text"}, "message of type 'text' needs a 'text' object"),
    ("contacts list", TO, {"type": "contacts", "contacts": [{"name": {"formatted_name": "A"}}]}, None),
    ("missing body", TO, {"type": "text", "text": {}},
     "a text message needs text.body (a string of at most 4096 characters)"),
    ("body not a string", TO, {"type": "text", "text": {"body": 7}},
     "a text message needs text.body (a string of at most 4096 characters)"),
    ("body 4096", TO, {"type": "text", "text": {"body": "é" * 4096}}, None),
    ("body 10000", TO, {"type": "text", "text": {"body": "x" * 10_000}},
     "text.body is 10000 characters; the Cloud API allows 4096"),
    ("tracker", TO, {**TEXT, "biz_opaque_callback_data": "order-7"}, None),
    ("tracker 492", TO, {**TEXT, "biz_opaque_callback_data": "t" * 492}, None),
    ("tracker 493", TO, {**TEXT, "biz_opaque_callback_data": "t" * 493},
     'biz_opaque_callback_data is 493 characters: at most 492 fit, as Meta allows 512 and "<outbox id>:" goes '
     "first"),
    ("tracker not a string", TO, {**TEXT, "biz_opaque_callback_data": 7},
     "`biz_opaque_callback_data` must be a string"),
    # A media message may name an upload (issue 21): its form is a message rule; whether it exists, the enqueue's.
    ("upload not a number", TO, {"type": "document", "document": {"upload": "12"}},
     "document.upload must be the id POST /v1/media or upload_media() returned (a positive integer)"),
    ("upload zero", TO, {"type": "image", "image": {"upload": 0}},
     "image.upload must be the id POST /v1/media or upload_media() returned (a positive integer)"),
    ("upload fraction", TO, {"type": "video", "video": {"upload": 1.5}},
     "video.upload must be the id POST /v1/media or upload_media() returned (a positive integer)"),
    ("upload and link", TO, {"type": "document", "document": {"upload": 3, "link": "https://example.com/a.pdf"}},
     "document.upload stands for document.id and document.link: give only one of the three"),
    ("upload and id, implied type", TO, {"sticker": {"upload": 3, "id": "123"}},
     "sticker.upload stands for sticker.id and sticker.link: give only one of the three"),
    ("upload key outside media", TO, {**TEXT, "text": {"body": "x", "upload": "free text"}}, None),
    ("too large", TO, {"type": "template", "template": {"name": "x", "components": ["y" * 70_000]}},
     "message is larger than 65536 bytes"),
    ("64 levels", TO, nested(64), None),
    ("65 levels", TO, nested(65), "message is nested deeper than 64 levels"),
    ("2^53 - 1", TO, {**TEXT, "n": 2 ** 53 - 1, "m": -(2 ** 53 - 1)}, None),
    ("2^53", TO, {**TEXT, "n": 2 ** 53},
     "message has a number beyond 9007199254740991 (2^53 - 1) in magnitude, the range JSON parsers read exactly"),
    ("huge float", TO, {**TEXT, "n": [1.5e300]},
     "message has a number beyond 9007199254740991 (2^53 - 1) in magnitude, the range JSON parsers read exactly"),
]
# Refused by Python and HTTP with these reasons; Postgres refuses the JSON itself before any rule runs.
UNSENDABLE = [
    ("NUL", TO, {"type": "text", "text": {"body": "a\x00b"}},
     "message.text.body contains a NUL character (\\u0000), which Postgres cannot store"),
    ("lone surrogate", TO, {"type": "text", "text": {"body": "a\ud800"}},
     "message.text.body contains a lone surrogate: it is not valid Unicode"),
    ("NaN", TO, {"type": "location", "location": {"latitude": math.nan, "longitude": 0}},
     "message.location.latitude is nan: JSON numbers must be finite"),
    ("infinite latitude", TO, {"type": "location", "location": {"latitude": math.inf, "longitude": 0}},
     "message.location.latitude is inf: JSON numbers must be finite"),
]


@pytest.fixture
def app_engine(database_url):
    engine = sa.create_engine(sqlalchemy_url(database_url))
    yield engine
    engine.dispose()


def rows(db) -> tuple[int, int]:
    return db.execute("SELECT (SELECT count(*) FROM wa_outbox.notifications), "
                      "(SELECT count(*) FROM wa_outbox.notification_events)").fetchone()


def python_path(app_engine, to, message) -> str | None:
    with app_engine.begin() as conn:
        try:
            enqueue(conn, to=to, message=message)
        except InvalidMessage as exc:
            conn.execute(sa.text("SELECT 1"))  # the caller's transaction is still usable
            return str(exc)
    return None


def python_many_path(app_engine, to, message) -> str | None:
    """Python enqueue_many(): its own checks are the only ones its items get (wa_outbox.enqueue_checked() writes
    them as they are), so they must give every verdict the SQL rules give."""
    from wa_outbox import enqueue_many
    with app_engine.begin() as conn:
        try:
            enqueue_many(conn, [{"to": TO, "message": TEXT}, {"to": to, "message": message}])
        except InvalidMessage as exc:
            conn.execute(sa.text("SELECT 1"))
            assert str(exc).startswith("item 1: ")
            return str(exc)[len("item 1: "):]
    return None


def sql_path(database_url, statement, params, prefix="") -> str | None:
    with psycopg.connect(database_url) as conn:
        try:
            conn.execute(statement, params)
        except psycopg.errors.InvalidParameterValue as exc:
            conn.rollback()
            reason = exc.diag.message_primary
            assert reason.startswith(prefix)
            return reason[len(prefix):]
        conn.commit()
    return None


def sql_enqueue(database_url, to, message) -> str | None:
    return sql_path(database_url, "SELECT wa_outbox.enqueue(%s, %s::jsonb)", (to, json.dumps(message)))


def sql_enqueue_many(database_url, to, message) -> str | None:
    items = [{"to": TO, "message": TEXT}, {"to": to, "message": message}]
    return sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(items),), "item 2 : ")


def http_path(client, to, message) -> str | None:
    r = client.post("/v1/messages", json={"to": to, "message": message},
                    headers={"Authorization": f"Bearer {API_TOKEN}"})
    assert r.status_code in (202, 400), r.json
    return None if r.status_code == 202 else r.json["error"]["message"]


@pytest.mark.parametrize("to, message, reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_entry_point_gives_the_same_verdict(app_engine, database_url, client, db, sender, to, message,
                                                  reason):
    paths = {
        "python enqueue()": lambda: python_path(app_engine, to, message),
        "python enqueue_many()": lambda: python_many_path(app_engine, to, message),
        "SQL enqueue_many()": lambda: sql_enqueue_many(database_url, to, message),
        "POST /v1/messages": lambda: http_path(client, to, message),
    }
    if isinstance(to, str) or to is None:  # SQL enqueue() takes `to` as text
        paths["SQL enqueue()"] = lambda: sql_enqueue(database_url, to, message)
    for name, run in paths.items():
        before = rows(db)
        got = run()
        assert got == reason, name
        written = 2 if name.endswith("enqueue_many()") else 1
        after = rows(db)
        assert after == (before if reason else (before[0] + written, before[1] + written)), name
    if isinstance(to, str) or to is None:  # SQL check_message(): the same verdict, asked first with plain text
        before = rows(db)
        assert check_message(db, to, json.dumps(message)) == reason
        assert rows(db) == before


def check_message(db, to, message_text, **keys) -> str | None:
    named = "".join(f", {name} => %({name})s" for name in keys)
    return db.execute(f"SELECT wa_outbox.check_message(%(to)s, %(message)s{named})",
                      {"to": to, "message": message_text, **keys}).fetchone()[0]


@pytest.mark.parametrize("to, message, reason", [c[1:] for c in UNSENDABLE], ids=[c[0] for c in UNSENDABLE])
def test_what_postgres_cannot_store_is_refused_before_it_gets_there(app_engine, database_url, client, db, sender,
                                                                   to, message, reason):
    assert python_path(app_engine, to, message) == reason
    if math.isfinite(message.get("location", {}).get("latitude", 0)):  # HTTP refuses NaN and Infinity as JSON
        assert http_path(client, to, message) == reason
    try:
        payload = json.dumps(message)
    except ValueError:
        payload = None
    if payload is not None:
        with psycopg.connect(database_url) as conn, pytest.raises(psycopg.Error):
            conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb)", (to, payload))
    assert rows(db) == (0, 0)


@pytest.mark.parametrize("field", ["idempotency_key", "correlation_id"])
@pytest.mark.parametrize("value, fragment", [("a\x00b", "NUL"), ("a\udc80", "lone surrogate"), ("", "1 to 255"),
                                             ("k" * 256, "1 to 255"), (7, "1 to 255")])
def test_keys_are_refused_by_name_before_the_transaction(app_engine, db, sender, field, value, fragment):
    with app_engine.begin() as conn:
        with pytest.raises(InvalidMessage, match=f"`{field}`.*{fragment}|{fragment}.*") as caught:
            enqueue(conn, to=TO, message=TEXT, **{field: value})
        assert f"`{field}`" in str(caught.value)
        conn.execute(sa.text("SELECT 1"))
    assert rows(db) == (0, 0)


def test_sql_keys_and_sender_are_checked_by_the_same_words(database_url, sender):
    many = [{"to": TO, "message": TEXT, "correlation_id": 5}]
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(many),), "item 1 : ") == \
        "`correlation_id` must be a string of 1 to 255 characters"
    many = [{"to": TO, "message": TEXT, "phone_number_id": 123}]
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(many),), "item 1 : ") == \
        "`phone_number_id` must be the numeric id of a business phone number"
    assert sql_path(database_url, "SELECT wa_outbox.enqueue(%s, %s::jsonb, idempotency_key => '')",
                    (TO, json.dumps(TEXT))) == "`idempotency_key` must be a string of 1 to 255 characters"


def test_the_callers_tracker_is_stored_and_sent_after_the_outbox_id(app_engine, db, sender):
    with app_engine.begin() as conn:
        nid = enqueue(conn, to=TO, message={**TEXT, "biz_opaque_callback_data": "pywa-tracker"})
    stored = db.execute("SELECT message FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()[0]
    assert stored["biz_opaque_callback_data"] == "pywa-tracker"
    row = Claimed(id=nid, phone_number_id="1", recipient="5511987654321", message=stored, attempts=1,
                  max_attempts=None, correlation_id=None)
    assert request_body(row)["biz_opaque_callback_data"] == f"{nid}:pywa-tracker"
    longest = request_body(dataclasses.replace(row, id=2 ** 63 - 1,
                                               message={**TEXT, "biz_opaque_callback_data": "t" * 492}))
    assert len(longest["biz_opaque_callback_data"]) == 512


def test_python_check_is_pure_and_matches_sql_for_the_spec_examples(db):
    from tests.db.test_enqueue import EXAMPLES
    for name, example in EXAMPLES.items():
        sql = db.execute("SELECT wa_outbox.message_problem(%s::jsonb)", (json.dumps(example),)).fetchone()[0]
        assert message_problem(example) == sql, name


def test_message_rules_are_inlined_sql_that_a_bulk_statement_pays_no_call_for(db):
    """The rules are LANGUAGE sql without sub-queries, so Postgres inlines them: the plan names no function."""
    assert dict(db.execute("SELECT p.proname, l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
                           "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'wa_outbox' AND p.proname "
                           "IN ('message_problem', 'recipient_digits')").fetchall()) == \
        {"message_problem": "sql", "recipient_digits": "sql"}
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN VERBOSE SELECT wa_outbox.message_problem(jsonb_build_object('text', g)), "
        "wa_outbox.recipient_digits(g::text) FROM generate_series(1, 2) g"))
    assert "message_problem" not in plan and "recipient_digits" not in plan
    assert "jsonb_typeof" in plan and "ltrim" in plan  # their bodies, inlined


@pytest.mark.parametrize("to", ["5511987654321", "1234567", "123456789012345", "123456", "1234567890123456",
                                "0511987654321", "+5511987654321", " 5511987654321", "55 11 98765-4321",
                                "5511987654321\n", "٥٥١١٩٨٧٦٥٤٣٢١", "5511987654３21", "", "+", "1e10000000",
                                "(55) 11.98765.4321"])
def test_recipient_digits_fast_path_gives_version_2s_answer(db, to):
    """Digits only skip the regular expressions; every other input takes version 2's expression, unchanged."""
    from wa_outbox.messages import recipient_digits
    got, v2 = db.execute(
        "SELECT wa_outbox.recipient_digits(%(to)s), "
        "substring(ltrim(translate(%(to)s, E' \\t\\n\\r\\f\\x0B().-', ''), '+') FROM '^[1-9][0-9]{6,14}$')",
        {"to": to}).fetchone()
    assert got == v2 == recipient_digits(to)


def test_a_batch_asks_the_walking_rules_only_when_an_item_may_break_them(database_url, db, sender):
    """batch_json_suspect() gates the two rules that walk each message: a batch where nothing can break them skips
    them, and one deep or large number anywhere in the batch still gets its item refused by name."""
    fine = [{"to": TO, "message": {**TEXT, "n": [1, 2.5, -(2 ** 53 - 1)], "x": {"y": {"z": "deep-ish"}}}}] * 3
    assert not db.execute("SELECT wa_outbox.batch_json_suspect(%s::jsonb)", (json.dumps(fine),)).fetchone()[0]
    for bad, reason in ((nested(65), "message is nested deeper than 64 levels"),
                        ({**TEXT, "n": 2 ** 53}, "message has a number beyond")):
        batch = fine + [{"to": TO, "message": bad}] + fine
        assert db.execute("SELECT wa_outbox.batch_json_suspect(%s::jsonb)", (json.dumps(batch),)).fetchone()[0]
        got = sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(batch),), "item 4 : ")
        assert got.startswith(reason)
    # a number out of range outside every message only makes the batch suspect; no item is refused for it
    odd = fine + [{"to": TO, "message": TEXT, "note": 2 ** 60}]
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(odd),)) is None
    assert rows(db) == (4, 4)


def test_the_sender_rule_with_and_without_a_default(database_url, db):
    """enqueue_many() knows the default sender's verdict once per batch; an item's own sender is checked per item."""
    many = json.dumps([{"to": TO, "message": TEXT, "phone_number_id": "100000000000009"}, {"to": TO, "message": TEXT}])
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (many,), "item 2 : ") == \
        "no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox"
    db.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', 'not-a-number')")
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (many,), "item 2 : ") == \
        "no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox"
    db.execute("UPDATE wa_outbox.settings SET value = '100000000000001'")
    bad = json.dumps([{"to": TO, "message": TEXT, "phone_number_id": "12a"}])
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (bad,), "item 1 : ") == \
        "`phone_number_id` must be the numeric id of a business phone number"
    assert sql_path(database_url, "SELECT wa_outbox.enqueue_many(%s::jsonb)", (many,)) is None
    assert db.execute("SELECT array_agg(phone_number_id ORDER BY id) FROM wa_outbox.notifications").fetchone()[0] == \
        ["100000000000009", "100000000000001"]


def test_python_enqueue_many_without_a_default_sender_is_refused_as_sql_refuses_it(app_engine, database_url, db):
    """The default sender is the one rule Python cannot check: wa_outbox.enqueue_checked() refuses the first item
    without a sender, with enqueue_many()'s reason, and writes nothing."""
    from wa_outbox import enqueue_many
    items = [{"to": TO, "message": TEXT, "phone_number_id": "100000000000009"}, {"to": TO, "message": TEXT}]
    for default in (None, "not-a-number"):
        if default:
            db.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', %s)", (default,))
        for size in (2, 2500):  # one statement; a pipeline of several
            batch = items + [{"to": TO, "message": TEXT}] * (size - 2)
            with pytest.raises(psycopg.errors.InvalidParameterValue,
                               match="item 2 : no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID"):
                with psycopg.connect(database_url) as conn:
                    enqueue_many(conn, batch)
            assert rows(db) == (0, 0)
    db.execute("UPDATE wa_outbox.settings SET value = '100000000000001'")
    with app_engine.begin() as conn:
        enqueue_many(conn, items)
    assert db.execute("SELECT array_agg(phone_number_id ORDER BY id) FROM wa_outbox.notifications").fetchone()[0] == \
        ["100000000000009", "100000000000001"]


@pytest.mark.parametrize("recipient, stored", [("5511987654321", True), ("1234567", True), ("123456789012345", True),
                                               ("123456", False), ("1234567890123456", False), ("0511987654321", False),
                                               ("+5511987654321", False), ("5511 987654321", False),
                                               ("٥٥١١٩٨٧٦٥٤٣٢١", False), ("5511987654321\n", False)])
def test_the_tables_own_recipient_rule_still_refuses_what_it_did(db, recipient, stored):
    """notifications_recipient_check without a regular expression: the same rows in, the same rows out."""
    insert = ("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
              "VALUES ('1', %s, '{}', '')")
    if stored:
        db.execute(insert, (recipient,))
    else:
        with pytest.raises(psycopg.errors.CheckViolation, match="notifications_recipient_check"):
            db.execute(insert, (recipient,))


# == SQL callers (issue 23: the first hour): check_message() first, or enqueue() under a SAVEPOINT ==

def test_check_message_takes_plain_text_and_names_every_rule_enqueue_raises(database_url, db, sender):
    text = json.dumps(TEXT)
    assert check_message(db, TO, text) is None
    assert check_message(db, TO, "{not json").startswith("`message` is not JSON Postgres can store: ")
    assert check_message(db, TO, '{"type": "text", "text": {"body": "a\\u0000b"}}').startswith(
        "`message` is not JSON Postgres can store: ")
    assert check_message(db, TO, None) == "`message` must be a JSON object (a Cloud API message body)"
    for keys, reason in (({"idempotency_key": ""}, "`idempotency_key` must be a string of 1 to 255 characters"),
                         ({"correlation_id": "c" * 256}, "`correlation_id` must be a string of 1 to 255 characters"),
                         ({"phone_number_id": "+55 11"},
                          "`phone_number_id` must be the numeric id of a business phone number"),
                         ({"phone_number_id": "nobody"},
                          "no sender has the alias nobody: give a registered alias or a phone_number_id")):
        assert check_message(db, TO, text, **keys) == reason
        named = "".join(f", {name} => %({name})s" for name in keys)
        assert sql_path(database_url, f"SELECT wa_outbox.enqueue(%(to)s, %(message)s::jsonb{named})",
                        {"to": TO, "message": text, **keys}) == reason  # what enqueue() raises, word for word
    db.execute("DELETE FROM wa_outbox.settings WHERE key = 'default_phone_number_id'")
    assert check_message(db, TO, text) == \
        "no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox"
    assert rows(db) == (0, 0)


def test_a_refusal_keeps_the_callers_transaction_with_check_message_or_a_savepoint(database_url, db, sender):
    """docs/enqueue.md's two remedies: enqueue() raising aborts the transaction it runs in, so an app asks
    check_message() first, or wraps enqueue() in a SAVEPOINT; either way its own work commits."""
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TEMP TABLE orders (id int)")  # the app's own table, for this session
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SELECT wa_outbox.enqueue('123', %s::jsonb)", (json.dumps(TEXT),))
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):  # the whole transaction is lost
            conn.execute("SELECT count(*) FROM orders")
        conn.rollback()

        conn.execute("INSERT INTO orders VALUES (2)")
        problem = conn.execute("SELECT wa_outbox.check_message('123', %s)", (json.dumps(TEXT),)).fetchone()[0]
        assert problem.startswith("invalid recipient")  # asked first: nothing raised, the transaction goes on
        conn.execute("SAVEPOINT before_enqueue")
        try:
            conn.execute("SELECT wa_outbox.enqueue('123', %s::jsonb)", (json.dumps(TEXT),))
        except psycopg.errors.InvalidParameterValue:
            conn.execute("ROLLBACK TO SAVEPOINT before_enqueue")
        queued = conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb)", (TO, json.dumps(TEXT))).fetchone()[0]
        assert conn.execute("SELECT array_agg(id) FROM orders").fetchone()[0] == [2]
        conn.commit()
    assert db.execute("SELECT id FROM wa_outbox.notifications").fetchall() == [(queued,)]
