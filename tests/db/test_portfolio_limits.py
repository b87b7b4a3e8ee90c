"""Meta's messaging limit per business portfolio, in Postgres: the rules SQL and Python share (one set of cases for
both), the claim's budget (who takes a unit, who is held and until when, who is never held), setting a limit and
releasing what it held, and the portfolios' figures."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from wa_outbox import db as wdb, portfolios
from wa_outbox.accounts import AccountNotFound, InvalidAccount
from wa_outbox.config import Settings
from wa_outbox.messaging_limit import counts_against_limit, next_unit_frees
from wa_outbox.worker._sender import claim_pacing

PORTFOLIO = "7000001"
WABA = "901"
SENDER = "5001"
OTHER = "5002"  # a second number of the same portfolio (another WABA)
TEMPLATE = {"type": "template", "template": {"name": "promo", "language": {"code": "en"}}}
TEXT = {"type": "text", "text": {"body": "hi"}}
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)

# (is_template, last_inbound_at, counted_at, counts): at T0
COUNT_CASES = [
    (True, None, None, True),                     # a template to a new customer
    (False, None, None, False),                   # not a template: never counts
    (True, T0 - 1 * H, None, False),              # the customer wrote an hour ago: the window is open
    (True, T0 - 24 * H, None, False),             # wrote exactly 24 hours ago: still open (as the window rule)
    (True, T0 - 25 * H, None, True),
    (True, None, T0 - 23 * H, False),             # counted 23 hours ago: already counted
    (True, None, T0 - 24 * H, True),              # counted 24 hours ago: that unit freed, counts again
    (None, None, None, False),
]
FREES_CASES = [(T0 - 20 * H, T0, T0 + 4 * H), (None, T0, T0 + 24 * H)]


@pytest.mark.parametrize("is_template,inbound,counted,expected", COUNT_CASES)
def test_who_counts_is_one_rule_in_sql_and_python(db, is_template, inbound, counted, expected):
    assert counts_against_limit(is_template, inbound, counted, T0) is expected
    sql = db.execute("SELECT wa_outbox.counts_against_limit(%s, %s, %s, %s)",
                     (is_template, inbound, counted, T0)).fetchone()[0]
    assert sql is expected


@pytest.mark.parametrize("oldest,at,expected", FREES_CASES)
def test_when_the_next_unit_frees_is_one_rule_in_sql_and_python(db, oldest, at, expected):
    assert next_unit_frees(oldest, at) == expected
    assert db.execute("SELECT wa_outbox.next_unit_frees(%s, %s)", (oldest, at)).fetchone()[0] == expected


@pytest.fixture
def engine(database_url):
    engine = wdb.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def register(db) -> None:
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id, portfolio_id) VALUES (%s, '111', %s), "
               "('902', '111', %s)", (WABA, PORTFOLIO, PORTFOLIO))
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref) VALUES (%s, %s, 'T'), "
               "(%s, '902', 'T')", (SENDER, WABA, OTHER))


def queue(db, recipient: str, message: dict = TEMPLATE, sender: str = SENDER) -> int:
    return db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
                      "VALUES (%s, %s, %s, '') RETURNING id", (sender, recipient, json.dumps(message))).fetchone()[0]


def claim(db, limit: int = 100) -> list[tuple]:
    return db.cursor().execute(wdb.query("claim_notifications"), {
        "limit": limit, "worker_id": "w", "lease_seconds": 60, "default_mps": 1000,
        **claim_pacing(Settings(pair_rate_seconds=0.0, pair_burst=1000, service_window="off"))}).fetchall()


def state(db, nid: int) -> tuple:
    return db.execute("SELECT status, hold_reason, attempts, next_attempt_at FROM wa_outbox.notifications "
                      "WHERE id = %s", (nid,)).fetchone()


def test_no_limit_nothing_is_counted_or_held(db):
    register(db)
    ids = [queue(db, f"55119000000{i:02d}") for i in range(5)]
    assert len(claim(db)) == 5
    assert db.execute("SELECT count(*) FROM wa_outbox.portfolio_units").fetchone()[0] == 0
    assert all(state(db, i)[0] == "sending" for i in ids)


def test_the_budget_holds_new_customers_over_the_limit_and_never_a_reply_or_a_counted_customer(db, engine):
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=3)
    # a customer counted an hour ago, one who wrote an hour ago (their window is open)
    db.execute("INSERT INTO wa_outbox.portfolio_units (portfolio_id, wa_id, counted_at) "
               "VALUES (%s, '5511800000001', now() - interval '1 hour')", (PORTFOLIO,))
    db.execute("UPDATE wa_outbox.portfolios SET used = 1")
    db.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, last_inbound_at) "
               "VALUES (%s, '5511800000002', now() - interval '1 hour'), "
               "(%s, '5511800000003', now() - interval '2 hours')", (SENDER, SENDER))
    counted = queue(db, "5511800000001")
    reply = queue(db, "5511800000002", TEXT)
    template_in_window = queue(db, "5511800000003")
    new = [queue(db, f"55119000000{i:02d}", sender=SENDER if i % 2 else OTHER) for i in range(4)]
    again = queue(db, "5511900000000")  # a second message to the first new customer
    claimed = {row[0] for row in claim(db)}
    # 2 units left: the first two new customers (and the second message of the first), the others held
    assert claimed == {counted, reply, template_in_window, new[0], new[1], again}
    for nid in new[2:]:
        status, reason, attempts, until = state(db, nid)
        assert (status, reason, attempts) == ("queued", "messaging_limit", 0)
        oldest = db.execute("SELECT min(counted_at) FROM wa_outbox.portfolio_units").fetchone()[0]
        assert until == oldest + timedelta(hours=24)
    events = db.execute("SELECT notification_id, detail->>'reason' FROM wa_outbox.notification_events "
                        "WHERE event = 'limit_held' ORDER BY notification_id").fetchall()
    assert events == [(new[2], "messaging_limit"), (new[3], "messaging_limit")]
    shown = portfolios.portfolio(engine, PORTFOLIO)
    assert (shown.messaging_limit, shown.used, shown.remaining, shown.held) == (3, 3, 0, 2)
    assert db.execute("SELECT used FROM wa_outbox.portfolios").fetchone()[0] == 3

    # a raised limit releases them at once; the next claim sends them
    row, released = portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=2000)
    assert released == 2 and row.held == 0 and row.remaining == 2000 - 3
    assert {r[0] for r in claim(db)} == set(new[2:])
    assert portfolios.portfolio(engine, PORTFOLIO).used == 5


def test_freed_units_go_and_an_expired_customer_counts_again(db, engine):
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=1)
    db.execute("INSERT INTO wa_outbox.portfolio_units (portfolio_id, wa_id, counted_at) "
               "VALUES (%s, '5511900000001', now() - interval '25 hours')", (PORTFOLIO,))
    db.execute("UPDATE wa_outbox.portfolios SET used = 1")  # as a claim 25 hours ago left it
    nid = queue(db, "5511900000001")
    assert [r[0] for r in claim(db)] == [nid]
    units = db.execute("SELECT wa_id, counted_at > now() - interval '1 minute' FROM wa_outbox.portfolio_units"
                       ).fetchall()
    assert units == [("5511900000001", True)]
    assert db.execute("SELECT used FROM wa_outbox.portfolios").fetchone()[0] == 1


def test_a_limit_of_unlimited_clears_it_and_bad_limits_are_refused(db, engine):
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit="250")
    row, _ = portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit="unlimited")
    assert row.messaging_limit is None and row.remaining is None
    for bad in ("-1", "lots", True, 1.5, -3):
        with pytest.raises(InvalidAccount):
            portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=bad)
    with pytest.raises(InvalidAccount):
        portfolios.set_limit(engine, portfolio_id="abc", messaging_limit=10)
    with pytest.raises(AccountNotFound):
        portfolios.set_limit(engine, portfolio_id="999", messaging_limit=10)
    assert db.execute("SELECT portfolio_id FROM wa_outbox.portfolios").fetchall() == [(PORTFOLIO,)]


# --- the portfolios CLI and /v1/portfolios --------------------------------------------------------------------------

def test_the_cli_sets_lists_and_shows_a_limit(db, run):
    register(db)
    done = run("portfolios", "set", PORTFOLIO, "--messaging-limit", "250")
    assert done.exit_code == 0, done.output
    assert "messaging limit 250" in done.output
    listed = run("portfolios", "list")
    assert listed.exit_code == 0 and listed.output.splitlines()[0].startswith("portfolio_id\tmessaging_limit")
    assert listed.output.splitlines()[1].split("\t")[:4] == [PORTFOLIO, "250", "0", "250"]
    shown = run("portfolios", "show", PORTFOLIO, "--json")
    row = json.loads(shown.output)
    assert (row["messaging_limit"], row["used"], row["remaining"], row["held"], row["limit_source"]) == \
        (250, 0, 250, 0, "operator")
    assert sorted(row["senders"]) == [SENDER, OTHER]
    cleared = run("portfolios", "set", PORTFOLIO, "--messaging-limit", "unlimited", "--json")
    assert json.loads(cleared.output)["messaging_limit"] is None
    for args, code in ((("set", PORTFOLIO, "--messaging-limit", "many"), 2),
                       (("set", "12x", "--messaging-limit", "5"), 2),
                       (("show", "424242"), 1), (("set", "424242", "--messaging-limit", "5"), 1)):
        refused = run("portfolios", *args)
        assert refused.exit_code == code, refused.output
        assert "Traceback" not in refused.output
    assert db.execute("SELECT messaging_limit FROM wa_outbox.portfolios").fetchall() == [(None,)]
    # at its limit with messages waiting: used, remaining and held, in list (TSV and JSON) and show
    assert run("portfolios", "set", PORTFOLIO, "--messaging-limit", "1").exit_code == 0
    for i in range(3):
        queue(db, f"55119000000{i:02d}")
    claim(db)
    [row] = [json.loads(line) for line in run("portfolios", "list", "--json").output.splitlines()]
    assert (row["messaging_limit"], row["used"], row["remaining"], row["held"], row["queued"]) == (1, 1, 0, 2, 2)
    assert row["next_unit_frees_at"]
    tsv = dict(zip(*[line.split("\t") for line in run("portfolios", "list").output.splitlines()], strict=True))
    assert (tsv["used_24h"], tsv["remaining"], tsv["held_by_limit"]) == ("1", "0", "2")
    text = run("portfolios", "show", PORTFOLIO).output
    assert "1 customers counted, 0 left; the oldest unit frees at" in text and "2 held by the limit" in text


def test_v1_portfolios(db, client):
    from tests.conftest import API_TOKEN
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    register(db)
    assert client.get("/v1/portfolios").status_code == 401
    put = client.put(f"/v1/portfolios/{PORTFOLIO}", json={"messaging_limit": 2000}, headers=auth)
    assert put.status_code == 200, put.get_data(as_text=True)
    assert (put.json["messaging_limit"], put.json["remaining"], put.json["released"]) == (2000, 2000, 0)
    patch = client.patch(f"/v1/portfolios/{PORTFOLIO}", json={"messaging_limit": "unlimited"}, headers=auth)
    assert patch.status_code == 200 and patch.json["messaging_limit"] is None
    assert [p["portfolio_id"] for p in client.get("/v1/portfolios", headers=auth).json["portfolios"]] == [PORTFOLIO]
    assert client.get(f"/v1/portfolios/{PORTFOLIO}", headers=auth).json["used"] == 0
    for body, status in (({"messaging_limit": -5}, 400), ({"messaging_limit": "x"}, 400), ({}, 400),
                         ({"messaging_limit": 5, "other": 1}, 400), (["x"], 400)):
        r = client.put(f"/v1/portfolios/{PORTFOLIO}", json=body, headers=auth)
        assert r.status_code == status and "error" in r.json, (body, r.get_data(as_text=True))
    assert client.get("/v1/portfolios/999", headers=auth).status_code == 404
    assert client.put("/v1/portfolios/abc", json={"messaging_limit": 5}, headers=auth).status_code == 400
    assert client.put("/v1/portfolios/999", json={"messaging_limit": 5}, headers=auth).status_code == 404


# --- business_capability_update -------------------------------------------------------------------------------------

def capability(value: dict, waba: str = WABA) -> dict:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": waba, "time": 1749416383,
                       "changes": [{"field": "business_capability_update", "value": value}]}]}


def registered_with_secret(db) -> None:
    import os

    from tests.conftest import APP_SECRET
    from wa_outbox.secret_box import fingerprint
    os.environ["WA_OUTBOX_TEST_APP_SECRET"] = APP_SECRET
    register(db)
    db.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_ref, fingerprint) "
               "VALUES ('111', 'WA_OUTBOX_TEST_APP_SECRET', %s)", (fingerprint(APP_SECRET),))


def test_a_capability_webhook_sets_the_limit_releases_held_messages_and_is_an_event(app, client, db, engine):
    from tests.conftest import post_webhook
    from wa_outbox.retry import RetryPolicy
    from wa_outbox.worker._inbound import InboundProcessor
    registered_with_secret(db)
    app.extensions["wa_outbox.registry"].reload()
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=1)
    ids = [queue(db, f"55119000000{i:02d}") for i in range(3)]
    claim(db)
    assert [state(db, i)[1] for i in ids] == [None, "messaging_limit", "messaging_limit"]
    value = {"max_daily_conversation_per_phone": 2000, "max_daily_conversations_per_business": 2000,
             "max_phone_numbers_per_business": 2}
    assert post_webhook(client, capability(value)).status_code == 200
    # one for a WABA wa-outbox does not know, one without a limit: done, nothing changes
    assert post_webhook(client, capability({"max_phone_numbers_per_business": 20})).status_code == 200
    processor = InboundProcessor(engine, "in-1", [], RetryPolicy(0.01, 0.02, 3), 30.0)
    assert processor.process_batch() == 2
    row = portfolios.portfolio(engine, PORTFOLIO)
    assert (row.messaging_limit, row.limit_source, row.held) == (2000, "webhook", 0)
    assert [state(db, i)[1] for i in ids] == [None, None, None]
    released = db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'released' "
                          "AND detail->>'reason' = 'messaging_limit_raised'").fetchone()[0]
    assert released == 2
    assert {r[0] for r in claim(db)} == set(ids[1:])
    events = db.execute("SELECT data->>'account_id', data->'value' FROM wa_outbox.events "
                        "WHERE type = 'business.capability' ORDER BY seq").fetchall()
    assert events == [(WABA, value), (WABA, {"max_phone_numbers_per_business": 20})]
    statuses = db.execute("SELECT status, last_error FROM wa_outbox.webhook_events "
                          "WHERE field = 'business_capability_update'").fetchall()
    assert statuses == [("done", None), ("done", None)]
    # "unlimited" in a webhook clears it
    assert post_webhook(client, capability({"max_daily_conversations_per_business": "UNLIMITED"})).status_code == 200
    assert processor.process_batch() == 1
    assert portfolios.portfolio(engine, PORTFOLIO).messaging_limit is None


# --- campaigns at the limit -----------------------------------------------------------------------------------------

def test_campaign_dry_run_and_show_say_who_counts_what_is_left_and_when_it_finishes(db, engine, run, client, tmp_path):
    from tests.conftest import API_TOKEN
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=3)
    # one recipient wrote an hour ago (their window is open): they will not count
    db.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, last_inbound_at) "
               "VALUES (%s, '5511900000000', now() - interval '1 hour')", (SENDER,))
    path = tmp_path / "list.csv"
    path.write_text("to\n" + "".join(f"+55119000000{i:02d}\n" for i in range(5)))
    args = ("campaign", "import", str(path), "--name", "promo", "--template", "promo", "--lang", "en",
            "--phone-number-id", SENDER)
    dry = run(*args, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "dry run, nothing written" in dry.output
    assert f"4 of 5 recipients will count against portfolio {PORTFOLIO}'s 3 (it has 3 left; 1 wait" in dry.output
    # and when it finishes: the fourth waits for the first of the three units it takes now to free, 24 hours on
    finish = re.search(r"finishes (\S+ \S+) UTC at the earliest at this limit", dry.output)
    assert finish, dry.output
    assert abs(datetime.fromisoformat(finish[1]).replace(tzinfo=UTC) - (datetime.now(UTC) + timedelta(hours=24))) \
        < timedelta(minutes=5)
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM wa_outbox.campaigns").fetchone()[0] == 0
    assert run(*args).exit_code == 0
    shown = json.loads(run("campaign", "show", "promo", "--json").output)["messaging_limit"]
    assert {k: shown[k] for k in ("portfolio_id", "messaging_limit", "remaining", "recipients", "counting",
                                  "held_until_units_free", "finishes_never")} == \
        {"portfolio_id": PORTFOLIO, "messaging_limit": 3, "remaining": 3, "recipients": 5, "counting": 4,
         "held_until_units_free": 1, "finishes_never": False}
    assert "4 of 5 recipients will count" in run("campaign", "show", "promo").output
    api = client.get("/v1/campaigns/promo", headers={"Authorization": f"Bearer {API_TOKEN}"})
    assert api.status_code == 200 and api.json["messaging_limit"]["counting"] == 4
    assert (api.json["messaging_limit"]["remaining"], api.json["messaging_limit"]["finishes_never"]) == (3, False)
    assert api.json["messaging_limit"]["finishes_at"]
    # claimed: 3 take the units (and the one in its window goes), 1 held; the figures follow
    claim(db)
    shown = json.loads(run("campaign", "show", "promo", "--json").output)["messaging_limit"]
    assert (shown["remaining"], shown["counting"], shown["held_until_units_free"]) == (0, 1, 1)
    oldest = db.execute("SELECT min(counted_at) FROM wa_outbox.portfolio_units").fetchone()[0]
    assert datetime.fromisoformat(shown["finishes_at"]) == oldest + timedelta(hours=24)


def test_metrics_show_each_limited_portfolios_units_left_and_messages_held(db, engine, client):
    register(db)
    assert "wa_outbox_portfolio_budget_remaining{" not in client.get("/metrics").get_data(as_text=True)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=1)
    for i in range(3):
        queue(db, f"55119000000{i:02d}")
    claim(db)
    text = client.get("/metrics").get_data(as_text=True)
    assert f'wa_outbox_portfolio_budget_remaining{{portfolio_id="{PORTFOLIO}"}} 0.0' in text
    assert f'wa_outbox_portfolio_messages_held{{portfolio_id="{PORTFOLIO}"}} 2.0' in text


def test_the_ops_page_shows_a_campaign_at_its_portfolios_limit(db, engine, client):
    from tests.db.test_ops import _login
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=2)
    db.execute("INSERT INTO wa_outbox.campaigns (name, phone_number_id) VALUES ('spring-sale', %s)", (SENDER,))
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, campaign_id, "
               "priority) SELECT %s, (5511900000000 + i)::text, %s::jsonb, '', c.id, 1 "
               "FROM generate_series(1, 3) i, wa_outbox.campaigns c", (SENDER, json.dumps(TEMPLATE)))
    assert _login(client).status_code == 302
    html = client.get("/ops").get_data(as_text=True)
    assert f"messaging limit of portfolio {PORTFOLIO}: 3 will count" in html
    assert "2 of 2 left, 1 wait for units to free" in html
    # when it finishes at this limit: the third waits for the first of the two units taken now, 24 hours on
    finish = re.search(r"finishes\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.\d+ UTC", html)
    assert finish, html
    assert abs(datetime.fromisoformat(finish[1]).replace(tzinfo=UTC) - (datetime.now(UTC) + timedelta(hours=24))) \
        < timedelta(minutes=5)
    assert "<script>" not in html and " style=" not in html


def test_concurrent_claims_of_one_portfolio_never_give_more_units_than_the_limit(db, engine, database_url):
    """The second claim waits for the first's lock on the portfolio's row, then reads the units it took (its own
    snapshot could not see them): 3 units, 3 sends, whatever the timing."""
    import threading

    import psycopg
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=3)
    for i in range(6):
        queue(db, f"55119000000{i:02d}", sender=SENDER if i % 2 else OTHER)
    first = psycopg.connect(database_url)
    try:
        taken = first.cursor().execute(wdb.query("claim_notifications"), {
            "limit": 3, "worker_id": "a", "lease_seconds": 60, "default_mps": 1000,
            **claim_pacing(Settings(pair_rate_seconds=0.0, service_window="off"))}).fetchall()
        assert len(taken) == 3  # in a transaction still open: the portfolio's row stays locked
        second: list = []

        def claim_again() -> None:
            with psycopg.connect(database_url, autocommit=True) as other:
                second.extend(claim(other, limit=10))
        thread = threading.Thread(target=claim_again)
        thread.start()
        from tests.live import wait_for
        wait_for(lambda: db.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND datname = current_database()").fetchone()[0] >= 1,
                 timeout=60, what="the second claim waiting for the portfolio's lock")
        first.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        first.close()
    assert second == []
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sending'").fetchone()[0] == 3
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE hold_reason = 'messaging_limit'"
                      ).fetchone()[0] == 3
    assert db.execute("SELECT used FROM wa_outbox.portfolios").fetchone()[0] == 3


def test_status_tells_when_a_held_message_goes(db, engine, run):
    register(db)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=0)
    nid = queue(db, "5511900000001")
    claim(db)
    until = state(db, nid)[3]
    shown = run("status", str(nid))
    assert shown.exit_code == 0 and "queued (attempt 0" in shown.output
    assert "limit_held" in shown.output and '"reason": "messaging_limit"' in shown.output
    assert until.isoformat()[:19] in shown.output  # the limit_held row's `until`: when it goes
