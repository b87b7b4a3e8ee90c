"""Bad input to /v1 is a 4xx with a JSON reason and writes nothing; a database that is down is a 503; an enqueue
without an idempotency key survives a dropped connection without a second row."""

from __future__ import annotations

import json
import socket

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.conftest import API_TOKEN
from wa_outbox import InvalidMessage, enqueue
from wa_outbox.db import sqlalchemy_url

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
TO = "+5511987654321"
TEXT = {"type": "text", "text": {"body": "Olá"}}


def rows(db) -> tuple[int, int]:
    return db.execute("SELECT (SELECT count(*) FROM wa_outbox.notifications), "
                      "(SELECT count(*) FROM wa_outbox.notification_events)").fetchone()


def post_raw(client, body: bytes, headers=None):
    return client.post("/v1/messages", data=body, headers={**AUTH, "Content-Type": "application/json",
                                                            **(headers or {})})


@pytest.mark.parametrize("body", [
    {"to": TO, "message": {"type": "text", "text": {"body": "a\x00b"}}},
    {"to": TO, "message": {"type": "text", "text": {"body": "a\ud800"}}},
    {"to": TO, "message": {"type": "text", "text": {"body": "x", "\x00": 1}}},
    {"to": TO, "message": TEXT, "correlation_id": "c\x00"},
    {"to": TO, "message": TEXT, "correlation_id": "c\udfff"},
    {"to": TO + "\x00", "message": TEXT},
    {"to": TO, "message": TEXT, "phone_number_id": "1\x00"},
], ids=["NUL in body", "surrogate in body", "NUL in a key", "NUL in correlation_id", "surrogate in correlation_id",
        "NUL in to", "NUL in phone_number_id"])
def test_text_postgres_cannot_store_is_400(client, db, sender, body):
    r = post_raw(client, json.dumps(body).encode())
    assert r.status_code == 400 and r.json["error"]["message"], r.json
    assert rows(db) == (0, 0)


@pytest.mark.parametrize("raw", [
    b'{"to": "+5511987654321", "message": {"type": "location", "location": {"latitude": NaN, "longitude": 1}}}',
    b'{"to": "+5511987654321", "message": {"type": "location", "location": {"latitude": Infinity, "longitude": 1}}}',
    b'{"to": "+5511987654321", "message": {"type": "location", "location": {"latitude": 1e400, "longitude": 1}}}',
    b'{"to": "+5511987654321", "message": {"type": "text", "text": {"body": "x"}, "n": 1' + b"0" * 5000 + b"}}",
    b'{"to": "+5511987654321", "message": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    b'{"to": "+5511987654321", "message": {"type": "text", "text": {"body": "x"}, "d": '
    + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}}",
], ids=["NaN", "Infinity", "1e400", "5000-digit integer", "10000 levels", "100 levels"])
def test_numbers_and_nesting_json_cannot_carry_are_400(client, db, sender, raw):
    r = post_raw(client, raw)
    assert r.status_code == 400 and r.json["error"]["message"], r.json
    assert rows(db) == (0, 0)


def test_bad_header_values_are_400_or_ignored(client, db, sender):
    r = client.post("/v1/messages", json={"to": TO, "message": TEXT},
                    headers={**AUTH, "Idempotency-Key": "k\x00"})
    assert r.status_code == 400 and "Idempotency-Key" in r.json["error"]["message"]
    r = client.post("/v1/messages", json={"to": TO, "message": TEXT},
                    headers={**AUTH, "X-Correlation-Id": "c\x00"})
    assert r.status_code == 202 and "\x00" not in r.headers["X-Correlation-Id"]  # replaced by a generated one
    assert rows(db) == (1, 1)


@pytest.mark.parametrize("method, url, status", [
    ("get", "/v1/dead?before_id=99999999999999999999", 400),
    ("get", "/v1/dead?before_id=9223372036854775808", 400),
    ("get", "/v1/dead?code=99999999999", 400),
    ("get", "/v1/messages?q=%00", 400),
    ("get", "/v1/messages?q=a%00b", 400),
    ("get", "/v1/messages/9223372036854775808", 404),
    ("post", "/v1/messages/9223372036854775808/retry", 404),
    ("get", "/v1/messages/99999999999999999999999999", 404),
])
def test_out_of_range_arguments_are_4xx(client, db, sender, method, url, status):
    r = getattr(client, method)(url, headers=AUTH)
    assert r.status_code == status and r.json["error"]["message"], r.json


def test_largest_ids_still_answer(client, db, sender):
    assert client.get("/v1/dead?before_id=9223372036854775807", headers=AUTH).json == {"dead": []}
    assert client.get("/v1/messages/9223372036854775807", headers=AUTH).status_code == 404


def test_a_database_that_is_down_is_a_503_with_a_reason(settings):
    from wa_outbox.db import create_engine
    from wa_outbox.web import create_app
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = create_engine(f"postgresql://postgres@127.0.0.1:{port}/nothing", pool_size=1,
                           isolation_level="AUTOCOMMIT")
    app = create_app(settings, engine=engine, metrics=False)
    client = app.test_client()
    for method, url, body in [("post", "/v1/messages", {"to": TO, "message": TEXT}), ("get", "/v1/messages/1", None),
                              ("get", "/v1/dead", None), ("get", "/v1/messages?q=x", None),
                              ("post", "/v1/messages/1/retry", None)]:
        r = getattr(client, method)(url, json=body, headers=AUTH)
        assert r.status_code == 503, (url, r.status_code)
        assert "database" in r.json["error"]["message"]
    # bad input is still a 400: it is refused before the database is needed
    assert client.post("/v1/messages", json={"to": "1", "message": TEXT}, headers=AUTH).status_code == 400
    engine.dispose()


def test_an_enqueue_without_key_is_one_row_after_a_dropped_connection(app, client, db, sender):
    """The web pool's connections are killed: the first execute fails, db retries enqueue_one (safe to repeat: the
    request has a generated key), and exactly one row exists."""
    assert client.post("/v1/messages", json={"to": TO, "message": TEXT}, headers=AUTH).status_code == 202  # warm pool
    killed = db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = 'wa-outbox-web' AND datname = current_database()").fetchone()[0]
    assert killed >= 1
    r = client.post("/v1/messages", json={"to": TO, "message": TEXT}, headers=AUTH)
    assert r.status_code == 202 and "Idempotent-Replayed" not in r.headers
    assert rows(db) == (2, 2)
    key = db.execute("SELECT idempotency_key FROM wa_outbox.notifications WHERE id = %s", (r.json["id"],)).fetchone()
    assert key[0].startswith("auto:")


def test_a_lost_commit_reply_is_retried_onto_the_same_row(app, db, sender, monkeypatch):
    """The first execute commits and then loses its reply: the retry finds the row by the generated key."""
    from wa_outbox import db as dbmodule, outbox
    from wa_outbox.web import engine_of
    real = dbmodule._run_once
    calls = []

    def commit_then_lose_reply(engine, name, params, row_factory):
        if name != "enqueue_one":  # another thread's query (the app's registry reloading) goes through untouched
            return real(engine, name, params, row_factory)
        calls.append(name)
        result = real(engine, name, params, row_factory)
        if len(calls) == 1:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result

    monkeypatch.setattr(dbmodule, "_run_once", commit_then_lose_reply)
    accepted = outbox.accept_message(engine_of(app), to=TO, message=TEXT)
    assert calls == ["enqueue_one", "enqueue_one"] and accepted.created and accepted.status == "queued"
    assert rows(db) == (1, 1)


# --- properties: whatever the body, never a 5xx, and either nothing written or exactly one row and one event ------

# Strings and numbers Postgres or a JSON parser refuse, offered often (plain st.text() rarely finds them).
json_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
                | st.sampled_from(["a\x00b", "\ud800", "x" * 5000, 2 ** 64, 2 ** 53, "+5511987654321\f"]))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=20)
text_messages = st.fixed_dictionaries(  # valid-looking text messages with one odd part: most reach the database
    {"type": st.just("text"),
     "text": st.fixed_dictionaries({"body": st.sampled_from(["ok", "a\x00b", "\ud800", "é" * 4097]) | json_scalars})},
    optional={"biz_opaque_callback_data": json_scalars, "extra": json_values})
messages = st.one_of(
    text_messages, text_messages, json_values,
    st.fixed_dictionaries({"type": st.sampled_from(["text", "template", "fax", ""]) | json_scalars,
                           "text": st.fixed_dictionaries({"body": json_scalars}) | json_values},
                          optional={"biz_opaque_callback_data": json_scalars, "extra": json_values}),
)
keys = st.one_of(st.none(), st.none(), st.text(max_size=8), st.sampled_from(["c\x00", "\udc80", ""]), json_scalars)
recipients = st.one_of(st.just(TO), st.just(TO), st.just(TO),
                       st.text(alphabet="+0123456789 ()-.\f\v\x00\u00a0\ud800", max_size=20), json_scalars)


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(to=recipients, message=messages, correlation_id=keys, key=st.none() | st.text(
    st.characters(exclude_characters="\r\n"), max_size=8))
def test_post_messages_never_5xx_and_writes_all_or_nothing(client, db, sender, to, message, correlation_id, key):
    body = {"to": to, "message": message}
    if correlation_id is not None:
        body["correlation_id"] = correlation_id
    headers = {**AUTH, "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key.encode("utf-8", "surrogatepass").decode("latin-1")
    before = rows(db)
    r = client.post("/v1/messages", data=json.dumps(body).encode(), headers=headers)
    assert r.status_code < 500, r.json
    assert r.json is not None
    after = rows(db)
    if r.status_code == 202 and "Idempotent-Replayed" not in r.headers:
        assert after == (before[0] + 1, before[1] + 1)
    else:
        assert after == before


@pytest.fixture(scope="module")
def app_engine(database_url):
    engine = sa.create_engine(sqlalchemy_url(database_url))
    yield engine
    engine.dispose()


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(to=recipients, message=messages, correlation_id=keys)
def test_python_enqueue_raises_only_invalid_message_and_keeps_the_transaction(app_engine, db, sender, to, message,
                                                                              correlation_id):
    before = rows(db)
    with app_engine.begin() as conn:
        try:
            enqueue(conn, to=to, message=message, correlation_id=correlation_id)
            accepted = True
        except InvalidMessage:
            accepted = False
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1  # still usable
    assert rows(db) == ((before[0] + 1, before[1] + 1) if accepted else before)
