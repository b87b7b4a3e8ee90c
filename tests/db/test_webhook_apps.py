"""Webhooks for many Meta apps through the real Flask app on real Postgres: each app's secrets verify its own bodies
(the app recorded on every stored event), another app's WABA is refused, a rotation's overlap, an app registered
while the web runs, unregistered numbers stored, counted and shown, template and account updates routed by WABA, and
the web without WHATSAPP_APP_SECRET. Apps, WABAs and senders are registered by inserting rows (SecretBox-encrypted
secrets), as `wa-outbox apps add` / `senders add` store them."""

from __future__ import annotations

import dataclasses
import re

import pytest
from prometheus_client import REGISTRY

from tests.conftest import API_TOKEN, APP_SECRET, post_webhook
from tests.live import wait_for
from wa_outbox.config import NO_WEBHOOK_SECRET, ConfigError
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key
from wa_outbox.web import create_app
from wa_outbox.web.ops_views import session_key

KEY = generate_key()
BOX = SecretBox([KEY])
APP_A, APP_B, APP_C = "1110001", "2220002", "3330003"
SECRET_A, SECRET_B, SECRET_C = "secret-of-app-a", "secret-of-app-b", "secret-of-app-c"
WABA_A, WABA_B, WABA_C = "9010001", "9020002", "9030003"
NUMBER_A, NUMBER_B, NUMBER_C = "5001001", "5002002", "5003003"


def register_app(db, app_id: str, secret: str, expires_at: str | None = None) -> None:
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES (%s) ON CONFLICT DO NOTHING", (app_id,))
    db.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_enc, fingerprint, expires_at) "
               "VALUES (%s, %s, %s, %s)", (app_id, BOX.encrypt(secret), fingerprint(secret), expires_at))


def register_sender(db, app_id: str, waba_id: str, phone_number_id: str) -> None:
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
               (waba_id, app_id))
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_enc, token_fingerprint) "
               "VALUES (%s, %s, %s, %s)", (phone_number_id, waba_id, BOX.encrypt("token"), fingerprint("token")))


def message(waba: str, number: str, wamid: str) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": waba, "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp", "metadata": {"display_phone_number": "15550783881",
                                                      "phone_number_id": number},
        "contacts": [{"profile": {"name": "Cliente"}, "wa_id": "16505551234"}],
        "messages": [{"from": "16505551234", "id": wamid, "timestamp": "1749416383", "type": "text",
                      "text": {"body": "oi"}}]}}]}]}


def template_update(waba: str, template_id: int = 42) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": waba, "time": 1749416383, "changes": [{
        "field": "message_template_status_update",
        "value": {"event": "APPROVED", "message_template_id": template_id, "message_template_name": "order_ready",
                  "message_template_language": "en_US", "reason": "NONE"}}]}]}


def account_update(waba: str) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": waba, "time": 1749416383, "changes": [{
        "field": "account_update", "value": {"phone_number": "15550783881", "event": "VERIFIED_ACCOUNT"}}]}]}


def stored(db) -> list[tuple]:
    return db.execute("SELECT field, account_id, phone_number_id, app_id, unregistered "
                      "FROM wa_outbox.webhook_events ORDER BY id").fetchall()


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def app_for(settings, **overrides):
    app = create_app(dataclasses.replace(settings, secret_keys=(KEY,), **overrides), metrics=False)
    app.testing = True
    return app


def close(app) -> None:
    app.extensions["wa_outbox.registry"].stop()
    app.extensions["wa_outbox.engine"].dispose()


@pytest.fixture
def two_apps(db):
    register_app(db, APP_A, SECRET_A)
    register_app(db, APP_B, SECRET_B)
    register_sender(db, APP_A, WABA_A, NUMBER_A)
    register_sender(db, APP_B, WABA_B, NUMBER_B)


@pytest.fixture
def web(settings, two_apps):
    """The web app of a deployment with two apps (and WHATSAPP_APP_SECRET, as an upgraded one has)."""
    app = app_for(settings)
    watch = app.extensions["wa_outbox.registry"]
    assert NUMBER_B in watch.routes.app_of_number  # loaded at start-up
    yield app
    close(app)


@pytest.fixture
def client(web):
    return web.test_client()


def test_each_app_verifies_its_own_bodies_and_is_recorded_on_its_events(client, db):
    a = post_webhook(client, message(WABA_A, NUMBER_A, "wamid.A1"), secret=SECRET_A)
    b = post_webhook(client, message(WABA_B, NUMBER_B, "wamid.B1"), secret=SECRET_B)
    assert (a.status_code, a.json) == (200, {"received": 1, "new": 1, "duplicate": 0})
    assert b.status_code == 200
    assert stored(db) == [("messages", WABA_A, NUMBER_A, APP_A, False), ("messages", WABA_B, NUMBER_B, APP_B, False)]


def test_a_wrong_signature_is_refused_and_stores_nothing(client, db):
    before = counted("wa_outbox_webhook_rejected_total", reason="signature")
    r = post_webhook(client, message(WABA_A, NUMBER_A, "wamid.X"), secret="not-any-apps-secret")
    assert r.status_code == 403 and r.json["error"]["status"] == 403
    assert stored(db) == []
    assert counted("wa_outbox_webhook_rejected_total", reason="signature") == before + 1


def test_app_a_signing_for_app_bs_waba_is_refused_and_nothing_is_stored(client, db):
    before = counted("wa_outbox_webhook_rejected_total", reason="wrong_app")
    body = message(WABA_A, NUMBER_A, "wamid.A2")
    body["entry"] += message(WABA_B, NUMBER_B, "wamid.B2")["entry"]  # one of its two entries is B's
    r = post_webhook(client, body, secret=SECRET_A)
    assert r.status_code == 403
    assert r.json["error"]["message"] == f"signed by app {APP_A}, but business account {WABA_B} belongs to app {APP_B}"
    # WHATSAPP_APP_SECRET is no app of the registry's either
    assert post_webhook(client, message(WABA_B, NUMBER_B, "wamid.B3"), secret=APP_SECRET).status_code == 403
    assert stored(db) == []
    assert counted("wa_outbox_webhook_rejected_total", reason="wrong_app") == before + 2
    assert counted("wa_outbox_webhook_rejected_total", reason="wrong_app") > 0


def test_during_a_rotation_both_secrets_verify_then_only_the_new_one(web, client, db):
    rotated = "rotated-secret-of-app-b"
    # as `apps rotate-secret --overlap 24`: the current secret gets an end, the new one is current
    db.execute("UPDATE wa_outbox.app_secrets SET expires_at = now() + interval '24 hours' WHERE app_id = %s",
               (APP_B,))
    register_app(db, APP_B, rotated)
    new = message(WABA_B, NUMBER_B, "wamid.new")
    wait_for(lambda: post_webhook(client, new, secret=rotated).status_code == 200, what="the new secret to verify")
    assert post_webhook(client, message(WABA_B, NUMBER_B, "wamid.old"), secret=SECRET_B).status_code == 200
    # the overlap ends (set in the past here, rather than waited for)
    db.execute("UPDATE wa_outbox.app_secrets SET expires_at = now() - interval '1 second' "
               "WHERE app_id = %s AND expires_at IS NOT NULL", (APP_B,))
    late = message(WABA_B, NUMBER_B, "wamid.late")
    wait_for(lambda: post_webhook(client, late, secret=SECRET_B).status_code == 403, what="the old secret to end")
    assert post_webhook(client, message(WABA_B, NUMBER_B, "wamid.newer"), secret=rotated).status_code == 200
    assert {row[3] for row in stored(db)} == {APP_B}


def test_an_app_registered_while_the_web_runs_verifies_without_a_restart(web, client, db):
    body = message(WABA_C, NUMBER_C, "wamid.C1")
    assert post_webhook(client, body, secret=SECRET_C).status_code == 403
    register_app(db, APP_C, SECRET_C)
    register_sender(db, APP_C, WABA_C, NUMBER_C)
    # Each commit wakes a reload: wait for the one that sees the sender too (the app alone would verify, and the
    # number then be unregistered).
    watch = web.extensions["wa_outbox.registry"]
    wait_for(lambda: NUMBER_C in watch.routes.app_of_number, what="the registry reloaded with app C's number")
    assert post_webhook(client, body, secret=SECRET_C).status_code == 200
    assert stored(db) == [("messages", WABA_C, NUMBER_C, APP_C, False)]


def test_apps_registered_and_rotated_by_the_cli_verify_at_once(web, client, run, db, monkeypatch):
    """`wa-outbox apps add` / `senders add` / `apps rotate-secret --overlap 0` (accounts.py) while the web runs."""
    monkeypatch.setenv("WA_OUTBOX_SECRET_KEY", KEY)
    monkeypatch.setenv("SECRET_OF_C", SECRET_C)
    monkeypatch.setenv("NEW_SECRET_OF_C", "new-secret-of-app-c")
    monkeypatch.setenv("TOKEN_OF_C", "EAAG-token-of-c")
    for args in (("apps", "add", APP_C, "--secret-env", "SECRET_OF_C"),
                 ("senders", "add", NUMBER_C, "--waba", WABA_C, "--app", APP_C, "--token-env", "TOKEN_OF_C")):
        assert run(*args).exit_code == 0
    wait_for(lambda: post_webhook(client, message(WABA_C, NUMBER_C, "wamid.CLI1"), secret=SECRET_C).status_code
             == 200, what="the CLI's app to verify")
    result = run("apps", "rotate-secret", APP_C, "--secret-env", "NEW_SECRET_OF_C", "--overlap", "0")
    assert result.exit_code == 0, result.output
    wait_for(lambda: post_webhook(client, message(WABA_C, NUMBER_C, "wamid.CLI2"), secret="new-secret-of-app-c"
                                  ).status_code == 200, what="the rotated secret to verify")
    wait_for(lambda: post_webhook(client, message(WABA_C, NUMBER_C, "wamid.CLI3"), secret=SECRET_C).status_code
             == 403, what="the previous secret to stop (no overlap)")


def test_without_listen_the_registry_is_polled(settings, two_apps, db):
    """WA_OUTBOX_LISTEN=false (PgBouncer in transaction mode): no LISTEN, a reload every WA_OUTBOX_POLL_INTERVAL."""
    app = app_for(settings, listen=False, poll_interval=0.2)
    try:
        assert not app.extensions["wa_outbox.registry"].listening.is_set()
        body = message(WABA_C, NUMBER_C, "wamid.P1")
        register_app(db, APP_C, SECRET_C)
        register_sender(db, APP_C, WABA_C, NUMBER_C)
        wait_for(lambda: post_webhook(app.test_client(), body, secret=SECRET_C).status_code == 200,
                 what="app C to verify")
    finally:
        close(app)


def test_an_unregistered_number_is_stored_acknowledged_counted_and_shown(web, client, db):
    before = counted("wa_outbox_webhook_unregistered_total", kind="number")
    r = post_webhook(client, message(WABA_A, "5009009", "wamid.U1"), secret=SECRET_A)
    assert (r.status_code, r.json["new"]) == (200, 1)
    assert stored(db) == [("messages", WABA_A, "5009009", APP_A, True)]  # attributed to no sender
    assert counted("wa_outbox_webhook_unregistered_total", kind="number") == before + 1
    page = _ops_page(web)
    section = page[page.index('id="unregistered"'):]
    assert "5009009" in section and WABA_A in section and APP_A in section
    # registered meanwhile: no longer listed
    register_sender(db, APP_A, WABA_A, "5009009")
    assert 'id="unregistered"' not in _ops_page(web)


def test_template_and_account_updates_are_routed_by_waba(client, db):
    before = counted("wa_outbox_webhook_unregistered_total", kind="waba")
    assert post_webhook(client, template_update(WABA_A), secret=SECRET_A).status_code == 200
    assert post_webhook(client, account_update(WABA_B), secret=SECRET_B).status_code == 200
    refused = post_webhook(client, account_update(WABA_B), secret=SECRET_A)  # B's account, A's signature
    assert refused.status_code == 403 and WABA_B in refused.json["error"]["message"]
    assert post_webhook(client, template_update("9099099"), secret=SECRET_A).status_code == 200  # an unknown WABA
    assert stored(db) == [("message_template_status_update", WABA_A, None, APP_A, False),
                          ("account_update", WABA_B, None, APP_B, False),
                          ("message_template_status_update", "9099099", None, APP_A, True)]
    assert counted("wa_outbox_webhook_unregistered_total", kind="waba") == before + 1


def test_single_number_mode_stores_as_before(app, db):
    """Nothing registered: the environment's secret verifies, nothing is routed, flagged or attributed to an app."""
    r = post_webhook(app.test_client(), message("419561257915477", "106540352242922", "wamid.S1"))
    assert r.status_code == 200
    assert stored(db) == [("messages", "419561257915477", "106540352242922", None, False)]
    assert post_webhook(app.test_client(), message("1", "2", "wamid.S2"), secret=SECRET_A).status_code == 403


def test_the_web_starts_without_whatsapp_app_secret_when_an_app_is_registered(settings, two_apps, db):
    app = app_for(settings, app_secret=None)
    try:
        client = app.test_client()
        assert post_webhook(client, message(WABA_A, NUMBER_A, "wamid.A9"), secret=SECRET_A).status_code == 200
        assert post_webhook(client, message(WABA_A, NUMBER_A, "wamid.A8"), secret=APP_SECRET).status_code == 403
        assert stored(db) == [("messages", WABA_A, NUMBER_A, APP_A, False)]
        # /ops: its session key derives from WA_OUTBOX_SECRET_KEY then, the same in every web process
        assert _ops_page(app).count("<section") > 1
        other = app_for(settings, app_secret=None)
        assert other.secret_key == app.secret_key
        close(other)
        assert app.secret_key != session_key(settings)
        assert KEY.encode() not in app.secret_key
    finally:
        close(app)


def test_the_web_refuses_to_start_with_neither_the_secret_nor_an_app(settings):
    for keys in ((KEY,), ()):  # with WA_OUTBOX_SECRET_KEY (and no app registered), or without it
        with pytest.raises(ConfigError) as refused:
            create_app(dataclasses.replace(settings, app_secret=None, secret_keys=keys), metrics=False)
        assert str(refused.value) == NO_WEBHOOK_SECRET
    assert "\n" not in NO_WEBHOOK_SECRET  # one line, naming both ways to fix it
    assert "set WHATSAPP_APP_SECRET" in NO_WEBHOOK_SECRET and "apps add" in NO_WEBHOOK_SECRET


def _ops_page(app) -> str:
    client = app.test_client()
    page = client.get("/ops/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post("/ops/login", data={"token": API_TOKEN, "csrf_token": csrf}).status_code == 302
    response = client.get("/ops")
    assert response.status_code == 200
    return response.get_data(as_text=True)
