"""Issue 20's number quality and throughput, end to end: the simulator posts Meta's phone_number_quality_update and
account_update webhooks (POST /_admin/number_update), signed by the number's app; the real web (on a real socket)
verifies and stores them; a real worker process applies them to the sender; then /metrics, /v1/senders and the
event stream show them, and a sender set to follow Meta's throughput (`senders set --follow-meta-throughput`) gets
its new pacing from a THROUGHPUT_UPGRADE, then drains at it."""

from __future__ import annotations

import requests

from tests.conftest import API_TOKEN, APP_SECRET
from tests.db.test_pacing import count, queue
from tests.live import SENDER, wait_for
from tests.system.test_worker_process import start_worker_process
from wa_outbox import accounts, db as wa_db
from wa_outbox.accounts import Secret

APP, WABA = "613000000000009", "100000000000000"  # the simulator's own business account
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def post(sim, field: str, value: dict) -> None:
    r = requests.post(f"{sim.admin_url}/number_update", json={"field": field, "value": value}, timeout=10)
    assert r.status_code == 200, r.text


def metric(client, line: str) -> bool:
    return line in client.get("/metrics").get_data(as_text=True)


def test_quality_restriction_and_throughput_reach_metrics_senders_events_and_pacing(
        app, client, db, sender, sim, settings, database_url, run, monkeypatch):
    monkeypatch.setenv("NH_APP_SECRET", APP_SECRET)
    monkeypatch.setenv("NH_TOKEN", "test-access-token")
    engine = wa_db.create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        accounts.add_app(engine, settings, app_id=APP, secret=Secret.reference("NH_APP_SECRET"))
        accounts.add_sender(engine, settings, phone_number_id=SENDER, waba_id=WABA, app_id=APP,
                            token=Secret.reference("NH_TOKEN"), display_phone_number="+1 555 000 0001", mps=2)
    finally:
        engine.dispose()
    app.extensions["wa_outbox.registry"].reload()  # the web verifies with the app's secret from here on
    assert run("senders", "set", SENDER, "--follow-meta-throughput").exit_code == 0
    bad = requests.post(f"{sim.admin_url}/number_update", json={"field": "messages", "value": {}}, timeout=10)
    assert bad.status_code == 400 and "error" in bad.json()

    worker = start_worker_process(database_url, sim.base_url, LOG_LEVEL="WARNING")
    try:
        post(sim, "phone_number_quality_update", {"event": "FLAGGED", "current_limit": "TIER_1K"})
        wait_for(lambda: metric(client, f'wa_outbox_sender_flagged{{phone_number_id="{SENDER}"}} 1.0'),
                 timeout=60, interval=0.2, what="the flag on /metrics")
        assert metric(client, f'wa_outbox_sender_quality{{phone_number_id="{SENDER}"}} 1.0')
        assert metric(client, f'wa_outbox_sender_messaging_limit{{phone_number_id="{SENDER}"}} 1000.0')
        event = db.execute("SELECT phone_number_id, data FROM wa_outbox.events "
                           "WHERE type = 'phone_number.quality'").fetchone()
        assert event[1]["account_id"] == WABA and event[1]["value"]["event"] == "FLAGGED"

        post(sim, "account_update", {"event": "ACCOUNT_RESTRICTION", "restriction_info": [
            {"restriction_type": "RESTRICTED_BIZ_INITIATED_MESSAGING", "expiration": 4_000_000_000}]})
        wait_for(lambda: client.get(f"/v1/senders/{SENDER}", headers=AUTH).get_json()["restricted"],
                 timeout=60, interval=0.2, what="the restriction on /v1/senders")
        assert metric(client, f'wa_outbox_sender_restricted{{phone_number_id="{SENDER}"}} 1.0')
        assert db.execute("SELECT count(*) FROM wa_outbox.events WHERE type = 'account.update'").fetchone()[0] == 1

        post(sim, "phone_number_quality_update", {"event": "THROUGHPUT_UPGRADE", "current_limit": "TIER_UNLIMITED"})
        wait_for(lambda: db.execute("SELECT mps FROM wa_outbox.rate_limits WHERE phone_number_id = %s",
                                    (SENDER,)).fetchone()[0] == 1000.0, timeout=60, interval=0.2,
                 what="the pacing following Meta's new throughput")
        shown = client.get(f"/v1/senders/{SENDER}", headers=AUTH).get_json()
        assert (shown["throughput_level"], shown["mps"], shown["flagged"], shown["messaging_limit_tier"]) == \
            ("HIGH", 1000.0, True, "TIER_1K")  # the upgrade kept the flag and the tier
        ids = queue(db, 40)
        wait_for(lambda: count(db, "status IN ('sent', 'delivered', 'read')") == len(ids), timeout=90,
                 interval=0.2, what="the messages sent at the new rate")
        assert len({m["biz_opaque_callback_data"] for m in sim.messages()}) == len(ids)  # each once
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0]
    assert worker.returncode == 0, output
