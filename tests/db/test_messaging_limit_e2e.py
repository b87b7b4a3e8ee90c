"""Issue 20's messaging limit, done when: through the real web (on a socket), worker and simulator, a portfolio at
250, a campaign to 1,000 new customers and 100 customers writing in meanwhile (each answered): exactly 250
business-initiated sends and every one of the 100 replies, the other 750 waiting with the time each will go, 0 dead,
0 over the limit at the simulator; a business_capability_update to 2,000 (a signed webhook to the web) releases them
at once, and the simulator sees every one of them, none over its own limit."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
import requests

from tests.conftest import APP_SECRET, meta_body
from tests.live import running_worker, wait_for, worker_settings
from wa_outbox import campaigns, db as wa_db, enqueue, portfolios
from wa_outbox.secret_box import fingerprint
from wa_outbox.simulator import SimulatorServer
from wa_outbox.webhooks import sign

SENT = "SELECT count(*) FROM wa_outbox.notifications WHERE status IN ('sent', 'delivered', 'read')"
PORTFOLIO = "7000001"
WABA = "100000000000000"      # the simulator's WABA: its webhooks name it
SENDER = "100000000000001"    # the simulator's number (inbound messages go to it)
CAMPAIGN = 1000
WRITERS = 100
LIMIT = 250


@pytest.fixture
def engine(database_url):
    engine = wa_db.create_engine(database_url, pool_size=4, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def limited_sim(receiver_url):
    with SimulatorServer(access_token="test-access-token", app_secret=APP_SECRET,
                         webhook_url=f"{receiver_url}/webhooks/whatsapp", status_delays_ms=(20, 40, 60), seed=20,
                         messaging_limit=LIMIT) as server:
        yield server


def register(db, app) -> None:
    os.environ["WA_OUTBOX_TEST_APP_SECRET"] = APP_SECRET
    os.environ["WA_OUTBOX_TEST_TOKEN"] = "test-access-token"
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111')")
    db.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_ref, fingerprint) "
               "VALUES ('111', 'WA_OUTBOX_TEST_APP_SECRET', %s)", (fingerprint(APP_SECRET),))
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id, portfolio_id) VALUES (%s, '111', %s)",
               (WABA, PORTFOLIO))
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_ref) "
               "VALUES (%s, %s, 'WA_OUTBOX_TEST_TOKEN')", (SENDER, WABA))
    app.extensions["wa_outbox.registry"].reload()


def count(db, sql: str, params=()) -> int:
    return db.execute(sql, params).fetchone()[0]


def template(i: int) -> dict:
    return {"to": f"+55119{i:08d}", "idempotency_key": f"promo-{i}",
            "message": {"type": "template", "template": {"name": "promo", "language": {"code": "pt_BR"}}}}


def test_a_portfolio_at_250_sends_250_and_every_reply_and_a_raise_to_2000_releases_the_rest(
        app, db, engine, settings, receiver_url, limited_sim):
    register(db, app)
    portfolios.set_limit(engine, portfolio_id=PORTFOLIO, messaging_limit=LIMIT)
    campaigns.import_items(engine, name="promo", phone_number_id=SENDER,
                           items=[template(i) for i in range(CAMPAIGN)])
    writers = [f"55118{i:08d}" for i in range(WRITERS)]
    with running_worker(worker_settings(settings, limited_sim.base_url)):
        for wa_id in writers:  # they write in while the campaign goes
            limited_sim.inbound(wa_id, "Oi, quando chega meu pedido?")
        answered: set[str] = set()

        def answer_those_who_wrote() -> bool:
            opened = {r[0] for r in db.execute(
                "SELECT wa_id FROM wa_outbox.contacts WHERE phone_number_id = %s AND last_inbound_at IS NOT NULL",
                (SENDER,))}
            for wa_id in sorted(opened - answered):
                with engine.begin() as conn:
                    enqueue(conn, to=wa_id, message={"type": "text", "text": {"body": "Amanhã!"}},
                            idempotency_key=f"reply-{wa_id}", phone_number_id=SENDER)
                answered.add(wa_id)
            return answered >= set(writers)
        wait_for(answer_those_who_wrote, timeout=180, interval=0.2, what="every writer's window open, answered")

        def settled() -> bool:
            return count(db, SENT) == LIMIT + WRITERS \
                and count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE hold_reason = 'messaging_limit' "
                              "AND status = 'queued'") == CAMPAIGN - LIMIT
        wait_for(settled, timeout=300, interval=0.2, what="250 templates and 100 replies sent, 750 held")

        accepted = limited_sim.messages()
        assert sum(1 for m in accepted if m["type"] == "template") == LIMIT
        replies = [m["wa_id"] for m in accepted if m["type"] == "text"]
        assert len(replies) == WRITERS and set(replies) == set(writers)  # every one of the 100, each once
        assert limited_sim.stats()["messaging_limit"]["over"] == 0
        assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'dead'") == 0
        # the 750 wait, no attempt spent, each with the time it will go: when the oldest unit frees
        oldest = db.execute("SELECT min(counted_at) FROM wa_outbox.portfolio_units").fetchone()[0]
        held = db.execute("SELECT attempts, next_attempt_at FROM wa_outbox.notifications "
                          "WHERE hold_reason = 'messaging_limit'").fetchall()
        assert len(held) == CAMPAIGN - LIMIT
        assert all(attempts == 0 and until == oldest + timedelta(hours=24) for attempts, until in held)
        assert count(db, "SELECT count(DISTINCT notification_id) FROM wa_outbox.notification_events "
                         "WHERE event = 'limit_held'") == CAMPAIGN - LIMIT
        shown = portfolios.portfolio(engine, PORTFOLIO)
        assert (shown.used, shown.remaining, shown.held) == (LIMIT, 0, CAMPAIGN - LIMIT)

        # Meta raises the portfolio to 2,000: the simulator's limit, then the webhook that announces it
        limited_sim.configure(messaging_limit=2000)
        body = meta_body({"object": "whatsapp_business_account", "entry": [{"id": WABA, "time": 1764000000, "changes": [
            {"field": "business_capability_update",
             "value": {"max_daily_conversation_per_phone": 2000, "max_daily_conversations_per_business": 2000}}]}]})
        posted = requests.post(f"{receiver_url}/webhooks/whatsapp", data=body, timeout=10,
                               headers={"Content-Type": "application/json",
                                        "X-Hub-Signature-256": sign(APP_SECRET, body)})
        assert posted.status_code == 200
        wait_for(lambda: count(db, SENT) == CAMPAIGN + WRITERS, timeout=300, interval=0.2,
                 what="the 750 released and sent")

    assert count(db, "SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'released' "
                     "AND detail->>'reason' = 'messaging_limit_raised'") == CAMPAIGN - LIMIT
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'dead'") == 0
    assert sum(1 for m in limited_sim.messages() if m["type"] == "template") == CAMPAIGN
    assert limited_sim.stats()["messaging_limit"] == {"limit": 2000, "counted": CAMPAIGN, "over": 0,
                                                       "portfolios": {}}
    shown = portfolios.portfolio(engine, PORTFOLIO)
    assert (shown.messaging_limit, shown.limit_source, shown.used, shown.held) == (2000, "webhook", CAMPAIGN, 0)
    events = [json.loads(json.dumps(r[0])) for r in db.execute(
        "SELECT data->'value' FROM wa_outbox.events WHERE type = 'business.capability'")]
    assert events == [{"max_daily_conversation_per_phone": 2000, "max_daily_conversations_per_business": 2000}]
