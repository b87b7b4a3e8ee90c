"""Number health on real Postgres: phone_number_quality_update and account_update changes, stored as the receiver
stores them, are applied by the inbound worker (record_number_health.sql) to their senders: quality, tier,
throughput, flag, restrictions and ban; routed by business account and display number; an older change never undoes
a newer one; a sender set to follow Meta's throughput gets its rate_limits row changed; and it all shows on
`senders show`, /v1/senders and /metrics, with the change on the event stream."""

from __future__ import annotations

import json

import pytest

from tests.conftest import API_TOKEN
from wa_outbox import db as wa_db, queries
from wa_outbox.retry import RetryPolicy
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key
from wa_outbox.worker._inbound import InboundProcessor

BOX = SecretBox([generate_key()])
APP, WABA, OTHER_WABA = "1110001", "9010001", "9020002"
NUMBER, SECOND, ELSEWHERE = "5001001", "5001002", "5002001"


@pytest.fixture
def engine(database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def register(db, waba_id: str, phone_number_id: str, display: str | None) -> None:
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES (%s) ON CONFLICT DO NOTHING", (APP,))
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
               (waba_id, APP))
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, display_phone_number, token_enc, "
               "token_fingerprint) VALUES (%s, %s, %s, %s, %s)",
               (phone_number_id, waba_id, display, BOX.encrypt("token"), fingerprint("token")))


def store(db, field: str, value: dict, account: str = WABA, ago: float = 0.0) -> int:
    """A change as the receiver stores it (webhooks.py), received `ago` seconds ago."""
    payload = {"field": field, "value": value}
    return db.execute(
        "INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, account_id, payload, received_at) "
        "VALUES ('d:' || md5(%s || clock_timestamp()::text), %s, 'change', %s, %s, now() - %s * interval '1 second') "
        "RETURNING id", (json.dumps(payload), field, account, json.dumps(payload), ago)).fetchone()[0]


def process(engine) -> InboundProcessor:
    processor = InboundProcessor(engine, "in-1", [], RetryPolicy(0.01, 0.02, 3), 30.0)
    while processor.process_batch():
        pass
    return processor


def health(db, phone_number_id: str) -> dict | None:
    row = db.execute("SELECT to_jsonb(h) FROM wa_outbox.number_health h WHERE phone_number_id = %s",
                     (phone_number_id,)).fetchone()
    return row[0] if row else None


def quality(event: str, display: str = "15550001001", **more) -> dict:
    return {"display_phone_number": display, "event": event, **more}


@pytest.fixture
def numbers(db):
    register(db, WABA, NUMBER, "+1 555-000-1001")
    register(db, WABA, SECOND, "+1 555-000-1002")
    register(db, OTHER_WABA, ELSEWHERE, None)  # the only number of its account, no display number recorded


def test_a_quality_update_reaches_the_number_it_names_only(db, engine, numbers):
    store(db, "phone_number_quality_update", quality("FLAGGED", current_limit="TIER_10K"))
    store(db, "phone_number_quality_update", quality("UPGRADE", "15550009999", current_limit="TIER_100K"))
    process(engine)
    h = health(db, NUMBER)
    assert (h["quality_event"], h["quality_rating"], h["flagged"]) == ("FLAGGED", "RED", True)
    assert (h["messaging_limit_tier"], h["messaging_limit"]) == ("TIER_10K", 10000)
    assert health(db, SECOND) is None  # another number of the same account: not named
    done = db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE status = 'done'").fetchone()[0]
    assert done == 2  # the one for no registered number is done too, changing nothing


def test_the_accounts_only_number_takes_an_update_without_a_display_number_match(db, engine, numbers):
    store(db, "phone_number_quality_update", quality("THROUGHPUT_UPGRADE", "15557777777",
                                                     current_limit="TIER_UNLIMITED"), account=OTHER_WABA)
    process(engine)
    h = health(db, ELSEWHERE)
    assert (h["throughput_level"], h["throughput_mps"], h["messaging_limit_tier"]) == ("HIGH", 1000.0, None)


def test_an_unflag_keeps_the_tier_and_an_upgrade_keeps_the_flag(db, engine, numbers):
    store(db, "phone_number_quality_update", quality("FLAGGED", current_limit="TIER_1K"), ago=30)
    store(db, "phone_number_quality_update", quality("UPGRADE", current_limit="TIER_10K"), ago=20)
    process(engine)
    assert (health(db, NUMBER)["flagged"], health(db, NUMBER)["messaging_limit"]) == (True, 10000)
    store(db, "phone_number_quality_update", quality("UNFLAGGED"), ago=10)
    process(engine)
    h = health(db, NUMBER)
    assert (h["flagged"], h["quality_rating"], h["messaging_limit"]) == (False, "YELLOW", 10000)


def test_an_older_change_never_undoes_a_newer_one(db, engine, numbers):
    store(db, "phone_number_quality_update", quality("UNFLAGGED", quality_rating="GREEN"), ago=5)
    process(engine)
    store(db, "phone_number_quality_update", quality("FLAGGED"), ago=60)  # delivered late
    process(engine)
    h = health(db, NUMBER)
    assert (h["quality_rating"], h["flagged"]) == ("GREEN", False)


def test_account_updates_reach_every_number_of_the_account(db, engine, numbers):
    store(db, "account_update", {"event": "ACCOUNT_RESTRICTION", "restriction_info": [
        {"restriction_type": "RESTRICTED_BIZ_INITIATED_MESSAGING", "expiration": 4_000_000_000},
        {"restriction_type": "RESTRICTED_ADD_PHONE_NUMBER_ACTION", "expiration": 3_000_000_000}]}, ago=2)
    store(db, "account_update", {"event": "DISABLED_UPDATE",
                                 "ban_info": {"waba_ban_state": "DISABLE", "waba_ban_date": "April 17, 2025"}})
    process(engine)
    for number in (NUMBER, SECOND):
        h = health(db, number)
        assert h["account_event"] == "DISABLED_UPDATE" and h["ban_state"] == "DISABLE"
        assert len(h["restrictions"]) == 2 and h["restricted_until"].startswith("2096-")
    assert health(db, ELSEWHERE) is None
    metrics = {m.phone_number_id: m for m in queries.number_health_metrics(engine)}
    assert metrics[NUMBER].restricted and metrics[NUMBER].banned


def test_a_restriction_that_has_expired_is_no_longer_restricted(db, engine, numbers):
    store(db, "account_update", {"event": "ACCOUNT_RESTRICTION", "restriction_info": [
        {"restriction_type": "RESTRICTED_BIZ_INITIATED_MESSAGING", "expiration": 1_641_330_498}]})
    process(engine)
    assert not {m.phone_number_id: m for m in queries.number_health_metrics(engine)}[NUMBER].restricted


def test_garbage_values_change_nothing_and_fail_nothing(db, engine, numbers):
    store(db, "phone_number_quality_update", {"display_phone_number": ["x"], "event": 7, "current_limit": {}})
    store(db, "account_update", {"event": "ACCOUNT_RESTRICTION", "restriction_info": "soon"})
    process(engine)
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE status <> 'done'").fetchone()[0] == 0


def test_a_number_that_follows_meta_gets_its_new_throughput_as_its_pacing(db, engine, numbers):
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, tokens) VALUES (%s, 80, 1), (%s, 80, 1)",
               (NUMBER, SECOND))
    assert queries.number_health_follow(engine, phone_number_id=NUMBER, follow=True)[0].paced_mps is None
    assert queries.number_health_follow(engine, phone_number_id="404", follow=True) == []
    for display in ("15550001001", "15550001002"):
        store(db, "phone_number_quality_update", quality("THROUGHPUT_UPGRADE", display,
                                                         current_limit="TIER_UNLIMITED"))
    process(engine)
    rates = dict(db.execute("SELECT phone_number_id, mps FROM wa_outbox.rate_limits").fetchall())
    assert rates == {NUMBER: 1000.0, SECOND: 80.0}  # the second keeps its rate: it does not follow Meta
    # turned on later, with the throughput already known: at once
    assert queries.number_health_follow(engine, phone_number_id=SECOND, follow=True)[0].paced_mps == 1000.0
    assert db.execute("SELECT mps FROM wa_outbox.rate_limits WHERE phone_number_id = %s",
                      (SECOND,)).fetchone()[0] == 1000.0


def test_the_change_is_on_the_event_stream_and_the_senders_fields(app, client, db, engine, numbers):
    event_id = store(db, "phone_number_quality_update", quality("FLAGGED", current_limit="TIER_1K"))
    process(engine)
    data = db.execute("SELECT data FROM wa_outbox.events WHERE type = 'phone_number.quality'").fetchone()[0]
    assert data["webhook_event_id"] == event_id and data["value"]["event"] == "FLAGGED"
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    one = client.get(f"/v1/senders/{NUMBER}", headers=auth).get_json()
    assert (one["quality_rating"], one["flagged"], one["messaging_limit"], one["restricted"]) == \
        ("RED", True, 1000, False)
    listed = {s["phone_number_id"]: s for s in client.get("/v1/senders", headers=auth).get_json()["senders"]}
    assert listed[SECOND]["quality_rating"] is None and listed[SECOND]["follow_meta_throughput"] is False
    text = client.get("/metrics").get_data(as_text=True)
    assert f'wa_outbox_sender_quality{{phone_number_id="{NUMBER}"}} 1.0' in text
    assert f'wa_outbox_sender_flagged{{phone_number_id="{NUMBER}"}} 1.0' in text
    assert f'wa_outbox_sender_restricted{{phone_number_id="{NUMBER}"}} 0.0' in text


def test_senders_set_and_show_on_the_command_line(db, engine, numbers, run):
    store(db, "phone_number_quality_update", quality("THROUGHPUT_UPGRADE", current_limit="TIER_UNLIMITED"))
    store(db, "phone_number_quality_update", quality("FLAGGED", current_limit="TIER_1K"))
    process(engine)
    result = run("senders", "set", NUMBER, "--follow-meta-throughput")
    assert result.exit_code == 0 and "follows Meta's throughput" in result.output
    assert db.execute("SELECT mps FROM wa_outbox.rate_limits WHERE phone_number_id = %s",
                      (NUMBER,)).fetchone()[0] == 1000.0
    shown = json.loads(run("senders", "show", NUMBER, "--json").output)
    assert (shown["quality_rating"], shown["flagged"], shown["throughput_level"], shown["follow_meta_throughput"],
            shown["mps"]) == ("RED", True, "HIGH", True, 1000.0)
    text = run("senders", "show", NUMBER).output
    assert "quality_rating: RED" in text and "messaging_limit_tier: TIER_1K" in text
    listed = run("senders", "list").output.splitlines()
    header = listed[0].split("\t")
    assert "quality_rating" in header and "follow_meta_throughput" in header
    refused = run("senders", "set", "404")
    assert refused.exit_code != 0  # the flag is required
    missing = run("senders", "set", "404", "--no-follow-meta-throughput")
    assert missing.exit_code != 0 and "no sender 404" in missing.output


def test_follow_meta_over_http(client, db, numbers):
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    r = client.patch(f"/v1/senders/{NUMBER}", json={"follow_meta_throughput": True}, headers=auth)
    assert r.status_code == 200 and r.get_json()["follow_meta_throughput"] is True
    bad = client.patch(f"/v1/senders/{NUMBER}", json={"follow_meta_throughput": "yes"}, headers=auth)
    assert bad.status_code == 400 and "error" in bad.get_json()
    assert client.patch("/v1/senders/404", json={"follow_meta_throughput": False}, headers=auth).status_code == 404
    assert db.execute("SELECT follow_meta_throughput FROM wa_outbox.number_health WHERE phone_number_id = %s",
                      (NUMBER,)).fetchone()[0] is True


def test_a_drop_in_rating_is_counted_until_it_rises_again(client, db, engine, numbers):
    def dropped() -> dict[str, bool]:
        return {m.phone_number_id: m.quality_dropped for m in queries.number_health_metrics(engine)}
    store(db, "phone_number_quality_update", quality("UNFLAGGED", quality_rating="GREEN"), ago=30)
    process(engine)
    assert dropped() == {NUMBER: False}  # a first rating is no drop
    store(db, "phone_number_quality_update", quality("FLAGGED"), ago=20)
    process(engine)
    assert dropped() == {NUMBER: True}
    text = client.get("/metrics").get_data(as_text=True)
    assert "wa_outbox_senders_quality_dropped 1.0" in text and "wa_outbox_senders_flagged 1.0" in text
    assert "wa_outbox_senders_restricted 0.0" in text and "wa_outbox_senders_banned 0.0" in text
    store(db, "phone_number_quality_update", quality("UPGRADE", current_limit="TIER_10K"), ago=10)
    process(engine)
    assert dropped() == {NUMBER: True}  # a tier change says nothing of the rating
    store(db, "phone_number_quality_update", quality("UNFLAGGED"), ago=5)
    process(engine)
    assert dropped() == {NUMBER: False}


def test_the_ops_pages_senders_table_shows_each_numbers_health(client, db, engine, numbers):
    from tests.db.test_ops import _login
    store(db, "phone_number_quality_update", quality("FLAGGED", current_limit="TIER_10K", quality_rating="RED"))
    store(db, "account_update", {"event": "ACCOUNT_RESTRICTION", "restriction_info": [
        {"restriction_type": "RESTRICTED_BIZ_INITIATED_MESSAGING", "expiration": 4_000_000_000}]}, OTHER_WABA)
    process(engine)
    _login(client)
    page = client.get("/ops").get_data(as_text=True)

    def health_cell(number: str) -> str:
        row = page[page.index(f'<tr data-sender="{number}">'):]
        row = row[:row.index("</tr>")]
        return row[row.index('<td class="health">'):]

    flagged = health_cell(NUMBER)
    assert "quality-red" in flagged and "flagged" in flagged and "TIER_10K" in flagged
    assert "restricted" not in flagged
    restricted = health_cell(ELSEWHERE)
    assert "restricted</span> until 2096-" in restricted and "flagged" not in restricted
    assert health_cell(SECOND).split(">", 1)[1].strip().startswith("—")  # nothing heard of it
