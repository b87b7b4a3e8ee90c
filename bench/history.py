"""Claim + record throughput as finished history grows, and how fast the ops page's and `wa-outbox status`'s queries
answer on the largest history.

    nice -n 10 .venv/bin/python bench/history.py --prepare-only        # build what is missing (not a measurement)
    flock /work/bench.lock .venv/bin/python bench/history.py [--sizes 10000,1000000,10000000] [--json PATH]

For each size H, a database holds H finished messages (read, delivered, sent, failed, dead, cancelled: ~3 timeline
events each), H/4 contacts and H webhook events (processed status and inbound-message updates), spread over the last
30 days, then 100,000 queued messages to 100,000 recipients (the same for every size, spread over the contacts).
Two dry-run worker processes (batch 128, as a real worker claims and records: no HTTP) drain the queue; the rate is
queued messages / seconds until none is queued or sending. The goal: the largest history's rate >= 1/1.5 of the
smallest's (the smallest is the reference, measured in the same run).

History is generated with set-based SQL at schema version 3 (which never changes) into a template database per size,
kept (`wa_outbox_history_tpl_<H>`) so repeated runs copy it (CREATE DATABASE ... TEMPLATE, file copy) instead of
generating again; each copy is then upgraded to this checkout's head, so index changes of version 4 are measured
against the same data. `--drop-templates` removes the templates (they take ~1.5 GB per million messages).

Before draining, the indexes of notifications and contacts, and the contacts, are read into the OS page cache (not
shared_buffers: a server that has been running has them there; without it the result depends on what earlier runs
left cached), and the claim, record and status statements are EXPLAINed (ANALYZE, BUFFERS) on each size (inside a
transaction that is rolled back). On the largest, the ops page's and `wa-outbox status`'s queries are timed first,
with the 100,000 messages queued (first run and best of 3 after it; EXPLAIN ANALYZE printed for the slow ones).

`--shape distinct` (issue 22's second measurement; `--sizes 0,2000000` by default) is another shape of history: H
finished messages, each to its own recipient (one contact row each, as pair pacing leaves them; none of them is in the
queue), 3 timeline events each, no webhook events; then 20,000 messages queued to 20,000 new recipients with
`enqueue_many` and `VACUUM ANALYZE`; the same drain. Its reference is the smallest size (0: no history at all), in the
same run. Its templates are `wa_outbox_history_distinct_tpl_<H>`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.outbox import SENDER, SPAWN, TOKEN, _run_worker, machine_facts, server_url  # noqa: E402
from wa_outbox import db, migrate  # noqa: E402
from wa_outbox.config import Settings  # noqa: E402
from wa_outbox.enqueue import enqueue_many  # noqa: E402
from wa_outbox.number_health import BANNED_STATES  # noqa: E402
from wa_outbox.queries.ops import THROUGHPUT_EVENTS  # noqa: E402
from wa_outbox.worker._sender import claim_pacing  # noqa: E402

QUEUED = 100_000
DISTINCT_QUEUED = 20_000      # --shape distinct: queued to new recipients with enqueue_many
DISTINCT_BASE = 5512000000000  # --shape distinct: history recipient j is DISTINCT_BASE + j
DISTINCT_NEW = 5513000000000   # --shape distinct: queued recipient i is DISTINCT_NEW + i (none in the history)
SHAPES = ("spread", "distinct")
SETUP = (2, 128)              # worker processes, batch
BASE_VERSION = "0003_operations"  # shipped: the generated history never goes stale
RECIPIENT_BASE = 5511900000000
SPREAD = 2_500_000            # queued recipients are spread over this many numbers (the 10M history's contacts)
TABLES = ("notifications", "notification_events", "contacts", "webhook_events")
PENDING = ("SELECT EXISTS (SELECT 1 FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked) "
           "OR EXISTS (SELECT 1 FROM wa_outbox.notifications WHERE status = 'queued' AND blocked) "
           "OR EXISTS (SELECT 1 FROM wa_outbox.notifications WHERE status = 'sending')")  # partial indexes only


def db_url(server: str, name: str) -> str:
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def exists(server: str, name: str) -> bool:
    with psycopg.connect(server, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def template_name(size: int, shape: str = "spread") -> str:
    return f"wa_outbox_history_tpl_{size}" if shape == "spread" else f"wa_outbox_history_{shape}_tpl_{size}"


def run_name(size: int, shape: str = "spread") -> str:
    return f"wa_outbox_history_run_{size}" if shape == "spread" else f"wa_outbox_history_{shape}_run_{size}"


def queued_for(shape: str) -> int:
    return QUEUED if shape == "spread" else DISTINCT_QUEUED


# --- history --------------------------------------------------------------------------------------------------------

def without_secondary_indexes(conn: psycopg.Connection, load: Any) -> None:
    """Run load() with the history tables' secondary indexes and unique constraints dropped, then build them again
    (one sorted build each instead of millions of random insertions). Primary keys stay: rows arrive in key order."""
    rows = conn.execute(
        "SELECT i.indexrelid::regclass::text AS index, c.conname, pg_get_indexdef(i.indexrelid) AS indexdef, "
        "       i.indrelid::regclass::text AS tbl, pg_get_constraintdef(c.oid) AS condef "
        "FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.contype IN ('u', 'x') "
        "WHERE i.indrelid = ANY (%s::regclass[]) AND NOT i.indisprimary",
        ([f"wa_outbox.{t}" for t in TABLES],)).fetchall()
    for index, conname, _, tbl, _ in rows:
        conn.execute(f"ALTER TABLE {tbl} DROP CONSTRAINT {conname}" if conname else f"DROP INDEX {index}")
    load()
    for _, conname, indexdef, tbl, condef in rows:
        conn.execute(f"ALTER TABLE {tbl} ADD CONSTRAINT {conname} {condef}" if conname else indexdef)


def generate(url: str, size: int) -> None:
    """size finished messages with their timeline, size/4 contacts, size webhook events, over the last 30 days."""
    contacts = max(size // 4, 1)
    step = f"interval '30 days' / {size}"

    def load() -> None:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(f"""
                INSERT INTO wa_outbox.notifications
                    (phone_number_id, recipient, message, idempotency_key, request_hash, status, attempts,
                     next_attempt_at, last_error, wamid, correlation_id, created_at, updated_at, sent_at,
                     delivered_at, read_at)
                SELECT %(sender)s, r.recipient,
                       jsonb_build_object('type', 'text', 'text', jsonb_build_object(
                           'body', 'Your order ' || j || ' has shipped and will arrive tomorrow.')),
                       CASE WHEN j %% 5 = 0 THEN 'order-' || j END,
                       CASE WHEN j %% 5 = 0 THEN md5(j::text) ELSE '' END,
                       s.status, 1, t.at,
                       CASE WHEN s.status IN ('dead', 'failed') THEN jsonb_build_object(
                           'code', (ARRAY[131026, 131000, 131047, 130472])[1 + j %% 4],
                           'message', 'Message undeliverable') END,
                       CASE WHEN s.status NOT IN ('dead', 'cancelled') THEN 'wamid.HBgN' || md5(j::text) END,
                       CASE WHEN j %% 10 < 3 THEN 'req-' || md5((-j)::text) END,
                       t.at, t.at + interval '5 seconds',
                       CASE WHEN s.status IN ('sent', 'delivered', 'read', 'failed')
                            THEN t.at + interval '1 second' END,
                       CASE WHEN s.status IN ('delivered', 'read') THEN t.at + interval '3 seconds' END,
                       CASE WHEN s.status = 'read' THEN t.at + interval '5 seconds' END
                FROM generate_series(1, %(size)s) j,
                     LATERAL (SELECT (%(base)s + (j::bigint * 7919) %% %(contacts)s)::text AS recipient) r,
                     LATERAL (SELECT CASE WHEN j %% 100 < 70 THEN 'read' WHEN j %% 100 < 90 THEN 'delivered'
                                          WHEN j %% 100 < 97 THEN 'sent' WHEN j %% 100 = 97 THEN 'failed'
                                          WHEN j %% 100 = 98 THEN 'dead' ELSE 'cancelled' END AS status) s,
                     LATERAL (SELECT now() - interval '30 days' + (j - 1) * {step} AS at) t
                ORDER BY j""", {"sender": SENDER, "size": size, "base": RECIPIENT_BASE, "contacts": contacts})
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("""
                INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, created_at)
                SELECT n.id, e.event, CASE WHEN e.event = 'queued' THEN 0 ELSE 1 END, e.detail,
                       n.created_at + e.after
                FROM wa_outbox.notifications n,
                     LATERAL (VALUES (1, 'queued', NULL::jsonb, interval '0'),
                                     (2, 'sending', jsonb_build_object('worker', 'web-1:4242:a1b2c3'), interval '1 s'),
                                     (3, CASE n.status WHEN 'cancelled' THEN 'cancelled' ELSE n.status END,
                                      CASE WHEN n.wamid IS NOT NULL THEN jsonb_build_object('wamid', n.wamid)
                                           ELSE n.last_error END, interval '3 s')) e(ord, event, detail, after)
                WHERE n.status <> 'cancelled' OR e.ord <> 2
                ORDER BY n.id, e.ord""")
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("""
                INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, profile_name, last_inbound_at, updated_at)
                SELECT %(sender)s, (%(base)s + c)::text, 'Customer ' || c,
                       CASE WHEN c %% 10 < 3 THEN now() - (c %% 720) * interval '1 hour' END,
                       now() - (c %% 720) * interval '1 hour'
                FROM generate_series(0, %(contacts)s - 1) c""",
                         {"sender": SENDER, "base": RECIPIENT_BASE, "contacts": contacts})
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("""
                INSERT INTO wa_outbox.webhook_events
                    (dedup_key, field, kind, account_id, phone_number_id, wamid, update_status, payload, status,
                     attempts, received_at, processed_at)
                SELECT CASE WHEN w.inbound THEN 'm:' || w.wamid ELSE 's:' || w.wamid || ':' || n.status END,
                       'messages', CASE WHEN w.inbound THEN 'message' ELSE 'status' END, '200000000000001',
                       n.phone_number_id, w.wamid, CASE WHEN NOT w.inbound THEN n.status END,
                       CASE WHEN w.inbound THEN jsonb_build_object('field', 'messages', 'value', jsonb_build_object(
                                'messaging_product', 'whatsapp',
                                'metadata', jsonb_build_object('phone_number_id', n.phone_number_id),
                                'contacts', jsonb_build_array(jsonb_build_object(
                                    'wa_id', n.recipient, 'profile', jsonb_build_object('name', 'Customer'))),
                                'messages', jsonb_build_array(jsonb_build_object(
                                    'from', n.recipient, 'id', w.wamid, 'type', 'text',
                                    'timestamp', extract(epoch FROM n.created_at)::bigint::text,
                                    'text', jsonb_build_object('body', 'Thanks!')))))
                            ELSE jsonb_build_object('field', 'messages', 'value', jsonb_build_object(
                                'messaging_product', 'whatsapp',
                                'metadata', jsonb_build_object('phone_number_id', n.phone_number_id),
                                'statuses', jsonb_build_array(jsonb_build_object(
                                    'id', w.wamid, 'status', n.status, 'recipient_id', n.recipient,
                                    'timestamp', extract(epoch FROM n.created_at)::bigint::text,
                                    'biz_opaque_callback_data', 'wa-outbox:' || n.id))))
                       END,
                       'done', 1, n.created_at + interval '6 seconds', n.created_at + interval '7 seconds'
                FROM wa_outbox.notifications n,
                     LATERAL (SELECT mod(n.id, 10) = 0 OR n.wamid IS NULL AS inbound) i,
                     LATERAL (SELECT i.inbound, CASE WHEN i.inbound THEN 'wamid.in' || md5(n.id::text)
                                                     ELSE n.wamid END AS wamid) w
                ORDER BY n.id""")

    with psycopg.connect(url, autocommit=True) as conn:
        without_secondary_indexes(conn, load)
        for table in TABLES:
            conn.execute(f"VACUUM (FREEZE, ANALYZE) wa_outbox.{table}")  # as autovacuum leaves old history


def generate_distinct(url: str, size: int) -> None:
    """size finished messages, each to its own recipient, 3 timeline events each (queued, sending, the outcome), and
    one contact per recipient with its pair-pacing budget long past (what the worker's claims leave)."""
    if size == 0:
        return
    step = f"interval '30 days' / {size}"

    def load() -> None:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(f"""
                INSERT INTO wa_outbox.notifications
                    (phone_number_id, recipient, message, request_hash, status, attempts, next_attempt_at, wamid,
                     created_at, updated_at, sent_at, delivered_at, read_at)
                SELECT %(sender)s, (%(base)s + j)::text,
                       jsonb_build_object('type', 'text', 'text', jsonb_build_object(
                           'body', 'Your order ' || j || ' has shipped and will arrive tomorrow.')),
                       '', s.status, 1, t.at, 'wamid.HBgN' || md5(j::text), t.at, t.at + interval '5 seconds',
                       t.at + interval '1 second',
                       CASE WHEN s.status IN ('delivered', 'read') THEN t.at + interval '3 seconds' END,
                       CASE WHEN s.status = 'read' THEN t.at + interval '5 seconds' END
                FROM generate_series(1, %(size)s) j,
                     LATERAL (SELECT CASE WHEN j %% 10 < 7 THEN 'read' WHEN j %% 10 < 9 THEN 'delivered'
                                          ELSE 'sent' END AS status) s,
                     LATERAL (SELECT now() - interval '30 days' + (j - 1) * {step} AS at) t
                ORDER BY j""", {"sender": SENDER, "size": size, "base": DISTINCT_BASE})
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("""
                INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, created_at)
                SELECT n.id, e.event, e.attempt, e.detail, n.created_at + e.after
                FROM wa_outbox.notifications n,
                     LATERAL (VALUES (1, 'queued', 0, NULL::jsonb, interval '0'),
                                     (2, 'sending', 1, jsonb_build_object('worker', 'web-1:4242:a1b2c3'),
                                      interval '1 s'),
                                     (3, n.status, 1, jsonb_build_object('wamid', n.wamid), interval '3 s'))
                         e(ord, event, attempt, detail, after)
                ORDER BY n.id, e.ord""")
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("""
                INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, pair_paced_until, updated_at)
                SELECT phone_number_id, recipient, created_at + interval '6 seconds', created_at
                FROM wa_outbox.notifications ORDER BY phone_number_id, recipient""")

    with psycopg.connect(url, autocommit=True) as conn:
        without_secondary_indexes(conn, load)
        for table in TABLES:
            conn.execute(f"VACUUM (FREEZE, ANALYZE) wa_outbox.{table}")


def ensure_template(server: str, size: int, shape: str = "spread") -> str:
    """The template database of `size` messages of history (built under a temporary name, renamed when complete)."""
    name = template_name(size, shape)
    if exists(server, name):
        return name
    building = f"{name}_building"
    drop(server, building)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{building}"')
    started = time.perf_counter()
    migrate.upgrade(db_url(server, building), BASE_VERSION)
    (generate if shape == "spread" else generate_distinct)(db_url(server, building), size)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
    print(f"  generated {name} in {time.perf_counter() - started:.0f} s", flush=True)
    return name


def fill_queue(url: str) -> None:
    """QUEUED due messages to QUEUED recipients spread over the contacts, each with its `queued` event, as
    enqueue_many writes them; then ANALYZE (as autovacuum would after such an insert)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("""
            WITH new AS (
                INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash)
                SELECT %(sender)s, (%(base)s + (i::bigint * 7919) %% %(spread)s)::text,
                       jsonb_build_object('type', 'text', 'text', jsonb_build_object('body', 'Your code is ' || i)), ''
                FROM generate_series(1, %(n)s) i
                RETURNING id
            )
            INSERT INTO wa_outbox.notification_events (notification_id, event, attempt)
            SELECT id, 'queued', 0 FROM new""",
                     {"sender": SENDER, "base": RECIPIENT_BASE, "spread": SPREAD, "n": QUEUED})
        conn.execute("VACUUM ANALYZE wa_outbox.notifications")
        conn.execute("ANALYZE")


def fill_queue_distinct(url: str) -> None:
    """DISTINCT_QUEUED messages to as many new recipients, queued with enqueue_many (in batches of 1,000, as an
    import would), then VACUUM ANALYZE."""
    with psycopg.connect(url) as conn:
        for first in range(0, DISTINCT_QUEUED, 1000):
            enqueue_many(conn, [{"to": str(DISTINCT_NEW + i), "phone_number_id": SENDER,
                                 "message": {"type": "text", "text": {"body": f"Your code is {i}"}}}
                                for i in range(first, min(first + 1000, DISTINCT_QUEUED))])
            conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def schema_fingerprint() -> str:
    """This checkout's migrations, hashed: a run database prepared from other migrations (another branch's, or an
    earlier edit of the head migration, which upgrade() would not apply again) is not this checkout's schema."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "migrations" / "sql").glob("*.sql")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"wa-outbox history run, migrations {digest.hexdigest()[:16]}"


def prepared_from(server: str, name: str) -> str | None:
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                           (name,)).fetchone()
    return row[0] if row else None


def prepare(server: str, size: int, shape: str = "spread") -> str:
    """The run database for `size`: a copy of its template, upgraded to head, with the queue filled. One left by an
    earlier run is reused only if it was prepared from this checkout's migrations (else it is prepared again)."""
    name = run_name(size, shape)
    if exists(server, name):
        if prepared_from(server, name) == schema_fingerprint():
            return name
        print(f"  {name} was prepared from other migrations: preparing it again", flush=True)
        drop(server, name)
    template = ensure_template(server, size, shape)
    building = f"{name}_building"
    drop(server, building)
    started = time.perf_counter()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{building}" TEMPLATE "{template}" STRATEGY FILE_COPY')
    url = db_url(server, building)
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO wa_outbox.settings (key, value) VALUES ('default_phone_number_id', %s) "
                     "ON CONFLICT (key) DO NOTHING", (SENDER,))
    (fill_queue if shape == "spread" else fill_queue_distinct)(url)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(building),
                                                                    sql.Literal(schema_fingerprint())))
        conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
    print(f"  prepared {name} in {time.perf_counter() - started:.0f} s", flush=True)
    return name


# --- EXPLAIN --------------------------------------------------------------------------------------------------------

def claim_params() -> dict[str, Any]:
    return {"limit": SETUP[1], "worker_id": "bench", "lease_seconds": 60, "default_mps": 1e6,
            **claim_pacing(Settings())}


def explain(conn: psycopg.Connection, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of named query `name`: its time, buffers and the plan text."""
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + db.query(name), params).fetchone()[0][0]
    text = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + db.query(name), params))
    top = plan["Plan"]
    return {"ms": round(plan["Execution Time"], 2), "planning_ms": round(plan["Planning Time"], 2),
            "shared_hit": top.get("Shared Hit Blocks"), "shared_read": top.get("Shared Read Blocks"),
            "plan": text}


def explain_hot_path(url: str) -> dict[str, Any]:
    """The claim, record and status statements, each EXPLAINed on a batch, in one transaction rolled back (the
    second EXPLAIN of each runs on the rows the first left: the text plan is for reading, the figures are the
    first's)."""
    out = {}
    with psycopg.connect(url) as conn:
        params = claim_params()
        out["claim"] = explain(conn, "claim_notifications", params)
        claimed = conn.execute(db.query("claim_notifications"), params).fetchall()
        ids = [r[0] for r in claimed]
        outcomes = [{"id": i, "status": "sent", "event": "sent", "wamid": f"wamid.HBgNexplain{i}", "error": None,
                     "delay": None, "refund": False, "detail": {}} for i in ids]
        out["record"] = explain(conn, "record_outcomes", {"worker_id": "bench", "outcomes": json.dumps(outcomes)})
        conn.execute(db.query("record_outcomes"), {"worker_id": "bench", "outcomes": json.dumps(outcomes)})
        statuses = [{"event_id": k, "wamid": f"wamid.HBgNexplain{i}", "status": "delivered", "notification_id": i,
                     "errors": None, "ts": int(time.time())} for k, i in enumerate(ids)]
        out["status"] = explain(conn, "apply_statuses", {"statuses": json.dumps(statuses)})
        out["batch"] = len(ids)
        conn.rollback()
    return out


OPS_QUERIES: dict[str, dict[str, Any]] = {
    "ops_queue_depth": {"cap": 10_000},
    "ops_throughput": dict(THROUGHPUT_EVENTS),
    # the whole hour: a page's first load (refreshes read a few minutes)
    "ops_sender_outcomes": {"since": None, **THROUGHPUT_EVENTS},
    "ops_workers": {},
    "ops_senders": {"environment_sender": "100000000000001", "environment_token_source": "env:WHATSAPP_ACCESS_TOKEN",
                    "environment_token_fingerprint": None, "banned_states": list(BANNED_STATES)},
    "ops_dead_groups": {"groups": 50, "samples": 5},
    "ops_campaigns": {"limit": 20},
    "ops_endpoints": {"limit": 50, "attempts": 5, "cap": 10_000},
    "ops_dead_group_ids": {"code": "131026", "up_to_id": 9223372036854775807, "before_id": None, "limit": 500},
    "ops_session_check": {"id": bytes(32)},  # every /ops request runs it (here a session that is not there)
    "ops_unregistered": {"limit": 20},
    "queue_metrics": {},
    "worker_metrics_totals": {},
    "tables_to_analyze": {"min_changes": 1000},
}


def status_queries(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    """`wa-outbox status` (an id, a phone number, a correlation id), the ops search and the dead-letter list, with
    real terms from the history."""
    row = conn.execute("SELECT id, recipient, correlation_id FROM wa_outbox.notifications "
                       "WHERE correlation_id IS NOT NULL ORDER BY id LIMIT 1 OFFSET 1000").fetchone()
    nid, recipient, correlation = row
    queries: dict[str, dict[str, Any]] = {}
    for name in ("get_notification", "find_notifications", "ops_search", "list_dead"):
        text = db.query(name)
        names = set(re.findall(r"%\((\w+)\)s", text))
        queries[name] = {k: v for k, v in {"id": nid, "recipient": recipient, "correlation_id": correlation,
                                           "term": recipient, "limit": 50, "code": None, "before_id": None,
                                           "phone_number_id": None}.items() if k in names}
        missing = names - set(queries[name])
        if missing:
            raise SystemExit(f"{name}: no bench value for {sorted(missing)}")
    return queries


WRITES = {"ops_session_open", "ops_session_close"}

SLOW_MS = 25  # a query over a quarter of the goal gets its plan printed (and kept in the results)


def time_queries(url: str) -> list[dict[str, Any]]:
    """Each ops/status query, run as the page and the CLI run it (a plain statement, timed by the client): its first
    run (cold: the database copy was just made; nothing of it is in shared_buffers) and the best of 3 runs after
    that (warm), then one EXPLAIN (ANALYZE, BUFFERS), whose figure is the server's own (its per-row timing makes
    row-heavy plans look slower than they run). The goal: best < 100 ms. Plans of the slow ones are printed."""
    rows = []
    with psycopg.connect(url, autocommit=True) as conn:
        queries = {**OPS_QUERIES, **status_queries(conn)}
        # Logging in and out write one row by primary key (tests/db/test_ops.py checks their plans): not page reads.
        missing = {p.stem for p in (ROOT / "wa_outbox" / "sql").glob("ops_*.sql")} - set(queries) - WRITES
        if missing:
            raise SystemExit(f"ops queries not timed: {sorted(missing)}")
        for name, params in queries.items():
            times = []
            for _ in range(4):
                started = time.perf_counter()
                conn.execute(db.query(name), params).fetchall()
                times.append((time.perf_counter() - started) * 1000)
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + db.query(name), params).fetchone()[0][0]
            best = min(times[1:])
            row = {"query": name, "ms": round(best, 2), "first_ms": round(times[0], 2),
                   "explain_ms": round(plan["Execution Time"] + plan["Planning Time"], 2),
                   "planning_ms": round(plan["Planning Time"], 2),
                   "shared_read": plan["Plan"].get("Shared Read Blocks"), "met": best < 100}
            print(f"  {name:<26} {best:>9.2f} ms warm {times[0]:>9.2f} ms first   "
                  f"(EXPLAIN ANALYZE {row['explain_ms']:.2f} ms)", flush=True)
            if max(best, times[0], row["explain_ms"]) >= SLOW_MS:
                row["plan"] = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + db.query(name),
                                                                    params))
                print("    " + row["plan"].replace("\n", "\n    "), flush=True)
            rows.append(row)
    return rows


# --- the drain ------------------------------------------------------------------------------------------------------

def io_counters(url: str) -> dict[str, int]:
    """Blocks each wa_outbox table and index read from outside shared_buffers (this database only), and the WAL
    full-page images and bytes written (the whole server: other databases' writes count too)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname AS rel, coalesce(heap_blks_read, 0) AS blocks FROM pg_statio_user_tables "
            "WHERE schemaname = 'wa_outbox' UNION ALL SELECT indexrelname, idx_blks_read FROM pg_statio_user_indexes "
            "WHERE schemaname = 'wa_outbox' UNION ALL SELECT 'WAL full-page images', wal_fpi FROM pg_stat_wal "
            "UNION ALL SELECT 'WAL bytes', wal_bytes::bigint FROM pg_stat_wal").fetchall()
    return {r[0]: r[1] for r in rows}


def drain(url: str, queued: int = QUEUED) -> dict[str, Any]:
    """Messages/s of SETUP dry-run workers from their start until nothing is queued or sending; per-second series;
    per message, the blocks each relation read from outside shared_buffers and the WAL written meanwhile."""
    processes, concurrency = SETUP
    settings = dataclasses.replace(
        Settings.from_env({}), database_url=url, access_token=TOKEN, phone_number_id=SENDER,
        worker_concurrency=concurrency, rate_limit_mps=1e6, poll_interval=0.1, dry_run=True)
    with psycopg.connect(url, autocommit=True) as conn:
        first = conn.execute("SELECT min(id) FROM wa_outbox.notifications WHERE status = 'queued'").fetchone()[0]
    before = io_counters(url)
    start, stop = SPAWN.Barrier(processes + 1), SPAWN.Event()
    workers = [SPAWN.Process(target=_run_worker, args=(settings, start, stop), daemon=True)
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    series = []
    with psycopg.connect(url, autocommit=True) as conn:
        start.wait(timeout=120)
        started = time.perf_counter()
        next_sample = 1.0
        while conn.execute(PENDING).fetchone()[0]:
            time.sleep(0.05)
            if time.perf_counter() - started >= next_sample:
                done = conn.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE "
                                    "notification_id >= %s AND event = 'sent'", (first,)).fetchone()[0]
                series.append([round(next_sample), done])
                next_sample += 1.0
        seconds = time.perf_counter() - started
        sent = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE id >= %s AND status = 'sent'",
                            (first,)).fetchone()[0]
    stop.set()
    for worker in workers:
        worker.join(60)
    if sent != queued:
        raise SystemExit(f"only {sent} of {queued} queued messages were sent")
    time.sleep(1)  # the workers' statistics reach the cumulative views at their exit, within a second
    after = io_counters(url)
    per_message = {k: round((after[k] - before.get(k, 0)) / queued, 3) for k in after
                   if after[k] - before.get(k, 0) >= queued // 100}
    return {"rate": queued / seconds, "seconds": seconds, "sent_per_second": series, "per_message": per_message}


def warm(url: str) -> float:
    """Read the indexes of the history tables and the contacts into the OS page cache (pg_prewarm, 'read' mode: not
    into shared_buffers), as on a server that has been running: the drain then measures the per-message work on big
    tables, not which files the last run happened to leave cached. Returns the seconds it took."""
    started = time.perf_counter()
    tables = [f"wa_outbox.{t}" for t in ("notifications", "contacts")]
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        except psycopg.errors.FeatureNotSupported:  # the embedded server (pgserver) ships no pg_prewarm
            read_files(conn, tables)
        else:
            conn.execute("SELECT pg_prewarm(i.indexrelid, 'read') FROM pg_index i "
                         "WHERE i.indrelid = ANY (%s::regclass[])", (tables,))
            conn.execute("SELECT pg_prewarm('wa_outbox.contacts', 'read')")
    return time.perf_counter() - started


def read_files(conn: psycopg.Connection, tables: list[str]) -> None:
    """What pg_prewarm(..., 'read') does, from this process: read the same relations' files (every 1 GB segment),
    which needs the server on this machine and its data directory readable."""
    rows = conn.execute(
        "SELECT current_setting('data_directory') || '/' || pg_relation_filepath(r) AS path "
        "FROM (SELECT i.indexrelid::regclass AS r FROM pg_index i WHERE i.indrelid = ANY (%s::regclass[]) "
        "      UNION ALL SELECT 'wa_outbox.contacts'::regclass) x", (tables,)).fetchall()
    for (path,) in rows:
        segments = [Path(path)] + sorted(Path(path).parent.glob(Path(path).name + ".[0-9]*"))
        for segment in segments:
            try:
                with segment.open("rb", buffering=0) as f:
                    while f.read(1 << 20):
                        pass
            except OSError as e:
                raise SystemExit(f"no pg_prewarm on this server, and its files cannot be read here: {e}") from e


def sizes_on_disk(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, n_live_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables "
            "WHERE schemaname = 'wa_outbox' AND relname = ANY (%s)", (list(TABLES),)).fetchall()
        total = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return {"tables": {r[0]: {"rows": r[1], "bytes": r[2]} for r in rows}, "database_bytes": total}


def label(size: int) -> str:
    return f"{size / 1e6:g}M" if size >= 1_000_000 else f"{size / 1e3:g}k" if size else "0"


def goal_for(shape: str, largest: int) -> float:
    """Issue 22's goals: 1/1.5 for the spread shape; for the distinct shape >= 0.75 up to 2 M, >= 0.67 beyond."""
    return 1 / 1.5 if shape == "spread" or largest > 2_000_000 else 0.75


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=SHAPES, default="spread",
                        help="spread: recipients shared, 100,000 queued; distinct: every recipient its own, 20,000 "
                             "queued with enqueue_many (see above)")
    parser.add_argument("--sizes", help="finished messages of history per case, comma-separated (default 10k, 1M, "
                                        "10M; with --shape distinct 0, 2M)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="build the missing templates and run databases, measure nothing (run it outside the "
                             "bench lock, with nice)")
    parser.add_argument("--keep", action="store_true", help="keep the drained run databases (to look at them)")
    parser.add_argument("--drop-templates", action="store_true", help="drop the history templates and run databases")
    add_json_argument(parser)
    args = parser.parse_args()
    shape = args.shape
    default_sizes = "10000,1000000,10000000" if shape == "spread" else "0,2000000"
    sizes = sorted(int(s) for s in (args.sizes or default_sizes).split(","))
    if len(sizes) < 2 or sizes[0] < 0 or (shape == "spread" and sizes[0] == 0):
        parser.error("--sizes: two sizes or more, >= 0 (>= 1 for --shape spread)")
    queued = queued_for(shape)
    server = server_url()
    if args.drop_templates:
        for size in sizes:
            for name in (run_name(size, shape), template_name(size, shape)):
                drop(server, name)
        return
    for size in sizes:
        prepare(server, size, shape)
    if args.prepare_only:
        return

    facts = machine_facts(server)
    cases: dict[int, dict[str, Any]] = {}
    for size in sizes:
        url = db_url(server, run_name(size, shape))
        case: dict[str, Any] = {"history": size, "disk": sizes_on_disk(url)}
        # with the queue full; before warm(): their reads must not decide what the drain finds
        if size == sizes[-1] and shape == "spread":
            print(f"ops and status queries on {label(size)} messages of history:", flush=True)
            case["queries"] = time_queries(url)
        case["warm_seconds"] = warm(url)
        case["explain"] = explain_hot_path(url)
        case.update(drain(url, queued))
        e = case["explain"]
        print(f"{label(size):>5} history: {case['rate']:>7,.0f} messages/s claimed+recorded "
              f"({queued:,} in {case['seconds']:.1f} s); EXPLAIN claim {e['claim']['ms']} ms, "
              f"record {e['record']['ms']} ms, status {e['status']['ms']} ms", flush=True)
        print("        per message: " + ", ".join(f"{k} {v:g}" for k, v in sorted(
            case["per_message"].items(), key=lambda kv: -kv[1])), flush=True)
        cases[size] = case
        if not args.keep:
            drop(server, run_name(size, shape))

    smallest, largest = cases[sizes[0]], cases[sizes[-1]]
    ratio = largest["rate"] / smallest["rate"]
    goal = goal_for(shape, sizes[-1])
    print(f"largest/smallest: {ratio:.2f} (goal >= {goal:.2f})")
    suffix = "" if shape == "spread" else ", every recipient distinct"
    plot_name = "history-claim-rate" if shape == "spread" else f"history-{shape}-claim-rate"
    queries = largest.get("queries", [])
    results = {
        "shape": shape, "queued": queued, "setup": {"processes": SETUP[0], "batch": SETUP[1], "transport": "dry run"},
        "cases": {str(s): c for s, c in cases.items()},
        "ratio": ratio,
        # one row per size with a goal of its own (distinct: 2 M and 10 M), else the largest alone
        "headline": [{
            "what": f"claim + record, {label(size)} messages of history vs {label(sizes[0])} "
                    f"({SETUP[0]} workers x {SETUP[1]}, dry run{suffix})",
            "unit": "messages/s", "value": round(cases[size]["rate"]), "reference": round(smallest["rate"]),
            "reference_name": f"same drain on {label(sizes[0])} messages of history, same run",
            "ratio": round(cases[size]["rate"] / smallest["rate"], 3),
            "goal": f">= {goal_for(shape, size):.2f} of the reference",
            "met": cases[size]["rate"] / smallest["rate"] >= goal_for(shape, size)}
            for size in sizes[1:] if size == sizes[-1] or (shape == "distinct" and size >= 2_000_000)],
        "plots": [{
            "name": plot_name, "title": f"Claim rate vs history size{suffix}",
            "x_label": "finished messages of history (~3 timeline events each)",
            "y_label": "messages/s claimed and recorded", "kind": "line",
            "series": {f"{SETUP[0]} workers x {SETUP[1]}, dry run": [[s, round(c["rate"])] for s, c in cases.items()]},
        }],
        "tables": [
            {"title": "Claim, record and status statements: EXPLAIN (ANALYZE, BUFFERS) of one batch",
             "columns": ["history", "claim ms", "record ms", "status ms", "claim buffers read",
                         "record buffers read"],
             "rows": [[label(s), c["explain"]["claim"]["ms"], c["explain"]["record"]["ms"],
                       c["explain"]["status"]["ms"], c["explain"]["claim"]["shared_read"],
                       c["explain"]["record"]["shared_read"]] for s, c in cases.items()]},
            *([] if not queries else [{
              "title": f"Ops page and `wa-outbox status` queries on {label(sizes[-1])} messages of history, 100,000 "
                       "queued: ms as the client times the statement (first run, then best of the 3 after it) and "
                       "EXPLAIN ANALYZE's planning + execution",
              "columns": ["query", "ms (best)", "ms (first)", "EXPLAIN ANALYZE ms", "< 100 ms"],
              "rows": [[q["query"], q["ms"], q["first_ms"], q["explain_ms"], q["met"]] for q in queries]}]),
        ],
    }
    write(args.json, "history", results, facts=facts)


if __name__ == "__main__":
    main()
