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


# --- poison: sanitizing, the fast check, the iterative JSON check (pure, property-based) ------------------------------

import json  # noqa: E402
import re  # noqa: E402

from hypothesis import example, given, settings, strategies as st  # noqa: E402

from tests.conftest import load_corpus, meta_body  # noqa: E402
from wa_outbox import webhooks  # noqa: E402
from wa_outbox.webhooks import events_of_body, is_json, sanitize  # noqa: E402

# Any text, lone surrogates and NUL included; emoji and accents too.
ANY_TEXT = st.text(st.one_of(st.characters(exclude_categories=()), st.sampled_from("\x00\ud800\udfff😀á\\\"")),
                   max_size=8)
ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4), max_leaves=20)


def storable(value) -> bool:
    """What Postgres' jsonb can hold: JSON without NaN/Infinity, UTF-8 without lone surrogates, no NUL."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return "\\u0000" not in text.replace("\\\\", "")


@given(ANY_VALUE)
def test_sanitize_makes_any_value_storable_and_is_idempotent(value):
    clean, changed = sanitize(value)
    assert storable(clean)
    assert sanitize(clean) == (clean, False)
    if storable(value):
        assert clean is value and not changed
    else:
        assert changed


@given(ANY_VALUE, st.booleans(), st.booleans())
@example({"t": "\ud83d\ude00 \\ud800"}, True, False)  # an escaped backslash before a surrogate-like text
def test_the_fast_checks_never_miss_what_the_walk_would_fix(value, ascii_only, upper_hex):
    body = json.dumps({"v": value}, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if upper_hex:
        body = re.sub(rb"\\u([0-9a-f]{4})", lambda m: b"\\u" + m.group(1).upper(), body)
    payload, numbers_kept_as_text = webhooks._parse(body)
    if not (numbers_kept_as_text or webhooks._may_hold_unstorable_chars(body)):
        assert sanitize(payload) == (payload, False)


def test_clean_bodies_skip_the_sanitizing_walk(monkeypatch):
    def no_walk(value):
        raise AssertionError("walked a clean body")
    monkeypatch.setattr(webhooks, "sanitize", no_walk)
    for name, payload in load_corpus().items():
        body = meta_body(payload)
        if b"\\ud" in body:  # emoji: the walk is allowed (and finds nothing)
            continue
        assert all(not e.raw_body for e in events_of_body(body)), name


JSON_SOUP = st.lists(st.sampled_from(['{', '}', '[', ']', ',', ':', '"a"', '"\\u00e9"', '"\\x"', '1', '-0.5e3',
                                      '01', 'true', 'nul', 'NaN', '-Infinity', ' ', '"', '\\']), max_size=14)


@given(st.one_of(JSON_SOUP.map("".join), st.text(max_size=10), ANY_VALUE.map(json.dumps)))
def test_is_json_agrees_with_pythons_parser(text):
    try:
        json.loads(text)
        parsed = True
    except ValueError:
        parsed = False
    assert is_json(text) == parsed


def test_is_json_follows_any_depth():
    assert is_json("[" * 100_000 + "]" * 100_000)
    assert is_json('{"a": ' * 50_000 + "1" + "}" * 50_000)
    assert not is_json("[" * 100_000 + "]" * 99_999)
    assert not is_json('{"a": ' * 50_000 + "1" + "}" * 49_999 + "]")


def _change(value: str) -> bytes:
    return b'{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"x","value":{"n":' + \
        value.encode() + b'}}]}]}'


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000, "-" + "9" * 5000])
def test_numbers_beyond_python_or_jsonb_are_kept_as_their_text(literal):
    [event] = events_of_body(_change(literal))
    assert event.payload["value"]["n"] == literal and type(event.payload["value"]["n"]) is str
    assert event.raw_body and storable(event.payload)


@pytest.mark.parametrize("literal", ["1e300", "-0.0", "12345678901234567890123", "5e-324", "1.5"])
def test_numbers_python_can_hold_stay_numbers(literal):
    [event] = events_of_body(_change(literal))
    assert event.payload["value"]["n"] == json.loads(literal) and not event.raw_body


@given(ANY_VALUE)
@settings(max_examples=200)
def test_events_of_any_body_are_storable_with_keys_stable_across_redeliveries(value):
    payload = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"messages": [{"id": value if isinstance(value, str) else "w", "x": value}]}},
        {"field": "other", "value": {"v": value}}]}]}
    body = json.dumps(payload).encode("utf-8", "surrogatepass")
    events = events_of_body(body)
    assert [e.dedup_key for e in events] == [e.dedup_key for e in events_of_body(body)]
    for event in events:
        assert storable([event.payload, event.dedup_key, event.field, event.wamid, event.account_id])
        assert len(event.dedup_key) <= webhooks.MAX_NATURAL_KEY_LENGTH


def test_a_body_too_deep_to_parse_becomes_one_dead_event_keyed_by_its_bytes():
    body = _change("[" * 10_000 + "]" * 10_000)
    [event] = events_of_body(body)
    assert event.dead_reason.startswith("cannot be processed: ") and event.raw_body
    assert event.dedup_key == "d:" + hashlib.sha256(body).hexdigest() and event.kind == "change"
    with pytest.raises(PayloadError, match="not valid JSON"):
        events_of_body(_change("[" * 10_000))
