"""The ops page's pure parts (wa_outbox/ops.py, messages.format_phone, ops_views.dev_login_hint): outcome series and
rates per sender, queue labels, the workers' activity in words, phone numbers as the CLI prints them, the login
page's development hint. No database."""

from __future__ import annotations

import dataclasses
import datetime

from wa_outbox import ops
from wa_outbox.config import DEV_API_TOKEN, Settings
from wa_outbox.messages import format_phone
from wa_outbox.queries import SenderMinute

T0 = datetime.datetime(2026, 1, 1, 10, 0, tzinfo=datetime.UTC)
MINUTES = [T0 + datetime.timedelta(minutes=i) for i in range(3)]


def _row(sender: str, minute: int, sent=0, delivered=0, read=0, failed=0, dead=0, alias=None) -> SenderMinute:
    return SenderMinute(phone_number_id=sender, alias=alias, display_phone_number=None,
                        minute=T0 + datetime.timedelta(minutes=minute), sent=sent, delivered=delivered, read=read,
                        failed=failed, dead=dead)


def test_outcome_series_fills_every_minute_per_sender_and_totals_add_them_up():
    rows = [_row("2", 0, sent=4, delivered=3), _row("1", 2, sent=1, dead=2, alias="brand-a"),
            _row("2", 2, read=3, failed=1), _row("2", 9, sent=100)]  # minute 9 is outside the axis: dropped
    senders = ops.outcome_series(rows, MINUTES)
    assert [s.phone_number_id for s in senders] == ["1", "2"]
    one, two = senders
    assert one.alias == "brand-a" and one.series["dead"] == [0, 0, 2] and one.series["sent"] == [0, 0, 1]
    assert two.series == {"sent": [4, 0, 0], "delivered": [3, 0, 0], "read": [0, 0, 3], "failed": [0, 0, 1],
                          "dead": [0, 0, 0]}
    assert two.total("sent") == 4 and two.delivery_rate == 0.75 and two.read_rate == 1.0
    totals = ops.outcome_totals(senders, len(MINUTES))
    assert totals["sent"] == [4, 0, 1] and totals["dead"] == [0, 0, 2] and totals["read"] == [0, 0, 3]
    assert ops.outcome_series([], MINUTES) == [] and ops.outcome_totals([], 2)["sent"] == [0, 0]


def test_rate_is_a_fraction_capped_at_one_and_none_without_a_whole():
    assert ops.rate(1, 4) == 0.25
    assert ops.rate(5, 4) == 1.0  # delivered in the hour, sent before it
    assert ops.rate(3, 0) is None and ops.rate(0, 0) is None


def test_queues_are_named_as_an_operator_says_them():
    assert ops.queue_label("notifications") == "outbound"
    assert ops.queue_label("webhook_events") == "inbound"
    assert ops.queue_label("some_new_queue") == "some new queue"


def test_worker_activity_reads_as_words_per_area_and_keeps_unknown_counters():
    info = {"in_flight": 7, "claimed": 50, "sent": 42, "retry": 3, "dead": 0, "unknown": 1, "throttled": 0,
            "released": 0, "inbound_processed": 1200, "inbound_statuses": 900, "inbound_messages": 300,
            "inbound_failed": 0, "inbound_dead": 0, "inbound_unrecognized_statuses": 0, "inbound_lease_lost": 0,
            "deliveries_in_flight": 0, "deliveries_delivered": 12, "deliveries_gone": 1, "media_fetched": 5}
    lines = ops.worker_activity(info)
    assert [(a.area, a.parts) for a in lines] == [
        ("outbound messages", ("7 in flight", "50 claimed", "42 sent", "3 retried", "1 unknown (reconciling)")),
        ("inbound webhooks", ("1,200 processed", "900 statuses", "300 messages")),
        ("pushes to endpoints", ("0 in flight", "12 delivered", "1 gone (410)")),
        ("other", ("media fetched 5",)),  # a counter a newer worker reports: shown, in words
    ]
    assert ops.worker_activity({}) == []
    idle = ops.worker_activity({"in_flight": 0, "sent": 0, "retry": 0})
    assert [(a.area, a.parts) for a in idle] == [("outbound messages", ("0 in flight", "0 sent"))]


def test_phone_numbers_are_printed_with_their_plus_as_the_cli_prints_them():
    assert format_phone("5511987654321") == "+5511987654321"
    assert format_phone("+1 555-0100") == "+1 555-0100"  # a display number Meta formatted: as it is
    assert format_phone(None) == "" and format_phone("") == ""
    assert format_phone("٥٥١١") == "٥٥١١"  # digits of another script are not a stored number


def test_the_login_hint_names_only_the_development_token():
    from wa_outbox.web.ops_views import dev_login_hint
    settings = Settings.from_env({})
    assert dev_login_hint(dataclasses.replace(settings, api_tokens=(DEV_API_TOKEN,))) is None  # not `dev`
    dev = dataclasses.replace(settings, dev=True)
    assert dev_login_hint(dataclasses.replace(dev, api_tokens=(DEV_API_TOKEN,))) == DEV_API_TOKEN
    configured = "a-configured-secret-token-1234"
    hint = dev_login_hint(dataclasses.replace(dev, api_tokens=(configured,)))
    assert hint == "" and configured not in hint  # "it came from your environment", never its value
    assert Settings.from_env({"WA_OUTBOX_DEV": "true"}).dev and not Settings.from_env({}).dev


def test_metrics_skip_a_process_file_still_being_created(tmp_path):
    """A gunicorn worker process's metric file read between its creation and its sizing (empty) made the stock
    multiprocess collector raise, and /metrics answer 500; it is skipped for that scrape, the others are served."""
    import struct

    import pytest
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    from wa_outbox.web import MultiProcessFiles

    written = MmapedDict(str(tmp_path / "counter_101.db"))
    written.write_value(mmap_key("wa_outbox_probe_total", "wa_outbox_probe_total", [], [], "a probe"), 3.0, 0.0)
    written.close()
    (tmp_path / "counter_102.db").write_bytes(b"")  # another process's, created a moment ago
    with pytest.raises(struct.error):  # what the stock collector does
        list(MultiProcessCollector.merge([str(p) for p in tmp_path.glob("*.db")]))
    families = {f.name: f for f in MultiProcessFiles(str(tmp_path)).collect()}
    assert [s.value for s in families["wa_outbox_probe_total"].samples] == [3.0]
