"""Campaigns: CSV import (validation first, idempotent re-import, template parameters), pause/resume/cancel through the
CLI and /v1/campaigns, and the spam-limit answer pausing a campaign (real Postgres, the real worker and simulator)."""

from __future__ import annotations

import json
import logging

import psycopg
import pytest

from tests.conftest import API_TOKEN
from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox import campaigns, db as wdb
from wa_outbox.config import Settings
from wa_outbox.db import create_engine
from wa_outbox.worker._sender import claim_pacing

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture(autouse=True)
def no_campaigns(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE wa_outbox.campaigns RESTART IDENTITY")


@pytest.fixture
def engine(database_url):
    engine = create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def write_csv(tmp_path, text: str, name: str = "list.csv") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def count(db, sql: str = "SELECT count(*) FROM wa_outbox.notifications", *args) -> int:
    return db.execute(sql, args).fetchone()[0]


def messages(db) -> list[dict]:
    cur = db.execute("SELECT recipient, message, priority, campaign_id, idempotency_key, next_attempt_at "
                     "FROM wa_outbox.notifications ORDER BY id")
    names = [c.name for c in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


GOOD_AND_BAD = ("to,body.1,body.2\n"
                "+5511987654321,Ana,order 1\n"
                "12,Bruno,order 2\n"                  # line 3: not a phone number
                "+5511987654323,\"Carla\nSilva\",\n"  # line 4 (spans two lines): body.2 empty
                "+5511987654324,Davi,order 4\n")


def test_an_invalid_row_is_listed_with_its_line_and_nothing_is_written(run, db, sender, tmp_path):
    path = write_csv(tmp_path, GOOD_AND_BAD)
    r = run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR")
    assert r.exit_code == 1
    assert f"{path}:3: invalid recipient" in r.stderr
    assert f"{path}:4: body.2 is empty" in r.stderr
    assert "2 invalid row(s) of 4: nothing imported" in r.stderr
    assert count(db) == 0
    assert count(db, "SELECT count(*) FROM wa_outbox.campaigns") == 0


ODD = ['Ana', 'quote " x', "back\\slash", "é ✓ 😀", "\u2028", "tab\tx", "new\nline", "</script>", "{0} }{",
       '"http://\\u0000', "x" * 70_000, "", "a\x00b"]


@pytest.mark.parametrize("template", ["promo", 'pro"mo {1} ✓'])
def test_template_rows_are_read_without_building_messages_with_the_same_results(template):
    """read_csv() puts each template row's JSON together from pieces; it must be, row for row, the item, key and
    verdict that building the message and checking it (build_message, check_request, campaign_key) give."""
    import csv
    import io

    from wa_outbox.messages import InvalidMessage, check_request
    header = ["to", "header.1", "header.image", "body.1", "body.2"]
    rows = [[f"+55 11 9{i:08d}", ODD[i % len(ODD)], "https://x.test/" + ODD[i // 3 % len(ODD)],
             ODD[i // 5 % len(ODD)], ODD[i // 7 % len(ODD)]] for i in range(len(ODD) * 35)]
    rows += [["12", "a", "https://x", "b", "c"], ["+5511987654321", "a", "ftp://x", "b", "c"], rows[0]]
    text = io.StringIO()
    csv.writer(text).writerows([header] + rows)
    name = 'spring "é" {0}'
    read = campaigns.read_csv(io.StringIO(text.getvalue(), newline=""), name=name, template=template, lang="pt_BR")

    plan = campaigns._plan(header, template, "pt_BR")
    assert campaigns._TemplateRows(plan, name, template, "pt_BR").usable  # the path under test
    items, problems, keys = [], [], set()
    for cells in rows:
        try:
            message = campaigns.build_message(plan, cells, template, "pt_BR")
            if any("\x00" in cell for cell in cells):
                raise InvalidMessage("the row contains a NUL character (\\u0000), which Postgres cannot store")
            recipient = check_request(to=cells[0], message=message).recipient
        except InvalidMessage as exc:
            problems.append(str(exc))
            continue
        key = campaigns.campaign_key(name, recipient, message)
        if key not in keys:
            keys.add(key)
            items.append({"to": recipient, "message": message, "idempotency_key": key})
    assert len(items) > 100 and {p.split(" ")[0] for p in problems} >= {"message", "header.1", "body.1", "the",
                                                                         "invalid", "header.image"}
    assert [json.loads(item) for item in read.items] == items
    assert [p.reason for p in read.problems] == problems and read.duplicates == 1 and read.rows == len(rows)


def test_skip_invalid_imports_the_valid_rows_and_lists_the_rest(run, db, sender, tmp_path):
    path = write_csv(tmp_path, GOOD_AND_BAD)
    r = run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR",
            "--skip-invalid")
    assert r.exit_code == 0, r.output
    assert f"{path}:3: invalid recipient" in r.stderr
    assert "campaign spring: 2 imported, 0 already present, 2 invalid" in r.stdout
    assert [m["recipient"] for m in messages(db)] == ["5511987654321", "5511987654324"]


def test_importing_the_same_file_again_queues_nothing_new(run, db, sender, tmp_path):
    path = write_csv(tmp_path, "to,body.1\n+5511987654321,Ana\n+5511987654322,Bruno\n+55 11 98765-4321,Ana\n")
    first = run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR")
    assert "2 imported, 1 already present, 0 invalid" in first.stdout  # the third row is the first one again
    again = run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR")
    assert again.exit_code == 0, again.output
    assert "0 imported, 3 already present, 0 invalid" in again.stdout
    assert count(db) == 2
    # The same rows in another campaign are other messages.
    other = run("campaign", "import", path, "--name", "autumn", "--template", "promo", "--lang", "pt_BR")
    assert "2 imported" in other.stdout and count(db) == 4


def test_campaign_messages_carry_the_campaign_priority_1_and_a_derived_key(run, db, sender, tmp_path):
    path = write_csv(tmp_path, "to,body.1\n+5511987654321,Ana\n")
    run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR")
    [m] = messages(db)
    cid = count(db, "SELECT id FROM wa_outbox.campaigns WHERE name = 'spring'")
    assert (m["priority"], m["campaign_id"]) == (1, cid)
    assert m["idempotency_key"] == campaigns.campaign_key("spring", "5511987654321", m["message"])
    assert count(db, "SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'queued' "
                     "AND detail->>'campaign' = 'spring'") == 1


def test_positional_parameters_and_media_header_build_the_template(run, db, sender, tmp_path):
    path = write_csv(tmp_path, "header.image,to,body.2,body.1\n"
                               "https://example.com/a.png,+5511987654321,second,first\n")
    r = run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR")
    assert r.exit_code == 0, r.output
    assert messages(db)[0]["message"] == {"type": "template", "template": {
        "name": "promo", "language": {"code": "pt_BR"}, "components": [
            {"type": "header", "parameters": [{"type": "image", "image": {"link": "https://example.com/a.png"}}]},
            {"type": "body", "parameters": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]},
        ]}}


def test_named_parameters_and_a_text_header_build_the_template(run, db, sender, tmp_path):
    path = write_csv(tmp_path, "to,header.1,body.first_name,body.order_id\n+5511987654321,Olá,Ana,A-17\n")
    r = run("campaign", "import", path, "--name", "spring", "--template", "order_update", "--lang", "en_US")
    assert r.exit_code == 0, r.output
    assert messages(db)[0]["message"]["template"]["components"] == [
        {"type": "header", "parameters": [{"type": "text", "text": "Olá"}]},
        {"type": "body", "parameters": [{"type": "text", "parameter_name": "first_name", "text": "Ana"},
                                        {"type": "text", "parameter_name": "order_id", "text": "A-17"}]}]


@pytest.mark.parametrize("header, fragment", [
    ("phone,body.1", "no `to` column"),
    ("to,body.1,body.3", "without gaps"),
    ("to,body.1,body.name", "not both"),
    ("to,colour", "unknown column(s) 'colour'"),
    ("to,message,body.1", "cannot be combined"),
])
def test_a_header_that_cannot_be_used_is_refused_before_any_row(header, fragment, run, db, sender, tmp_path):
    path = write_csv(tmp_path, f"{header}\n+5511987654321,a,b\n")
    r = run("campaign", "import", path, "--name", "spring", "--template", "promo", "--lang", "pt_BR")
    assert r.exit_code == 1 and fragment in r.stderr
    assert count(db) == 0


def test_a_message_column_holds_whole_bodies(run, db, sender, tmp_path):
    text = json.dumps({"type": "text", "text": {"body": "Olá, \"Ana\""}})
    quoted = '"' + text.replace('"', '""') + '"'
    path = write_csv(tmp_path, f"to,message\n+5511987654321,{quoted}\n+5511987654322,{{\"type\": \"fax\"}}\n"
                               "+5511987654323,not json\n")
    r = run("campaign", "import", path, "--name", "spring", "--skip-invalid")
    assert r.exit_code == 0, r.output
    assert ":3: unknown message type" in r.stderr and ":4: the message cell is not JSON" in r.stderr
    assert [m["message"] for m in messages(db)] == [json.loads(text)]


def claim(engine, limit: int = 100, worker: str = "w1") -> list[dict]:
    # A rate high enough that the sender's bucket never limits a claim here (its capacity grows with the rate).
    return wdb.fetch(engine, "claim_notifications", {"limit": limit, "worker_id": worker, "lease_seconds": 60,
                                                     "default_mps": 1_000_000.0, **claim_pacing(Settings())})


def import_rows(engine, name: str, n: int, first: int = 5511900000000) -> None:
    items = [{"to": str(first + i), "message": {"type": "text", "text": {"body": f"hi {i}"}},
              "idempotency_key": f"k-{name}-{first + i}"} for i in range(n)]
    campaigns.import_items(engine, name=name, phone_number_id=SENDER, items=items)


def test_pause_stops_claims_at_once_and_resume_brings_them_back_with_attempts_intact(db, sender, engine):
    import_rows(engine, "spring", 6)
    [in_flight] = claim(engine, limit=1)  # one send in flight when the operator pauses
    assert campaigns.steer(engine, "spring", "pause", actor="test").moved == 6  # 5 queued + the one in flight
    db.execute("SELECT wa_outbox.enqueue('+5511987654321', '{\"type\": \"text\", \"text\": {\"body\": \"order\"}}')")
    claimed = claim(engine)
    assert [r["recipient"] for r in claimed] == ["5511987654321"]  # the transactional one only
    # The in-flight send comes back for a retry: it stays parked, its attempt counted.
    wdb.execute(engine, "record_outcomes", {"worker_id": "w1", "outcomes": json.dumps([{
        "id": in_flight["id"], "status": "queued", "event": "retry_scheduled", "wamid": None, "error": None,
        "delay": 0, "refund": False, "detail": {}}])})
    assert claim(engine) == []
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE campaign_id IS NOT NULL "
                     "AND status = 'queued' AND next_attempt_at = 'infinity'") == 6
    # An import into the paused campaign is parked too.
    import_rows(engine, "spring", 2, first=5511800000000)
    assert claim(engine) == []

    resumed = campaigns.steer(engine, "spring", "resume", actor="test")
    assert (resumed.status, resumed.moved) == ("active", 8)
    back = {r["id"]: r["attempts"] for r in claim(engine)}
    assert len(back) == 8
    assert back[in_flight["id"]] == 2  # its first attempt kept, this claim the second
    assert set(back.values()) == {1, 2}


def test_cancel_cancels_the_queued_messages_only_each_on_its_timeline(run, db, sender, engine):
    import_rows(engine, "spring", 5)
    [in_flight] = claim(engine, limit=1)
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead' WHERE id = (SELECT max(id) FROM "
               "wa_outbox.notifications)")
    r = run("campaign", "cancel", "spring")
    assert r.exit_code == 0, r.output
    assert "3 queued messages cancelled" in r.stdout
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'cancelled'") == 3
    assert count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sending' AND id = %s",
                 in_flight["id"]) == 1
    events = db.execute("SELECT detail FROM wa_outbox.notification_events WHERE event = 'cancelled'").fetchall()
    assert [e[0] for e in events] == [{"by": "cli", "campaign": "spring"}] * 3
    # A cancelled campaign takes no more imports, and cannot be paused or resumed.
    with pytest.raises(campaigns.CampaignConflict, match="cancelled"):
        import_rows(engine, "spring", 1, first=5511700000000)
    assert run("campaign", "resume", "spring").exit_code == 1
    assert count(db) == 5


def test_list_and_show(run, db, sender, engine):
    import_rows(engine, "spring", 3)
    claim(engine, limit=1)
    r = run("campaign", "show", "spring", "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert (shown["status"], shown["total"], shown["counts"]) == ("active", 3, {"queued": 2, "sending": 1})
    assert shown["waiting"] == 3 and shown["expected_end_at"] is not None
    listed = [json.loads(line) for line in run("campaign", "list", "--json").stdout.splitlines()]
    assert [c["name"] for c in listed] == ["spring"]
    assert "spring\tactive\t100000000000001\t3\t2" in run("campaign", "list").stdout
    missing = run("campaign", "show", "nope")
    assert missing.exit_code == 1 and "no campaign 'nope'" in missing.stderr


def test_the_campaigns_endpoints(client, db, sender, engine):
    import_rows(engine, "spring", 3)
    assert client.get("/v1/campaigns").status_code == 401
    listed = client.get("/v1/campaigns", headers=AUTH).get_json()["campaigns"]
    assert [(c["name"], c["counts"]) for c in listed] == [("spring", {"queued": 3})]
    assert client.get("/v1/campaigns/spring", headers=AUTH).get_json()["total"] == 3
    assert client.get("/v1/campaigns/nope", headers=AUTH).status_code == 404
    assert client.post("/v1/campaigns/nope/pause", headers=AUTH).status_code == 404

    paused = client.post("/v1/campaigns/spring/pause", headers=AUTH)
    assert paused.status_code == 200 and paused.get_json()["moved"] == 3
    assert client.get("/v1/campaigns/spring", headers=AUTH).get_json()["status"] == "paused"
    assert claim(engine) == []
    resumed = client.post("/v1/campaigns/spring/resume", headers=AUTH).get_json()
    assert (resumed["status"], resumed["previous_status"], resumed["moved"]) == ("active", "paused", 3)
    cancelled = client.post("/v1/campaigns/spring/cancel", headers={**AUTH, "X-Correlation-Id": "ops-1"})
    assert cancelled.get_json()["moved"] == 3
    assert count(db, "SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'cancelled' "
                     "AND detail->>'by' = 'api (ops-1)'") == 3
    conflict = client.post("/v1/campaigns/spring/pause", headers=AUTH)
    assert conflict.status_code == 409 and "cancelled" in conflict.get_json()["error"]["message"]
    assert client.post("/v1/campaigns/spring/explode", headers=AUTH).status_code == 404


def test_a_spam_limit_answer_pauses_the_campaign_and_alerts(db, sender, sim, settings, engine, caplog):
    sim.set_faults([{"mode": "error", "code": 131048, "count": 1}])
    import_rows(engine, "spring", 30)
    caplog.set_level(logging.ERROR, logger="wa_outbox.worker")
    # Slow enough that most of the campaign still waits when the first answer comes back.
    with running_worker(worker_settings(settings, sim.base_url, rate_limit_mps=2.0)):
        wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.notification_events "
                                   "WHERE event = 'retry_scheduled'"), what="the 131048 outcome")
        db.execute("SELECT wa_outbox.enqueue('+5511987654321', '{\"type\": \"text\", \"text\": {\"body\": \"x\"}}')")
        wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE campaign_id IS NULL "
                                   "AND status = 'sent'"), what="the transactional message to go out")
        # Nothing of the campaign is in flight any more: it is all sent, or parked.
        wait_for(lambda: count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sending'") == 0,
                 what="in-flight sends to finish")
    status, reason = db.execute("SELECT status, pause_reason FROM wa_outbox.campaigns").fetchone()
    assert status == "paused" and reason.startswith("131048")
    spam = db.execute("SELECT status, attempts, next_attempt_at = 'infinity' FROM wa_outbox.notifications "
                      "WHERE last_error->>'code' = '131048'").fetchall()
    assert spam == [("queued", 1, True)]  # parked with the campaign, its attempt counted
    waiting = count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE campaign_id IS NOT NULL "
                        "AND status = 'queued'")
    parked = count(db, "SELECT count(*) FROM wa_outbox.notifications WHERE campaign_id IS NOT NULL "
                       "AND status = 'queued' AND next_attempt_at = 'infinity'")
    assert waiting == parked and waiting >= 20
    alerts = [r for r in caplog.records if getattr(r, "alert", None) == "campaign_paused"]
    assert len(alerts) == 1 and alerts[0].campaign == "spring"


def test_a_dead_campaign_message_retried_while_paused_stays_parked(db, sender, engine, run):
    import_rows(engine, "spring", 2)
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead' WHERE id = 1")
    campaigns.steer(engine, "spring", "pause", actor="test")
    assert run("dlq", "retry", "1").exit_code == 0
    assert claim(engine) == []
    campaigns.steer(engine, "spring", "resume", actor="test")
    assert sorted(r["id"] for r in claim(engine)) == [1, 2]


def test_an_import_naming_another_sender_is_refused(run, db, sender, tmp_path):
    path = write_csv(tmp_path, "to,body.1\n+5511987654321,Ana\n")
    assert run("campaign", "import", path, "--name", "spring", "--template", "p", "--lang", "en").exit_code == 0
    other = write_csv(tmp_path, "to,body.1\n+5511987654322,Bruno\n", name="other.csv")
    r = run("campaign", "import", other, "--name", "spring", "--template", "p", "--lang", "en",
            "--phone-number-id", "200000000000002")
    assert r.exit_code == 1 and "campaign spring sends from 100000000000001, not 200000000000002" in r.stderr
    assert count(db) == 1
