"""Verification under many secrets and routing by WABA and number (webhook_routing.py, webhooks.verifying_apps):
pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from wa_outbox.registry import AppSecret, BusinessAccount, Registry, Sender
from wa_outbox.webhook_routing import Routed, WrongApp, route, routes_of
from wa_outbox.webhooks import SignatureError, sign, split_payload, verifying_apps

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


def registry(*, env_secret: str | None = None, env_number: str | None = None) -> Registry:
    secrets = [AppSecret("111", "secret-a"), AppSecret("222", "secret-b-new"),
               AppSecret("222", "secret-b-old", expires_at=NOW + timedelta(hours=1))]
    if env_secret:
        secrets.insert(0, AppSecret(None, env_secret))
    senders = {"5001": Sender("5001", "901", "111"), "5002": Sender("5002", "902", "222")}
    if env_number:
        senders[env_number] = Sender(env_number, None, None, from_environment=True)
    return Registry(senders, {"901": BusinessAccount("901", "111", None), "902": BusinessAccount("902", "222", None)},
                    tuple(secrets))


def messages_change(waba: str, number: str) -> dict:
    return {"id": waba, "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp", "metadata": {"display_phone_number": "15550001", "phone_number_id": number},
        "messages": [{"from": "16505551234", "id": f"wamid.{waba}.{number}", "timestamp": "1", "type": "text",
                      "text": {"body": "oi"}}]}}]}


def template_change(waba: str) -> dict:
    return {"id": waba, "changes": [{"field": "message_template_status_update", "value": {
        "event": "APPROVED", "message_template_id": 42, "message_template_name": "order", "reason": "NONE",
        "message_template_language": "en_US"}}]}


def body(*entries: dict) -> dict:
    return {"object": "whatsapp_business_account", "entry": list(entries)}


def routed(reg: Registry, verified_by: list, payload: dict) -> Routed:
    return route(routes_of(reg), verified_by, split_payload(payload))


# --- verification -----------------------------------------------------------------------------------------------------

def test_each_app_verifies_its_own_bodies_and_every_candidate_is_compared():
    routes = routes_of(registry(env_secret="env-secret"))
    raw = b'{"object":"whatsapp_business_account","entry":[]}'
    assert routes.verify(raw, sign("secret-a", raw), NOW.timestamp()) == ["111"]
    assert routes.verify(raw, sign("secret-b-new", raw), NOW.timestamp()) == ["222"]
    assert routes.verify(raw, sign("env-secret", raw), NOW.timestamp()) == [None]
    with pytest.raises(SignatureError) as wrong:
        routes.verify(raw, sign("nobody's", raw), NOW.timestamp())
    assert wrong.value.status == 403
    with pytest.raises(SignatureError) as missing:
        routes.verify(raw, None, NOW.timestamp())
    assert missing.value.status == 401
    # two candidates holding the same secret: both are named, whichever comes first
    assert verifying_apps([(None, b"same", None), ("111", b"same", None)], raw, sign("same", raw), 0) == [None, "111"]
    with pytest.raises(SignatureError):
        verifying_apps([("111", b"x", None)], raw, "sha256=" + "é" * 64, 0)  # non-ASCII cannot match


def test_a_rotated_out_secret_verifies_until_its_overlap_ends():
    routes = routes_of(registry())
    raw = b"{}"
    old = sign("secret-b-old", raw)
    assert routes.verify(raw, old, NOW.timestamp()) == ["222"]
    assert routes.verify(raw, sign("secret-b-new", raw), (NOW + timedelta(hours=2)).timestamp()) == ["222"]
    with pytest.raises(SignatureError):
        routes.verify(raw, old, (NOW + timedelta(hours=1)).timestamp())


# --- routing --------------------------------------------------------------------------------------------------------

def test_changes_of_an_apps_own_wabas_are_its_own():
    found = routed(registry(), ["111"], body(messages_change("901", "5001"), template_change("901")))
    assert found == Routed("111", None, 0, 0)


def test_another_apps_waba_or_number_refuses_the_whole_post():
    with pytest.raises(WrongApp, match="signed by app 111, but business account 902 belongs to app 222"):
        routed(registry(), ["111"], body(messages_change("901", "5001"), messages_change("902", "5002")))
    with pytest.raises(WrongApp, match="number 5002 belongs to app 222"):
        routed(registry(), ["111"], body(messages_change("999", "5002")))  # an unknown WABA, but B's number
    with pytest.raises(WrongApp, match="business account 902"):
        routed(registry(), ["111"], body(template_change("902")))  # template updates: by WABA
    with pytest.raises(WrongApp, match="signed by WHATSAPP_APP_SECRET"):
        routed(registry(env_secret="e"), [None], body(messages_change("902", "5002")))


def test_two_apps_in_one_post_are_refused_even_when_both_verified():
    with pytest.raises(WrongApp, match="two apps"):
        routed(registry(), ["111", "222"], body(messages_change("901", "5001"), messages_change("902", "5002")))


def test_unregistered_numbers_and_wabas_are_flagged_never_attributed():
    found = routed(registry(), ["111"], body(messages_change("901", "5009"), template_change("909"),
                                             messages_change("901", "5001")))
    assert found == Routed("111", (True, True, False), numbers=1, wabas=1)


def test_the_environments_number_belongs_to_no_app():
    found = routed(registry(env_secret="e", env_number="100000000000001"), [None],
                   body(messages_change("419561257915477", "100000000000001")))
    assert found == Routed(None, None)


def test_single_number_mode_routes_nothing():
    alone = Registry({"100000000000001": Sender("100000000000001", None, None, from_environment=True)}, {},
                     (AppSecret(None, "env"),))
    found = routed(alone, [None], body(messages_change("419561257915477", "106540352242922"), template_change("1")))
    assert found == Routed(None, None)
    assert not routes_of(alone).registered


def test_a_registered_app_is_preferred_over_the_environments_secret_when_both_verify():
    assert routed(registry(env_secret="secret-a"), [None, "111"], body(template_change("909"))).app_id == "111"


def test_secrets_never_appear_in_routes_repr():
    text = repr(routes_of(registry(env_secret="env-secret")))
    assert "secret-a" not in text and "env-secret" not in text and "secret-b-old" not in text
