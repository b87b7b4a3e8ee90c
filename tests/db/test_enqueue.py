"""Enqueue from the app: the Python helper on SQLAlchemy and psycopg connections, inside the caller's transaction,
for every message example of Meta's spec."""

from __future__ import annotations

import json

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.conftest import DATA
from wa_outbox import InvalidMessage, enqueue
from wa_outbox.db import sqlalchemy_url

EXAMPLES = json.loads((DATA / "openapi" / "message-examples.json").read_text())
TEXT = {"type": "text", "text": {"body": "Your order shipped"}}



@pytest.fixture
def app_engine(database_url):
    """The application's own engine: a normal (transactional) SQLAlchemy engine."""
    engine = sa.create_engine(sqlalchemy_url(database_url))
    yield engine
    engine.dispose()


def count(db, table="notifications") -> int:
    return db.execute(f"SELECT count(*) FROM wa_outbox.{table}").fetchone()[0]


def test_sqlalchemy_connection_commit_makes_it_durable(app_engine, db, sender):
    with app_engine.begin() as conn:
        nid = enqueue(conn, to="+5511987654321", message=TEXT, correlation_id="order-7")
        assert count(db) == 0  # not visible before the caller commits
    row = db.execute("SELECT status, recipient, correlation_id FROM wa_outbox.notifications WHERE id = %s",
                     (nid,)).fetchone()
    assert row == ("queued", "5511987654321", "order-7")
    assert db.execute("SELECT event FROM wa_outbox.notification_events").fetchall() == [("queued",)]


def test_rollback_leaves_no_trace(app_engine, db, sender):
    with pytest.raises(RuntimeError):
        with app_engine.begin() as conn:
            conn.execute(sa.text("CREATE TEMP TABLE orders (id int)"))
            enqueue(conn, to="+5511987654321", message=TEXT)
            raise RuntimeError("checkout failed")
    assert count(db) == 0 and count(db, "notification_events") == 0


def test_session_and_psycopg_connections(app_engine, database_url, db, sender):
    with Session(app_engine) as session, session.begin():
        a = enqueue(session, to="+5511987654321", message=TEXT, idempotency_key="k-session")
    with psycopg.connect(database_url) as conn:
        b = enqueue(conn, to="+5511987654322", message=TEXT)
        conn.rollback()
        c = enqueue(conn, to="+5511987654323", message=TEXT)
    assert count(db) == 2
    assert {r[0] for r in db.execute("SELECT id FROM wa_outbox.notifications")} == {a, c} and b not in (a, c)


def test_idempotency_key_returns_the_same_id(app_engine, db, sender):
    with app_engine.begin() as conn:
        first = enqueue(conn, to="+5511987654321", message=TEXT, idempotency_key="order-42-shipped")
    with app_engine.begin() as conn:
        again = enqueue(conn, to="+5511987654321", message=TEXT, idempotency_key="order-42-shipped")
    assert first == again and count(db) == 1


@pytest.mark.parametrize("to, message, error", [
    ("5", TEXT, "invalid recipient"),
    ("+5511987654321", {"type": "fax", "fax": {}}, "unknown message type"),
    ("+5511987654321", {"type": "text"}, "needs a 'text' object"),
    ("+5511987654321", {"type": "text", "text": {"body": "x" * 4097}}, "4096"),
    ("+5511987654321", ["not", "a", "dict"], "JSON object"),
])
def test_invalid_input_raises_before_touching_the_transaction(app_engine, db, sender, to, message, error):
    with app_engine.begin() as conn:
        with pytest.raises(InvalidMessage, match=error):
            enqueue(conn, to=to, message=message)
        conn.execute(sa.text("SELECT 1"))  # the caller's transaction is still usable
    assert count(db) == 0


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_spec_example_enqueues_or_is_refused_clearly(name, app_engine, db, sender):
    example = EXAMPLES[name]
    if "status" in example:  # the read receipt / typing indicator: not a queued message
        with app_engine.begin() as conn, pytest.raises(InvalidMessage, match="read receipts"):
            enqueue(conn, to="+16505551234", message=example)
        return
    with app_engine.begin() as conn:
        nid = enqueue(conn, to="+16505551234", message=example)
    stored = db.execute("SELECT message FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()[0]
    expected = {k: v for k, v in example.items() if k not in ("to", "messaging_product", "recipient_type")}
    assert stored == expected


def test_sql_enqueue_infers_the_type_of_a_body_without_one(db, sender):
    reply = EXAMPLES["Send Reply to List Message"]
    assert "type" not in reply
    nid = db.execute("SELECT wa_outbox.enqueue('+16505551234', %s::jsonb)", (json.dumps(reply),)).fetchone()[0]
    assert nid > 0


def test_enqueue_many_returns_ids_in_order_in_the_callers_transaction(app_engine, db, sender):
    from wa_outbox import enqueue_many
    items = [{"to": f"+55119{i:08d}", "message": TEXT, "correlation_id": f"c{i}"} for i in range(500)]
    items[10]["idempotency_key"] = "k-10"
    with app_engine.begin() as conn:
        ids = enqueue_many(conn, items)
    assert len(ids) == 500 and len(set(ids)) == 500
    rows = dict(db.execute("SELECT id, correlation_id FROM wa_outbox.notifications").fetchall())
    assert [rows[i] for i in ids] == [f"c{i}" for i in range(500)]
    assert count(db, "notification_events") == 500
    # again, with a known key in a new batch: the existing id comes back in its place
    with app_engine.begin() as conn:
        again = enqueue_many(conn, [{"to": "+5511900000000", "message": TEXT, "idempotency_key": "k-new"},
                                    items[10]])
    assert again[1] == ids[10] and count(db) == 501
    with pytest.raises(RuntimeError), app_engine.begin() as conn:
        enqueue_many(conn, [{"to": "+5511900000001", "message": TEXT}])
        raise RuntimeError("rolled back")
    assert count(db) == 501


def test_enqueue_many_is_all_or_nothing(app_engine, db, sender):
    from wa_outbox import enqueue_many
    with app_engine.begin() as conn, pytest.raises(InvalidMessage, match="item 1: invalid recipient"):
        enqueue_many(conn, [{"to": "+5511987654321", "message": TEXT}, {"to": "42", "message": TEXT}])
    bad = json.dumps([{"to": "+5511987654321", "message": TEXT}, {"to": "+5511987654321", "message": {"type": "x"}}])
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="item 2 : unknown message type"):
        db.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)", (bad,))
    assert count(db) == 0


def test_enqueue_many_sends_each_field_exactly_as_given(app_engine, db, sender):
    """enqueue_many() assembles the batch's JSON from each message's checked text: quotes, backslashes, non-ASCII
    and emoji in messages, keys and correlation ids arrive as given."""
    from wa_outbox import enqueue_many
    odd = 'quote " backslash \\ tab \t é ✓ 😀 \u2028 </script>'
    items = [
        {"to": "+55 (11) 98765-4321",
         "message": {"type": "text", "text": {"body": odd}, "biz_opaque_callback_data": odd},
         "idempotency_key": "key " + odd, "correlation_id": "corr " + odd, "phone_number_id": "100000000000002"},
        {"to": "+5511987654322", "message": {"interactive": {"type": "button", "body": {"text": odd}}, "n": 1.5}},
    ]
    with app_engine.begin() as conn:
        ids = enqueue_many(conn, items)
    stored = {r[0]: r[1:] for r in db.execute(
        "SELECT id, recipient, message, idempotency_key, correlation_id, phone_number_id "
        "FROM wa_outbox.notifications").fetchall()}
    assert stored[ids[0]] == ("5511987654321", items[0]["message"], "key " + odd, "corr " + odd, "100000000000002")
    assert stored[ids[1]] == ("5511987654322", items[1]["message"], None, None, "100000000000001")


def test_a_large_enqueue_many_is_pipelined_and_stays_in_the_callers_transaction(app_engine, database_url, db,
                                                                                 sender):
    """More than PIPELINE_ITEMS items go as several statements in one pipeline: ids still come back in order (a key
    repeated across parts resolves to one row), and the batch is still part of the caller's transaction."""
    from wa_outbox import enqueue_many
    from wa_outbox.enqueue import PIPELINE_ITEMS
    n = PIPELINE_ITEMS * 2 + 500
    items = [{"to": f"+55119{i:08d}", "message": TEXT, "correlation_id": f"c{i}"} for i in range(n)]
    items[10]["idempotency_key"] = items[n - 1]["idempotency_key"] = "same"
    items[n - 1]["to"] = items[10]["to"]
    items[n - 1]["correlation_id"] = "c10"
    with psycopg.connect(database_url) as conn:  # not autocommit: the caller's transaction, then rolled back
        enqueue_many(conn, items)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
    assert count(db) == 0
    with app_engine.begin() as conn:
        ids = enqueue_many(conn, items)
    assert ids[10] == ids[n - 1] and len(set(ids)) == n - 1
    rows = dict(db.execute("SELECT id, correlation_id FROM wa_outbox.notifications").fetchall())
    assert [rows[i] for i in ids] == [f"c{i}" for i in range(n - 1)] + ["c10"]
    assert count(db) == count(db, "notification_events") == n - 1


def test_a_large_enqueue_many_is_all_or_nothing_and_leaves_the_callers_transaction_usable(app_engine, database_url,
                                                                                          db, sender):
    from wa_outbox import enqueue_many
    from wa_outbox.enqueue import PIPELINE_ITEMS
    items = [{"to": f"+55119{i:08d}", "message": TEXT} for i in range(PIPELINE_ITEMS * 3)]
    items[PIPELINE_ITEMS * 2 + 7]["to"] = "42"  # in the third part, after two were sent
    with psycopg.connect(database_url, autocommit=True) as conn, \
            pytest.raises(InvalidMessage, match=f"item {PIPELINE_ITEMS * 2 + 7}: invalid recipient"):
        enqueue_many(conn, items)
    assert count(db) == 0
    with app_engine.begin() as conn:
        enqueue(conn, to="+5511987654321", message=TEXT)
        with pytest.raises(InvalidMessage, match="invalid recipient"):
            enqueue_many(conn, items)
        enqueue(conn, to="+5511987654322", message=TEXT)  # the caller's transaction goes on
    assert count(db) == count(db, "notification_events") == 2


def test_sql_enqueue_many_refuses_the_first_invalid_item_keyed_or_not_and_writes_nothing(db, sender):
    """Items with and without an idempotency key go in by two inserts of one statement; the first invalid item in
    input order aborts it, whichever insert would have written it, before either writes a row."""
    keyed = {"to": "+5511987654321", "message": TEXT, "idempotency_key": "k-1"}
    plain = {"to": "+5511987654322", "message": TEXT}
    bad_keyed = {"to": "42", "message": TEXT, "idempotency_key": "k-2"}
    bad_plain = {"to": "+5511987654323", "message": {"type": "x"}}
    for batch, error in [([keyed, plain, bad_plain, bad_keyed], "item 3 : unknown message type"),
                         ([plain, keyed, bad_keyed, bad_plain], "item 3 : invalid recipient")]:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=error):
            db.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(batch),))
    assert count(db) == count(db, "notification_events") == 0
    ids = db.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps([plain, keyed, plain]),)).fetchone()[0]
    again = db.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps([keyed]),)).fetchone()[0]
    assert again == [ids[1]] and len(set(ids)) == 3
    assert count(db) == count(db, "notification_events") == 3
