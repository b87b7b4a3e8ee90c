"""The events' pure parts: the cursor, the type tables, the feed's parameters, the long polls' waiting slots."""

from __future__ import annotations

import dataclasses

import pytest

from wa_outbox import events as ev
from wa_outbox.config import Settings
from wa_outbox.event_notices import EventNotices
from wa_outbox.states import EventType, TimelineEvent


@pytest.mark.parametrize("txid, seq", [(0, 0), (741, 12), (10 ** 18 - 1, 10 ** 18 - 1)])
def test_cursors_round_trip(txid, seq):
    assert ev.decode_cursor(ev.encode_cursor(txid, seq)) == (txid, seq)


@pytest.mark.parametrize("bad", ["", "x", "1-", "-1", "1-2-3", " 1-2", "1-2 ", "1_2", "1-2\x00", "９-1",
                                 "1" * 19 + "-1", "1-" + "1" * 19, "evt_12"])
def test_what_is_no_cursor_is_refused(bad):
    with pytest.raises(ev.CursorError, match="not a cursor"):
        ev.decode_cursor(bad)
    assert issubclass(ev.CursorError, ev.FeedError)


def test_every_mapped_field_is_an_event_type_and_other_fields_are_webhook_other():
    assert set(ev.FIELD_EVENT_TYPES.values()) <= set(EventType)
    assert len(set(ev.FIELD_EVENT_TYPES.values())) == len(ev.FIELD_EVENT_TYPES)  # one type per field
    assert ev.event_type_of("message_template_status_update") is EventType.TEMPLATE_STATUS
    assert ev.event_type_of("group_settings_update") is EventType.WEBHOOK_OTHER
    # every type but the inbound messages', the statuses', media's and the catch-all comes from exactly one field
    assert set(EventType) - set(ev.FIELD_EVENT_TYPES.values()) == {
        EventType.MESSAGE_RECEIVED, EventType.MESSAGE_STATUS, EventType.MESSAGE_ECHO, EventType.MEDIA_READY,
        EventType.WEBHOOK_OTHER}


def test_status_transitions_are_timeline_words():
    assert set(ev.STATUS_TRANSITIONS) <= set(TimelineEvent)
    assert ev.STATUS_TRANSITIONS[TimelineEvent.RECONCILED] == "sent"
    assert TimelineEvent.SENDING not in ev.STATUS_TRANSITIONS and TimelineEvent.REQUEUED not in ev.STATUS_TRANSITIONS


def test_types_are_parsed_and_unknown_ones_refused():
    assert ev.parse_types(None) is None and ev.parse_types(" ") is None
    assert ev.parse_types("message.received, call,") == ["message.received", "call"]
    with pytest.raises(ev.FeedError, match="unknown event type"):
        ev.parse_types("message.received,message.nope")


def test_a_quarter_of_the_web_threads_may_wait_at_once():
    notices = EventNotices(dataclasses.replace(Settings(), web_threads=8))
    with notices.waiting_slot() as first, notices.waiting_slot() as second, notices.waiting_slot() as third:
        assert (first, second, third) == (True, True, False)
        assert notices.waiting == 2
    assert notices.waiting == 0
    with notices.waiting_slot() as again:
        assert again


def test_the_envelopes_timestamp_is_utc_whatever_the_connections_time_zone():
    from datetime import datetime, timedelta, timezone
    at = datetime(2026, 12, 2, 5, 47, 15, 603626, tzinfo=timezone(timedelta(hours=3)))
    assert ev.envelope(1, "call", at, {"schema_version": 1}) == {
        "id": "evt_1", "type": "call", "timestamp": "2026-12-02T02:47:15.603626+00:00", "data": {"schema_version": 1}}
    assert ev.envelope_bytes(1, "call", at, {}) == (b'{"id":"evt_1","type":"call",'
                                                     b'"timestamp":"2026-12-02T02:47:15.603626+00:00","data":{}}')


def test_the_listeners_line_says_what_a_long_event_says_before_its_data_is_cut():
    from wa_outbox.listener import line
    data = {"schema_version": 1, "account_id": "1" * 15, "app_id": None, "dedup_key": "m:wamid." + "A" * 80,
            "contact": {"profile": {"name": "Ana"}, "wa_id": "5511987654321"}, "phone_number_id": "1" * 15,
            "message": {"from": "5511987654321", "id": "wamid.x", "type": "text", "text": {"body": "Oi, chegou? ✓"}}}
    printed = line(ev.envelope(7, "message.received", ev.datetime.now(ev.UTC), data))
    assert " evt_7  text from +5511987654321: 'Oi, chegou? ✓'  {" in printed and printed.endswith("…")
    status = {"schema_version": 1, "outbox_id": 42, "status": "read", "recipient": "5511987654321"}
    assert "outbox 42 read (to +5511987654321)" in line(ev.envelope(8, "message.status", ev.datetime.now(ev.UTC),
                                                                    status))
