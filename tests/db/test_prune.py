"""Retention: `wa-outbox prune` deletes finished messages with their timelines and old webhook dedup keys in bounded
batches, beside running claims and status webhooks (real Postgres, the real CLI through click's runner)."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from tests.conftest import post_webhook
from tests.live import SENDER
from wa_outbox import cli, db as wdb, outbox
from wa_outbox.config import Settings
from wa_outbox.retry import RetryPolicy
from wa_outbox.states import PRUNABLE_STATUSES, MessageStatus
from wa_outbox.worker._inbound import InboundProcessor
from wa_outbox.worker._sender import claim_pacing

TEXT = '{"type": "text", "text": {"body": "x"}}'
EVENTS_PER_MESSAGE = 3


@pytest.fixture
def engine(database_url):
    engine = wdb.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def messages(db, status: str, *, days_old: float, n: int = 1, wamid_prefix: str | None = None) -> list[int]:
    """n messages in `status`, last updated `days_old` days ago, each with a timeline of EVENTS_PER_MESSAGE events."""
    ids = [r[0] for r in db.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, wamid, "
        "locked_by, locked_until, created_at, updated_at) "
        "SELECT %(sender)s, (5511900000000 + i)::text, %(message)s, '', %(status)s, "
        "       CASE WHEN %(wamid)s::text IS NOT NULL THEN %(wamid)s || i END, "
        "       CASE WHEN %(status)s = 'sending' THEN 'elsewhere' END, "
        "       CASE WHEN %(status)s = 'sending' THEN now() + interval '1 minute' END, "
        "       now() - make_interval(days => %(days)s + 1), now() - make_interval(secs => %(days)s * 86400) "
        "FROM generate_series(1, %(n)s) i RETURNING id",
        {"sender": SENDER, "message": TEXT, "status": status, "days": days_old, "n": n,
         "wamid": wamid_prefix})]
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event) "
               "SELECT id, e FROM unnest(%s::bigint[]) id, unnest(ARRAY['queued', 'sending', 'sent']) e", (ids,))
    return ids


def webhook_event(db, status: str, *, days_old: float, key: str, body: bytes | None = None) -> int:
    if body is not None:
        db.execute("INSERT INTO wa_outbox.webhook_bodies (sha256, body) VALUES (sha256(%s), %s) "
                   "ON CONFLICT DO NOTHING", (body, body))
    return db.execute(
        "INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, payload, status, received_at, locked_by, "
        "locked_until, raw_body_sha256) VALUES (%s, 'messages', 'change', '{}', %s, "
        "now() - make_interval(secs => %s * 86400), CASE WHEN %s = 'processing' THEN 'w' END, "
        "CASE WHEN %s = 'processing' THEN now() + interval '1 minute' END, sha256(%s)) RETURNING id",
        (key, status, days_old, status, status, body)).fetchone()[0]


def surviving(db, ids: list[int]) -> set[int]:
    return {r[0] for r in db.execute("SELECT id FROM wa_outbox.notifications WHERE id = ANY(%s)", (ids,))}


def events_of(db, ids: list[int]) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE notification_id = ANY(%s)",
                      (ids,)).fetchone()[0]


def test_only_old_finished_messages_go_with_their_timelines_and_dead_only_when_asked(db, engine):
    old = {s: messages(db, s, days_old=40, n=2) for s in MessageStatus}
    recent = {s: messages(db, s, days_old=29, n=2) for s in MessageStatus}
    result = outbox.prune(engine, days=30)

    gone = [i for s in PRUNABLE_STATUSES for i in old[s]]
    assert surviving(db, gone) == set() and events_of(db, gone) == 0
    kept = [i for s in MessageStatus if s not in PRUNABLE_STATUSES for i in old[s]]
    kept += [i for ids in recent.values() for i in ids]
    assert surviving(db, kept) == set(kept) and events_of(db, kept) == EVENTS_PER_MESSAGE * len(kept)
    assert (result.messages, result.events) == (len(gone), EVENTS_PER_MESSAGE * len(gone))
    assert set(PRUNABLE_STATUSES) == {"sent", "delivered", "read", "failed", "cancelled"}

    result = outbox.prune(engine, days=30, dead_days=35)  # the dead-letter queue only when the operator asks
    assert surviving(db, old[MessageStatus.DEAD]) == set() and result.messages == 2
    assert surviving(db, recent[MessageStatus.DEAD]) == set(recent[MessageStatus.DEAD])
    for unfinished in ("queued", "sending", "unknown"):
        assert surviving(db, old[unfinished]) == set(old[unfinished])


def test_batches_are_bounded_and_the_walk_covers_every_old_row(db, engine):
    ids = messages(db, "read", days_old=40, n=25)
    # kept rows between the old ones: a batch walks past them without deleting them
    queued = messages(db, "queued", days_old=40, n=40)
    more = messages(db, "delivered", days_old=40, n=7)
    seen: list[tuple[int, int]] = []
    result = outbox.prune(engine, days=30, batch_size=4,
                          progress=lambda r: seen.append((r.messages, r.events)))
    deltas = [b[0] - a[0] for a, b in zip([(0, 0)] + seen, seen, strict=False)]
    assert max(deltas) <= 4 and result.batches == len(seen) >= 8
    assert result.messages == 32 and surviving(db, ids + more) == set()
    assert surviving(db, queued) == set(queued)
    assert result.longest_batch_seconds > 0


def test_dedup_keys_younger_than_eight_days_survive_whatever_the_retention(db, engine):
    # in the order they were received, as ids grow
    dead_old = webhook_event(db, "dead", days_old=40, key="s:dead-old")
    pending = [webhook_event(db, s, days_old=40, key=f"s:{s}") for s in ("queued", "processing")]
    webhook_event(db, "done", days_old=8.1, key="s:old")
    young = webhook_event(db, "done", days_old=7.9, key="s:young")
    dead_young = webhook_event(db, "dead", days_old=7.5, key="s:dead-young")

    def remaining() -> set[int]:
        return {r[0] for r in db.execute("SELECT id FROM wa_outbox.webhook_events")}

    assert outbox.prune(engine, days=1).webhook_events == 1
    assert remaining() == {young, *pending, dead_young, dead_old}
    assert outbox.prune(engine, days=1, dead_days=1).webhook_events == 1  # dead: also never before 8 days
    assert remaining() == {young, *pending, dead_young}


def test_raw_bodies_go_with_the_last_event_that_refers_to_them(db, engine):
    webhook_event(db, "done", days_old=20, key="d:a", body=b"shared\x00")
    webhook_event(db, "done", days_old=20, key="d:c", body=b"alone\x00")
    webhook_event(db, "done", days_old=2, key="d:b", body=b"shared\x00")
    assert outbox.prune(engine, days=10).webhook_events == 2
    assert [bytes(r[0]) for r in db.execute("SELECT body FROM wa_outbox.webhook_bodies")] == [b"shared\x00"]


def test_a_row_another_transaction_holds_is_skipped_not_waited_for(database_url, db, engine):
    ids = messages(db, "delivered", days_old=40, n=3)
    with psycopg.connect(database_url) as holder:  # as a status webhook being applied to ids[1] would
        holder.execute("SELECT 1 FROM wa_outbox.notifications WHERE id = %s FOR UPDATE", (ids[1],))
        done = run_in_thread(lambda: outbox.prune(engine, days=30))
        assert done.messages == 2 and surviving(db, ids) == {ids[1]}
    assert outbox.prune(engine, days=30).messages == 1  # the next run takes it


def run_in_thread(work, timeout: float = 20.0):
    """Run `work` in a thread and return its result; fail if it is still waiting (on a lock) after `timeout`."""
    box: dict = {}

    def target():
        try:
            box["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            box["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "blocked on a lock"
    if "error" in box:
        raise box["error"]
    return box["result"]


def claim_params(limit: int) -> dict:
    return {"limit": limit, "worker_id": "w1", "lease_seconds": 60, "default_mps": 1e6,
            **claim_pacing(Settings())}


def test_prune_and_claim_neither_blocks_nor_breaks_the_other(database_url, db, engine):
    old = messages(db, "read", days_old=40, n=30)
    queued = messages(db, "queued", days_old=40, n=10)
    db.execute("UPDATE wa_outbox.notifications SET next_attempt_at = now() - interval '1 minute' "
               "WHERE id = ANY(%s)", (queued,))
    # a claim in flight (its transaction open, its rows locked) while a prune runs
    with psycopg.connect(database_url) as claimer:
        claimer.execute("SET LOCAL lock_timeout = '10s'")
        claimed = claimer.execute(wdb.query("claim_notifications"), claim_params(5)).fetchall()
        assert len(claimed) == 5
        assert run_in_thread(lambda: outbox.prune(engine, days=30, batch_size=4)).messages == 30
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sending'").fetchone()[0] == 5
    # a prune batch in flight (its rows locked, as the batch's transaction holds them) while a worker claims
    old = messages(db, "sent", days_old=40, n=5)
    with psycopg.connect(database_url) as pruner:
        pruner.execute("SELECT 1 FROM wa_outbox.notifications WHERE id = ANY(%s) FOR UPDATE", (old,))
        rows = run_in_thread(lambda: wdb.fetch(engine, "claim_notifications", claim_params(10)))
        assert len(rows) == 5
    assert surviving(db, queued) == set(queued)


def test_a_status_for_a_pruned_message_is_recorded_unmatched_not_an_error(client, db, engine):
    [nid] = messages(db, "read", days_old=40, wamid_prefix="wamid.PRUNED")
    assert outbox.prune(engine, days=30).messages == 1
    value = {"messaging_product": "whatsapp", "metadata": {"phone_number_id": SENDER},
             "statuses": [{"id": "wamid.PRUNED1", "status": "read", "timestamp": "1749416400",
                           "recipient_id": "5511900000001", "biz_opaque_callback_data": str(nid)}]}
    r = post_webhook(client, {"object": "whatsapp_business_account",
                              "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}]})
    assert r.status_code == 200
    processor = InboundProcessor(engine, "in-1", [], RetryPolicy(base_seconds=0.01, max_seconds=0.05,
                                                                 max_attempts=3), 30.0)
    assert processor.process_batch() == 1
    [(status, note)] = db.execute("SELECT status, last_error FROM wa_outbox.webhook_events").fetchall()
    assert status == "done" and "no message of this outbox" in note


# --- the CLI -------------------------------------------------------------------------------------------------------

def test_cli_prints_a_summary_and_json(run, db):
    messages(db, "read", days_old=40, n=5)
    webhook_event(db, "done", days_old=40, key="s:x")
    r = run("prune", "--days", "30", "--batch-size", "2")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("pruned 5 messages (15 timeline events) and 1 webhook events in ")
    messages(db, "failed", days_old=40, n=3)
    r = run("prune", "--days", "30", "--json")
    summary = json.loads(r.output)
    assert r.exit_code == 0 and summary["messages"] == 3 and summary["events"] == 9 and summary["complete"]
    assert summary["webhook_events"] == 0 and summary["batches"] >= 1


@pytest.mark.parametrize("args, fragment", [
    (("--days", "0"), "--days"), (("--days", "x"), "--days"), (("--batch-size", "0"), "--batch-size"),
    (("--dead-days", "0"), "--dead-days"),
])
def test_cli_refuses_bad_options(run, db, args, fragment):
    messages(db, "read", days_old=40)
    r = run("prune", *args)
    assert r.exit_code == 2 and fragment in r.output
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 1


def test_an_interrupted_prune_keeps_its_batches_and_the_next_run_carries_on(run, db, monkeypatch):
    ids = messages(db, "delivered", days_old=40, n=10)
    calls = {"n": 0}

    def interrupt_after_two_batches(self, result):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(cli._PruneProgress, "__call__", interrupt_after_two_batches)
    r = run("prune", "--days", "30", "--batch-size", "3")
    assert r.exit_code == 130 and "interrupted" in r.output
    assert r.output.startswith("pruned 6 messages (18 timeline events)")
    assert len(surviving(db, ids)) == 4
    calls["n"] = 100  # no more interruptions
    r = run("prune", "--days", "30", "--batch-size", "3")
    assert r.exit_code == 0 and r.output.startswith("pruned 4 messages") and surviving(db, ids) == set()


def test_progress_redraws_one_line_on_a_terminal_and_writes_lines_to_a_log(capsys, monkeypatch):
    result = outbox.PruneResult(messages=2000, events=8000, batches=2, seconds=0.5, fraction=0.25)
    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: True)
    on_terminal = cli._PruneProgress()
    on_terminal.next_at = 0
    on_terminal(result)
    on_terminal.finish()
    drawn = capsys.readouterr().err
    assert drawn.startswith("\rmessages  25%  2,000 messages, 8,000 events, 0 webhook events  20,000 rows/s")
    assert drawn.endswith("\n") and drawn.count("\n") == 1
    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: False)
    in_a_log = cli._PruneProgress()
    in_a_log.next_at = 0
    in_a_log(result)
    in_a_log.finish()
    assert capsys.readouterr().err == ("prune: messages  25%  2,000 messages, 8,000 events, 0 webhook events  "
                                       "20,000 rows/s\n")
