"""/ops sessions live in Postgres (wa_outbox.ops_sessions): logout ends a session wherever its cookie was copied,
removing a token ends the sessions it opened (and only those), expired sessions are refused and pruned, and the
table holds nothing that opens a session or names a token."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

import pytest

from tests.conftest import API_TOKEN
from tests.db.test_ops import _csrf, _login
from wa_outbox import outbox
from wa_outbox.web import create_app, engine_of

OTHER_TOKEN = "another-api-token-abcdefghij"
COOKIE = "wa_outbox_ops"


def _page_csrf(client) -> str:
    return _csrf(client.get("/ops").get_data(as_text=True))


def _dead_message(db) -> int:
    return db.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, attempts) "
        "VALUES ('100000000000001', '5511987654321', '{\"type\": \"text\", \"text\": {\"body\": \"hi\"}}', 'h', "
        "'dead', 3) RETURNING id").fetchone()[0]


def _cookie(client) -> str:
    cookie = client.get_cookie(COOKIE, path="/ops")
    assert cookie is not None, "no session cookie"
    return cookie.value


def _copy_to(app, client):
    """A second browser holding a copy of `client`'s cookie."""
    thief = app.test_client()
    thief.set_cookie(COOKIE, _cookie(client), path="/ops")
    return thief


@pytest.fixture
def two_token_apps(settings, database_url):
    """An app configured with two tokens, and the same deployment restarted with the first token removed."""
    before = create_app(dataclasses.replace(settings, api_tokens=(API_TOKEN, OTHER_TOKEN)), metrics=False)
    after = create_app(dataclasses.replace(settings, api_tokens=(OTHER_TOKEN,)), metrics=False)
    yield before, after
    engine_of(before).dispose()
    engine_of(after).dispose()


def test_a_copied_cookie_is_no_session_once_its_owner_logged_out(app, client, db):
    assert _login(client).status_code == 302
    thief = _copy_to(app, client)
    assert thief.get("/ops").status_code == 200  # a copy works while the session lives ...
    stolen_csrf = _page_csrf(thief)
    assert client.post("/ops/logout", data={"csrf_token": _page_csrf(client)}).status_code == 302
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions").fetchone()[0] == 0
    assert thief.get("/ops").status_code == 302  # ... and not after the logout
    dead = _dead_message(db)
    response = thief.post(f"/ops/messages/{dead}/retry", data={"csrf_token": stolen_csrf})
    assert response.status_code == 401
    assert db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (dead,)).fetchone()[0] == "dead"


def test_logging_in_again_ends_the_browsers_previous_session(app, client, db):
    _login(client)
    old = _copy_to(app, client)
    _login(client)
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions").fetchone()[0] == 1
    assert old.get("/ops").status_code == 302
    assert client.get("/ops").status_code == 200


def test_removing_a_token_ends_the_sessions_it_opened_and_only_those(two_token_apps, db):
    before, after = two_token_apps
    removed, kept = before.test_client(), before.test_client()
    assert _login(removed, API_TOKEN).status_code == 302
    assert _login(kept, OTHER_TOKEN).status_code == 302
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions").fetchone()[0] == 2
    # the restart with API_TOKEN gone from WA_OUTBOX_API_TOKENS
    removed_now, kept_now = _copy_to(after, removed), _copy_to(after, kept)
    assert removed_now.get("/ops").status_code == 302
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions").fetchone()[0] == 1  # deleted on sight
    assert kept_now.get("/ops").status_code == 200
    # and the removed token's session stays refused, in either app
    assert _copy_to(before, removed).get("/ops").status_code == 302


def test_a_cookie_without_a_live_row_is_no_session(client, db):
    """A cookie of version 5 (`logged_in`, no session secret), or one whose row is gone: not logged in."""
    client.get("/ops/login")
    with client.session_transaction("/ops") as session:
        session["logged_in"] = True
        session["sid"] = "A" * 43
    assert client.get("/ops").status_code == 302


def test_an_expired_session_is_refused(client, db):
    _login(client)
    db.execute("UPDATE wa_outbox.ops_sessions SET created_at = now() - interval '13 hours', "
               "last_seen_at = now() - interval '13 hours', expires_at = now() - interval '1 hour'")
    assert client.get("/ops").status_code == 302


def test_last_seen_moves_at_most_once_a_minute(client, db):
    _login(client)
    db.execute("UPDATE wa_outbox.ops_sessions SET last_seen_at = now() - interval '30 seconds'")
    seen = db.execute("SELECT last_seen_at FROM wa_outbox.ops_sessions").fetchone()[0]
    assert client.get("/ops").status_code == 200
    assert db.execute("SELECT last_seen_at FROM wa_outbox.ops_sessions").fetchone()[0] == seen  # no write
    db.execute("UPDATE wa_outbox.ops_sessions SET last_seen_at = now() - interval '2 minutes'")
    assert client.get("/ops").status_code == 200
    assert db.execute("SELECT now() - last_seen_at < interval '1 minute' "
                      "FROM wa_outbox.ops_sessions").fetchone()[0]


def test_the_table_holds_neither_a_usable_session_nor_the_token(app, client, db):
    _login(client)
    secret = app.session_interface.get_signing_serializer(app).loads(_cookie(client))["sid"]
    row_id, fingerprint = db.execute("SELECT id, token_fingerprint FROM wa_outbox.ops_sessions").fetchone()
    assert bytes(row_id) == hashlib.sha256(base64.urlsafe_b64decode(secret + "=")).digest()
    dump = bytes(row_id) + bytes(fingerprint)
    assert secret.encode() not in dump and API_TOKEN.encode() not in dump
    assert hashlib.sha256(API_TOKEN.encode()).digest() != bytes(fingerprint)  # keyed, not a bare hash
    assert API_TOKEN not in _cookie(client)
    # the row's id as a cookie's secret is no session
    forged = app.test_client()
    forged.get("/ops/login")
    with forged.session_transaction("/ops") as session:
        session["sid"] = base64.urlsafe_b64encode(bytes(row_id)).decode().rstrip("=")
    assert forged.get("/ops").status_code == 302


def test_logins_and_prune_delete_expired_sessions(client, db, database_url, settings):
    db.execute("INSERT INTO wa_outbox.ops_sessions (id, token_fingerprint, created_at, expires_at) VALUES "
               "(sha256('a'), sha256('t'), now() - interval '13 hours', now() - interval '1 hour'), "
               "(sha256('b'), sha256('t'), now() - interval '1 hour', now() + interval '11 hours')")
    _login(client)  # deletes the expired one
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions WHERE expires_at <= now()").fetchone()[0] == 0
    db.execute("INSERT INTO wa_outbox.ops_sessions (id, token_fingerprint, created_at, expires_at) VALUES "
               "(sha256('c'), sha256('t'), now() - interval '13 hours', now() - interval '1 hour')")
    from wa_outbox.db import create_engine
    engine = create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")  # as the CLI's
    try:
        result = outbox.prune(engine, days=30)
    finally:
        engine.dispose()
    assert result.ops_sessions == 1
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions").fetchone()[0] == 2  # the live ones
    assert client.get("/ops").status_code == 200


def test_the_login_form_still_needs_its_csrf_token(client, db):
    client.get("/ops/login")
    assert client.post("/ops/login", data={"token": API_TOKEN}).status_code == 403
    assert db.execute("SELECT count(*) FROM wa_outbox.ops_sessions").fetchone()[0] == 0
    page = client.get("/ops/login")
    assert client.post("/ops/login", data={"token": API_TOKEN,
                                           "csrf_token": _csrf(page.get_data(as_text=True))}).status_code == 302
