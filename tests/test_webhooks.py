"""The pure part of the receiver: signatures, validation, splitting and keys. No database."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from wa_outbox.webhooks import PayloadError, SignatureError, parse_body, sign, split_payload, verify_signature


def test_sign_matches_hmac_sha256_hex():
    body = b'{"a":"\\u00e4"}'
    assert sign("s3cret", body) == "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()


def test_verify_accepts_the_right_signature_in_any_case():
    body = b"{}"
    verify_signature("k", body, sign("k", body))
    verify_signature("k", body, sign("k", body).upper().replace("SHA256=", "sha256="))


@pytest.mark.parametrize("header, status", [(None, 401), ("", 401), ("sha256=00", 403), ("md5=abc", 403),
                                            ("sha256=é", 403)])
def test_verify_refuses(header, status):
    with pytest.raises(SignatureError) as info:
        verify_signature("k", b"{}", header)
    assert info.value.status == status


def test_verify_is_over_raw_bytes_not_reserialised_json():
    escaped = b'{"t":"caf\\u00e9"}'  # Meta's bytes
    reserialised = '{"t":"café"}'.encode()
    verify_signature("k", escaped, sign("k", escaped))
    with pytest.raises(SignatureError):
        verify_signature("k", escaped, sign("k", reserialised))


@pytest.mark.parametrize("body", [b"", b"nope", b"\xff\xfe", b'{"a":'])
def test_parse_body_refuses_non_json(body):
    with pytest.raises(PayloadError, match="not valid JSON"):
        parse_body(body)


def _payload(field, value, account="WABA"):
    return {"object": "whatsapp_business_account", "entry": [{"id": account, "changes": [{"field": field,
                                                                                         "value": value}]}]}


def test_split_messages_and_statuses_into_keyed_events():
    value = {"metadata": {"phone_number_id": "PN"}, "contacts": [{"wa_id": "1"}],
             "messages": [{"id": "w1", "type": "text"}],
             "statuses": [{"id": "w2", "status": "read"}, {"id": "w2", "status": "failed", "errors": [{}]}]}
    events = split_payload(_payload("messages", value))
    assert [(e.dedup_key, e.kind, e.wamid, e.update_status) for e in events] == [
        ("m:w1", "message", "w1", None), ("s:w2:read", "status", "w2", "read"),
        ("s:w2:failed", "status", "w2", "failed")]
    assert all(e.phone_number_id == "PN" and e.account_id == "WABA" for e in events)
    assert events[0].payload == {"field": "messages", "value": {"metadata": {"phone_number_id": "PN"},
                                                                "contacts": [{"wa_id": "1"}],
                                                                "messages": [{"id": "w1", "type": "text"}]}}


def test_digest_key_ignores_key_order_but_not_content():
    a = split_payload(_payload("account_update", {"event": "X", "ban_info": {"state": "S", "date": "D"}}))[0]
    b = split_payload(_payload("account_update", {"ban_info": {"date": "D", "state": "S"}, "event": "X"}))[0]
    c = split_payload(_payload("account_update", {"event": "Y", "ban_info": {"state": "S", "date": "D"}}))[0]
    other_account = split_payload(_payload("account_update", {"event": "X", "ban_info": {"state": "S", "date": "D"}},
                                           account="OTHER"))[0]
    assert a.dedup_key == b.dedup_key
    assert len({a.dedup_key, c.dedup_key, other_account.dedup_key}) == 3
    assert a.kind == "change" and a.dedup_key.startswith("d:")


def test_call_statuses_are_not_mistaken_for_message_statuses():
    events = split_payload(_payload("calls", {"statuses": [{"id": "call-1", "status": "RINGING"}]}))
    assert [e.kind for e in events] == ["change"]


def test_an_item_without_id_is_kept_under_a_digest_key():
    events = split_payload(_payload("messages", {"messages": [{"type": "text"}]}))
    assert events[0].dedup_key.startswith("d:")


@pytest.mark.parametrize("payload, message", [
    ({"object": "page"}, "object must be"),
    ({"object": "whatsapp_business_account"}, "entry must be a list"),
    ({"object": "whatsapp_business_account", "entry": [1]}, "entry[0] must be an object"),
    ({"object": "whatsapp_business_account", "entry": [{"changes": {}}]}, "entry[0].changes must be a list"),
    ({"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "", "value": {}}]}]}, "field"),
    ({"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "x", "value": []}]}]}, "value"),
    (_payload("messages", {"statuses": [1]}), "statuses[0] must be an object"),
])
def test_split_refuses_broken_shapes(payload, message):
    with pytest.raises(PayloadError) as info:
        split_payload(payload)
    assert message in str(info.value)
