"""The templates table kept by Meta's webhooks (stored by the real web app, processed by the real inbound worker),
their events for apps, `wa-outbox templates list|show|sync`, GET /v1/templates, the ops page's section, and the
holds a status webhook puts on queued messages and takes off them (real Postgres; sync against the real simulator)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import API_TOKEN, post_webhook
from tests.db.test_templates_e2e import APP, LANG, NUMBER, TEMPLATE, TOKEN, WABA, admin_template, register
from wa_outbox.db import create_engine
from wa_outbox.enqueue import enqueue
from wa_outbox.retry import RetryPolicy
from wa_outbox.simulator import SimulatorServer
from wa_outbox.worker._inbound import InboundProcessor

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
MESSAGE = {"type": "template", "template": {"name": TEMPLATE, "language": {"code": LANG}}}


@pytest.fixture
def engine(database_url):
    engine = create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def change(field: str, value: dict, at: int = 1_750_000_000, waba: str = WABA) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": waba, "time": at, "changes": [
        {"field": field, "value": {"message_template_id": 1234, "message_template_name": TEMPLATE,
                                   "message_template_language": LANG, **value}}]}]}


def status(event: str, at: int, **more) -> dict:
    return change("message_template_status_update", {"event": event, "reason": "NONE",
                                                     "message_template_category": "MARKETING", **more}, at)


@pytest.fixture
def registered(db, app):
    """The sender of WABA 9101 registered, and the web app's registry reloaded (its watch reloads on the NOTIFY, in
    its own thread: a webhook posted before that would be refused for the WABA's app)."""
    register(db, app)


def process(engine) -> None:
    processor = InboundProcessor(engine, "inbound-t", [], RetryPolicy(0.01, 0.02, 3), 30.0)
    while processor.process_batch():
        pass


def deliver(client, engine, *payloads: dict) -> None:
    for payload in payloads:
        answer = post_webhook(client, payload)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    process(engine)


def template_row(db) -> tuple:
    return db.execute("SELECT status, quality, category, category_pending, reason FROM wa_outbox.templates "
                      "WHERE waba_id = %s AND name = %s AND language = %s", (WABA, TEMPLATE, LANG)).fetchone()


def test_webhooks_keep_the_table_current_and_reach_the_event_stream(db, client, engine, registered):
    deliver(client, engine, status("APPROVED", 100),
            change("message_template_quality_update", {"previous_quality_score": "GREEN",
                                                       "new_quality_score": "YELLOW"}, 110),
            change("template_category_update", {"correct_category": "MARKETING", "new_category": "UTILITY",
                                                "category_update_timestamp": 4_000_000_000}, 120))
    assert template_row(db) == ("APPROVED", "YELLOW", "UTILITY", "MARKETING", None)  # MARKETING announced
    at = db.execute("SELECT category_change_at FROM wa_outbox.templates").fetchone()[0]
    assert at.timestamp() == 4_000_000_000
    # a newer status replaces it, with its reason
    deliver(client, engine, status("REJECTED", 130, reason="INVALID_FORMAT"))
    assert template_row(db)[0] == "REJECTED" and template_row(db)[4] == "INVALID_FORMAT"
    # the category change took effect: no longer pending
    deliver(client, engine, change("template_category_update", {"previous_category": "UTILITY",
                                                                "new_category": "MARKETING"}, 140))
    assert template_row(db)[2:4] == ("MARKETING", None)
    types = [t for (t,) in db.execute("SELECT type FROM wa_outbox.events ORDER BY seq")]
    assert types == ["template.status", "template.quality", "template.category", "template.status",
                     "template.category"]
    done = db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE status = 'done'").fetchone()[0]
    assert done == 5


def test_a_paused_webhook_holds_queued_messages_and_approved_releases_them_in_order(db, client, engine, registered):
    ids = [enqueue(db, to=f"+55119{i:08d}", message=MESSAGE, phone_number_id=NUMBER) for i in range(5)]
    other = enqueue(db, to="+5511900000099", message={"type": "text", "text": {"body": "x"}}, phone_number_id=NUMBER)
    deliver(client, engine, status("PAUSED", 100))
    held = db.execute("SELECT id, status, hold_reason, attempts, next_attempt_at = 'infinity' "
                      "FROM wa_outbox.notifications ORDER BY id").fetchall()
    assert held == [(i, "queued", "template_paused", 0, True) for i in ids] + [(other, "queued", None, 0, False)]
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'template_held'"
                      ).fetchone()[0] == 5
    deliver(client, engine, status("PAUSED", 105))  # again: nothing held twice
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'template_held'"
                      ).fetchone()[0] == 5
    listed = client.get("/v1/templates", headers=AUTH).get_json()["templates"]
    assert [(t["name"], t["status"], t["held"]) for t in listed] == [(TEMPLATE, "PAUSED", 5)]
    deliver(client, engine, status("APPROVED", 110))
    rows = db.execute("SELECT id, hold_reason, next_attempt_at FROM wa_outbox.notifications WHERE id = ANY(%s) "
                      "ORDER BY next_attempt_at", (ids,)).fetchall()
    assert [r[0] for r in rows] == ids and all(r[1] is None for r in rows)  # due in their order
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'template_released'"
                      ).fetchone()[0] == 5


def test_not_approved_holds_and_disabled_dead_letters_with_the_reason(db, client, engine, registered):
    ids = [enqueue(db, to=f"+55119{i:08d}", message=MESSAGE, phone_number_id=NUMBER) for i in range(3)]
    deliver(client, engine, status("PENDING", 100))
    assert {r for (r,) in db.execute("SELECT hold_reason FROM wa_outbox.notifications")} == {"template_not_approved"}
    deliver(client, engine, status("DISABLED", 110))
    dead = db.execute("SELECT status, last_error->>'reason', hold_reason FROM wa_outbox.notifications "
                      "WHERE id = ANY(%s)", (ids,)).fetchall()
    assert dead == [("dead", "template_disabled", None)] * 3


def test_a_template_of_another_business_account_holds_nothing(db, client, engine, registered):
    nid = enqueue(db, to="+5511900000001", message=MESSAGE, phone_number_id=NUMBER)
    deliver(client, engine, change("message_template_status_update", {"event": "PAUSED"}, 100, waba="9999"))
    assert db.execute("SELECT hold_reason FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone() == (None,)
    assert db.execute("SELECT waba_id FROM wa_outbox.templates").fetchall() == [("9999",)]


def test_cli_list_show_and_their_refusals(db, client, engine, run, registered):
    deliver(client, engine, status("PAUSED", 100))
    listed = run("templates", "list", "--json")
    assert listed.exit_code == 0
    [row] = [json.loads(line) for line in listed.output.splitlines()]
    assert (row["waba_id"], row["name"], row["language"], row["status"], row["held"]) == (WABA, TEMPLATE, LANG,
                                                                                          "PAUSED", 0)
    tsv = run("templates", "list", "--status", "paused").output.splitlines()
    assert tsv[0].startswith("waba_id\tname\tlanguage\tstatus") and len(tsv) == 2
    assert run("templates", "list", "--status", "APPROVED").output.splitlines()[1:] == []
    shown = run("templates", "show", TEMPLATE, "--json")
    assert shown.exit_code == 0 and json.loads(shown.output)["category"] == "MARKETING"
    assert "status: PAUSED" in run("templates", "show", TEMPLATE).output
    missing = run("templates", "show", "nope")
    assert missing.exit_code == 1 and "no template nope" in missing.output


def test_v1_templates_filters_one_and_bad_input(db, client, engine, registered):
    deliver(client, engine, status("APPROVED", 100))
    assert client.get("/v1/templates").status_code == 401
    assert [t["name"] for t in client.get(f"/v1/templates?waba_id={WABA}&status=approved&name={TEMPLATE}",
                                          headers=AUTH).get_json()["templates"]] == [TEMPLATE]
    assert client.get("/v1/templates?status=PAUSED", headers=AUTH).get_json() == {"templates": []}
    one = client.get(f"/v1/templates/{WABA}/{TEMPLATE}/{LANG}", headers=AUTH)
    assert one.status_code == 200 and one.get_json()["status"] == "APPROVED" and "components" in one.get_json()
    for bad in ("/v1/templates?colour=red", "/v1/templates?waba_id=abc", f"/v1/templates/abc/{TEMPLATE}/{LANG}"):
        answer = client.get(bad, headers=AUTH)
        assert answer.status_code == 400 and "error" in answer.get_json(), bad
    assert client.get(f"/v1/templates/{WABA}/nope/{LANG}", headers=AUTH).status_code == 404


def test_sync_reads_every_page_and_acts_on_what_it_finds(db, engine, run, monkeypatch, receiver_url):
    register(db)
    nid = enqueue(db, to="+5511900000001", message=MESSAGE, phone_number_id=NUMBER)
    with SimulatorServer(access_token="test-access-token", app_secret="x", apps={APP: {"secret": "x"}},
                         numbers={NUMBER: {"token": TOKEN, "app": APP, "waba": WABA}}) as sim:
        for i in range(230):  # three pages of 100
            admin_template(sim, name=f"t{i:03d}")
        admin_template(sim, status="PAUSED")
        monkeypatch.setenv("WHATSAPP_API_BASE_URL", sim.base_url)
        done = run("templates", "sync", "--json")
        assert done.exit_code == 0, done.output
        assert json.loads(done.output) == {"waba_id": WABA, "pages": 3, "templates": 231, "vanished": 0, "held": 1,
                                           "released": 0, "dead": 0, "campaigns_paused": []}
        assert sim.stats()["outcomes"]["templates_listed"] == 3
        assert db.execute("SELECT count(*), count(synced_at) FROM wa_outbox.templates").fetchone() == (231, 231)
        assert db.execute("SELECT hold_reason FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone() == \
            ("template_paused",)
        components = db.execute("SELECT components FROM wa_outbox.templates WHERE name = 't000'").fetchone()[0]
        assert components == []
        # deleted at Meta while paused: no longer listed, so recorded as DELETED, and its held message goes
        admin_template(sim, status="DELETED")
        admin_template(sim, name="t000", status="DELETED")
        again = run("templates", "sync", "--json")
        assert again.exit_code == 0, again.output
        assert json.loads(again.output) == {"waba_id": WABA, "pages": 3, "templates": 229, "vanished": 2, "held": 0,
                                            "released": 1, "dead": 0, "campaigns_paused": []}
        gone = db.execute("SELECT name, status, reason FROM wa_outbox.templates WHERE status = 'DELETED' "
                          "ORDER BY name").fetchall()
        assert gone == [(TEMPLATE, "DELETED", "not in Meta's listing (templates sync)"),
                        ("t000", "DELETED", "not in Meta's listing (templates sync)")]
        assert db.execute("SELECT hold_reason, next_attempt_at <= now() FROM wa_outbox.notifications WHERE id = %s",
                          (nid,)).fetchone() == (None, True)
        assert json.loads(run("templates", "sync", "--json").output)["vanished"] == 0  # recorded once
        unknown = run("templates", "sync", "--waba", "777")
        assert unknown.exit_code == 1 and "no registered sender of WABA 777" in unknown.output
        monkeypatch.setenv("TEMPLATES_TEST_TOKEN", "a-wrong-token")
        refused = run("templates", "sync")
        assert refused.exit_code == 1 and "HTTP 401" in refused.output and "a-wrong-token" not in refused.output


def test_metrics_show_held_messages_paused_templates_and_announced_category_changes(db, client, engine, registered):
    enqueue(db, to="+5511900000001", message=MESSAGE, phone_number_id=NUMBER)
    deliver(client, engine, status("PAUSED", 100),
            change("template_category_update", {"correct_category": "MARKETING", "new_category": "UTILITY",
                                                "category_update_timestamp": 4_000_000_000}, 120))
    text = client.get("/metrics").get_data(as_text=True)
    lines = set(text.splitlines())
    assert "wa_outbox_template_held_messages 1.0" in lines
    assert 'wa_outbox_templates{status="paused"} 1.0' in lines and 'wa_outbox_templates{status="disabled"} 0.0' in lines
    assert "wa_outbox_template_category_changes_pending 1.0" in lines
    assert "wa_outbox_template_dead_letters_total 0.0" in lines


def test_the_ops_page_shows_templates_with_their_held_messages_and_announced_category(db, client, engine,
                                                                                       registered):
    from tests.db.test_ops import _login
    enqueue(db, to="+5511900000001", message=MESSAGE, phone_number_id=NUMBER)
    assert 'id="templates"' not in (_login(client) and client.get("/ops").get_data(as_text=True))  # none known yet
    deliver(client, engine, status("PAUSED", 100),
            change("template_category_update", {"correct_category": "MARKETING", "new_category": "UTILITY",
                                                "category_update_timestamp": 4_000_000_000}, 120))
    page = client.get("/ops").get_data(as_text=True)
    section = page[page.index('id="templates"'):]
    section = section[:section.index("</table>")]
    assert TEMPLATE in section and "PAUSED" in section and "→ MARKETING" in section and "<td>1</td>" in section


def test_a_held_message_says_what_holds_it_in_v1_the_cli_and_the_ops_page(app, db, client, engine, run, registered):
    from tests.db.test_openapi import _Checker
    from tests.db.test_ops import _login
    nid = enqueue(db, to="+5511900000001", message=MESSAGE, phone_number_id=NUMBER)
    deliver(client, engine, status("PAUSED", 100))
    shown = _Checker(app)(client.get(f"/v1/messages/{nid}", headers=AUTH), 200)  # as the document says
    assert (shown["status"], shown["hold_reason"]) == ("queued", "template_paused")
    printed = run("status", str(nid))
    assert printed.exit_code == 0 and "held (template_paused): Meta paused its template" in printed.output
    _login(client)
    page = client.get(f"/ops/messages/{nid}").get_data(as_text=True)
    assert 'id="hold-reason"' in page and "Meta paused its template" in page
    deliver(client, engine, status("APPROVED", 110))  # released: nothing holds it any more, and none says so
    assert client.get(f"/v1/messages/{nid}", headers=AUTH).get_json()["hold_reason"] is None
    assert "held (" not in run("status", str(nid)).output
    assert 'id="hold-reason"' not in client.get(f"/ops/messages/{nid}").get_data(as_text=True)
