"""The operator CLI: send, status, dead-letter queue, rate limits, prune (click's runner, real Postgres)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from wa_outbox import cli


def make_dead(db, nid: int, code: int = 131026) -> None:
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead', attempts = 3, last_error = "
               "jsonb_build_object('message', %s::text, 'code', %s::int) WHERE id = %s",
               (f"{code}: undeliverable", code, nid))


def test_send_prints_the_id_and_honours_idempotency(run, db):
    r = run("send", "--to", "+5511987654321", "--text", "Olá", "--idempotency-key", "k1", "--correlation-id", "c1")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().isdigit(), r.stdout  # the id alone, as the README says: ID=$(wa-outbox send ...)
    nid = int(r.stdout)
    again = run("send", "--to", "+5511987654321", "--text", "Olá", "--idempotency-key", "k1")
    assert again.exit_code == 0 and again.stdout == f"{nid}\n" and "seen before" in again.stderr
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 1
    as_json = run("send", "--to", "+5511987654321", "--text", "Olá", "--idempotency-key", "k1", "--print-json")
    assert json.loads(as_json.stdout) == {"id": nid, "status": "queued", "created": False}
    fresh = run("send", "--to", "+5511987654321", "--text", "Olá", "--print-json")
    created = json.loads(fresh.stdout)
    assert created == {"id": created["id"], "status": "queued", "created": True} and created["id"] != nid
    assert not fresh.stderr


@pytest.mark.parametrize("args, fragment", [
    (("--to", "12", "--text", "x"), "invalid recipient"),
    (("--to", "+5511987654321"), "exactly one of"),
    (("--to", "+5511987654321", "--json", "{bad"), "not JSON"),
    (("--to", "+5511987654321", "--json", '{"type": "fax"}'), "unknown message type"),
])
def test_send_refuses_bad_input_with_a_message_and_nonzero_exit(run, db, args, fragment):
    r = run("send", *args)
    assert r.exit_code != 0 and fragment in r.output
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 0


def test_status_by_id_phone_and_correlation_id(run, db):
    nid = int(run("send", "--to", "+5511987654321", "--template", "order_shipped", "--correlation-id",
                  "checkout-42").output.split("\t")[0])
    by_id = run("status", str(nid))
    assert by_id.exit_code == 0 and f"message {nid}: queued" in by_id.output and "queued" in by_id.output
    assert str(nid) in run("status", "+55 11 98765-4321").output
    assert str(nid) in run("status", "checkout-42").output
    missing = run("status", "nobody")
    assert missing.exit_code != 0 and "no message matches" in missing.output


def test_dlq_list_show_retry_purge(run, db):
    ids = [int(run("send", "--to", f"+551198765432{i}", "--text", "x").output.split("\t")[0]) for i in range(4)]
    for nid in ids[:3]:
        make_dead(db, nid, code=131026 if nid != ids[2] else 131047)
    listed = run("dlq", "list")
    assert listed.exit_code == 0 and listed.output.count("undeliverable") == 3
    assert "131047" in run("dlq", "list", "--code", "131047").output
    assert f"message {ids[0]}: dead" in run("dlq", "show", str(ids[0])).output

    assert run("dlq", "retry", str(ids[0])).output.strip() == "requeued 1"
    assert run("dlq", "retry", "--all", "--code", "131047").output.strip() == "requeued 1"
    bad = run("dlq", "retry", str(ids[3]))  # queued, not dead
    assert bad.exit_code != 0 and str(ids[3]) in bad.output
    assert run("dlq", "retry").exit_code != 0  # neither ids nor --all

    statuses = dict(db.execute("SELECT id, status FROM wa_outbox.notifications").fetchall())
    assert [statuses[i] for i in ids] == ["queued", "dead", "queued", "queued"]
    events = db.execute("SELECT event, detail->>'by' FROM wa_outbox.notification_events WHERE notification_id = %s "
                        "ORDER BY id", (ids[0],)).fetchall()
    assert events[-1] == ("requeued", "cli")

    assert run("dlq", "purge", "--all", input="n\n").exit_code != 0  # asks, and no means no
    assert run("dlq", "purge", "--all", "--yes").output.strip() == "purged 1"
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 3
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE notification_id = %s",
                      (ids[1],)).fetchone()[0] == 0


def test_ratelimit_set_and_show(run, db):
    r = run("ratelimit", "set", "100000000000001", "--mps", "20")
    assert r.exit_code == 0 and "20 messages/s" in r.output
    assert "100000000000001\t20\tdefault\t19.7\t" in run("ratelimit", "show").output  # paced: see test_pacing.py
    assert run("ratelimit", "set", "abc", "--mps", "5").exit_code != 0
    assert run("ratelimit", "set", "100000000000001", "--mps", "0").exit_code != 0


def test_prune_keeps_recent_and_unfinished_messages(run, db):
    old = int(run("send", "--to", "+5511987654321", "--text", "old").output.split("\t")[0])
    int(run("send", "--to", "+5511987654322", "--text", "new").output.split("\t")[0])
    db.execute("UPDATE wa_outbox.notifications SET status = 'read', created_at = now() - interval '41 days', "
               "updated_at = now() - interval '40 days' WHERE id = %s", (old,))
    r = run("prune", "--days", "30")
    assert r.exit_code == 0 and "pruned 1 messages" in r.output
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 1


# --- errors are one line; db query is read-only, one statement, JSON ------------------------------------------------

def closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when we return: nothing listens there


@pytest.fixture
def run_against(monkeypatch):
    monkeypatch.setattr(cli.logs, "configure", lambda *args, **kwargs: None)

    def invoke(database_url: str, *args: str):
        return CliRunner().invoke(cli.main, list(args), env={"DATABASE_URL": database_url},
                                  catch_exceptions=False)
    return invoke


@pytest.mark.parametrize("args", [
    ("db", "upgrade"), ("db", "downgrade", "base"), ("db", "current"), ("db", "query", "SELECT 1"),
    ("status", "42"), ("dlq", "list"), ("dlq", "retry", "--all"), ("ratelimit", "show"), ("prune",),
    ("send", "--to", "+5511987654321", "--text", "x"),
])
def test_an_unreachable_database_is_one_line_without_the_password(run_against, args):
    r = run_against(f"postgresql://app:hunter2secret@127.0.0.1:{closed_port()}/app", *args)
    assert r.exit_code != 0
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wa-outbox: cannot reach the database"), r.output
    assert "hunter2secret" not in r.output and "app:***@127.0.0.1" in r.output


@pytest.fixture
def unmigrated_url(server_url):
    from tests.conftest import _with_dbname, create_scratch_database, drop_database
    name = create_scratch_database(server_url, prefix="wa_outbox_unmigrated")
    yield _with_dbname(server_url, name)
    drop_database(server_url, name)


@pytest.mark.parametrize("args", [("status", "42"), ("dlq", "list"), ("ratelimit", "show"),
                                  ("db", "query", "SELECT count(*) FROM wa_outbox.notifications")])
def test_an_unmigrated_database_is_one_line(run_against, unmigrated_url, args):
    r = run_against(unmigrated_url, *args)
    assert r.exit_code != 0
    assert r.output.strip() == r.output.strip().splitlines()[0]
    assert r.output.startswith("wa-outbox: the database is not migrated") and "wa-outbox db upgrade" in r.output


def test_db_query_refuses_several_statements_even_with_write(run, db):
    nid = int(run("send", "--to", "+5511987654321", "--text", "x").output.split("\t")[0])
    for flags in ((), ("--write",)):
        r = run("db", "query", *flags, "SET wa_outbox.allow_prune = 'on'; "
                f"DELETE FROM wa_outbox.notification_events WHERE notification_id = {nid:d}")
        assert r.exit_code != 0 and "exactly one statement" in r.output and len(r.output.splitlines()) == 1
    assert db.execute("SELECT count(*) FROM wa_outbox.notification_events").fetchone()[0] == 1


def test_db_query_is_read_only_unless_write(run, db):
    nid = int(run("send", "--to", "+5511987654321", "--text", "x").output.split("\t")[0])
    update = f"UPDATE wa_outbox.notifications SET correlation_id = 'edited' WHERE id = {nid}"
    refused = run("db", "query", update)
    assert refused.exit_code != 0 and "read-only transaction" in refused.output
    assert "Traceback" not in refused.output and len(refused.output.splitlines()) == 1
    assert run("db", "query", "SELECT wa_outbox.enqueue('+5511987654322', '{\"type\": \"text\", "
               "\"text\": {\"body\": \"y\"}}')").exit_code != 0  # writes through a function: refused too
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE correlation_id IS NULL").fetchone()[0] == 1
    done = run("db", "query", "--write", update)
    assert done.exit_code == 0 and "UPDATE 1" in done.output
    assert db.execute("SELECT correlation_id FROM wa_outbox.notifications").fetchone()[0] == "edited"


def test_db_query_prints_json_values_as_json_and_rows_as_json_objects(run, db):
    import json
    nid = int(run("send", "--to", "+5511987654321", "--text", "Olá\tmundo").output.split("\t")[0])
    sql = f"SELECT id, message, last_error, 'a%b' AS pct FROM wa_outbox.notifications WHERE id = {nid}"
    tsv = run("db", "query", sql)
    assert tsv.exit_code == 0
    header, row = tsv.output.splitlines()
    assert header == "id\tmessage\tlast_error\tpct"
    assert row.startswith(f"{nid}\t{{") and row.endswith("\t\ta%b")
    # every cell is TSV-escaped, JSON's own backslashes too (tests/db/test_cli_tsv.py): read back, it is the JSON
    from tests.db.test_cli_tsv import read_tsv
    assert json.loads(read_tsv(row)[1]) == {"type": "text", "text": {"body": "Olá\tmundo"}}
    as_json = run("db", "query", "--json", sql)
    assert [json.loads(line) for line in as_json.output.splitlines()] == [
        {"id": nid, "message": {"type": "text", "text": {"body": "Olá\tmundo"}}, "last_error": None, "pct": "a%b"}]
