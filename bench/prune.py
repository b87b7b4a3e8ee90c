"""Retention under load: `wa-outbox prune` deleting millions of finished rows while workers drain the queue beside it.

    flock /work/bench.lock .venv/bin/python bench/prune.py [--messages 1000000] [--queued 600000] [--json PATH]

In a scratch database (created and dropped) on DATABASE_URL's server (else the embedded one):
1. history: MESSAGES finished messages (read, 40-60 days old) with EVENTS_PER_MESSAGE timeline events each
   (queued, sending, sent, delivered: 5 million rows for a million messages), written set-based in id order as
   a live outbox writes them, then VACUUM ANALYZE (what autovacuum would have done on a live server);
2. a copy of the old events in a table of its own: what a time partition holding them would be, to time its DROP;
3. QUEUED due messages, and 2 worker processes x 128 in dry run (claim, record, timeline; no HTTP) draining them, and
   `outbox.prune(days=30)` (what `wa-outbox prune --days 30` runs) beside them in PHASE-second stretches with
   PHASE-second pauses between them: the reference is the workers' rate in the pauses (and PHASE seconds before the
   first stretch and after the last), interleaved with the stretches so that the machine's drifting load (other
   processes share it) weighs on both alike. The prune's rate is over its stretches only;
4. the workers' sends per second over the whole run, read afterwards from the timeline (its `sent` events, through
   the BRIN index on created_at: nothing samples the database while the run is measured);
5. sizes before and after the prune and after the VACUUM that follows it (what autovacuum has to do after a DELETE),
   against DROP TABLE of the copy (what dropping a time partition would cost instead).
The queue must outlast the prune (checked: the run fails if the workers ran dry before the prune ended).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.outbox import SENDER, SPAWN, TOKEN, _run_worker, machine_facts, scratch_database, server_url, wa_setup  # noqa: E402
from wa_outbox import db, outbox  # noqa: E402
from wa_outbox.config import Settings  # noqa: E402

EVENTS = ("queued", "sending", "sent", "delivered")
WORKERS = (2, 128)  # processes x worker_concurrency: the dry-run setup of bench/outbox.py
DAYS = 30


def fill_history(url: str, messages: int) -> float:
    """`messages` read messages created 60..40 days ago in id order, each with its timeline; returns seconds."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, "
            "attempts, wamid, created_at, updated_at, sent_at, delivered_at, read_at) "
            "SELECT %(sender)s, (5511900000000 + i %% 200000)::text, "
            "       '{\"type\":\"text\",\"text\":{\"body\":\"Olá! Seu pedido saiu para entrega\"}}', '', 'read', 1, "
            "       'wamid.HBgNNTUxMTk' || i, t, t + interval '90 seconds', t + interval '1 second', "
            "       t + interval '3 seconds', t + interval '90 seconds' "
            "FROM generate_series(1, %(n)s) i, "
            "     LATERAL (SELECT now() - interval '60 days' + (i * (interval '20 days' / %(n)s)) AS t) at",
            {"sender": SENDER, "n": messages})
        conn.execute(
            "INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, created_at) "
            "SELECT n.id, e.event, 1, CASE WHEN e.event = 'sent' THEN jsonb_build_object('wamid', n.wamid) END, "
            "       n.created_at + e.after "
            "FROM wa_outbox.notifications n, (VALUES (1, 'queued', interval '0'), (2, 'sending', interval '0.2 s'), "
            "     (3, 'sent', interval '1 s'), (4, 'delivered', interval '3 s')) e(ord, event, after) "
            "ORDER BY n.id, e.ord")
    return time.perf_counter() - started


def vacuum(url: str, *tables: str) -> float:
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")
    return time.perf_counter() - started


def fill_queue(url: str, queued: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
            "SELECT %s, (5511800000000 + i)::text, '{\"type\":\"text\",\"text\":{\"body\":\"x\"}}', '' "
            "FROM generate_series(1, %s) i", (SENDER, queued))
        conn.execute("ANALYZE wa_outbox.notifications")


SIZES = {"messages": "wa_outbox.notifications", "events": "wa_outbox.notification_events"}


def sizes_mb(conn: psycopg.Connection) -> dict[str, float]:
    return {name: conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()[0] / 2 ** 20
            for name, table in SIZES.items()}


def clock(conn: psycopg.Connection):
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def square_wave(windows, origin, height: float) -> list[list[float]]:
    """Points drawing `windows` (pairs of times) as a square wave of `height` over 0, x in seconds since `origin`."""
    points: list[list[float]] = []
    for a, b in windows:
        x0, x1 = round((a - origin).total_seconds(), 2), round((b - origin).total_seconds(), 2)
        points += [[x0, 0], [x0, height], [x1, height], [x1, 0]]
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="finished messages of history (each with "
                        f"{len(EVENTS)} events: 1,000,000 is 5 million rows)")
    parser.add_argument("--queued", type=int, default=1_500_000, help="due messages for the workers")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds the workers run before anything counts")
    parser.add_argument("--phase", type=float, default=5.0, help="seconds of each prune stretch and of each pause")
    parser.add_argument("--batch-size", type=int, default=outbox.PRUNE_BATCH)
    add_json_argument(parser)
    args = parser.parse_args()

    server = server_url()
    facts = machine_facts(server)
    with scratch_database(server, "prune") as url:
        wa_setup(url)
        print(f"history: {args.messages:,} messages + {args.messages * len(EVENTS):,} events ...", flush=True)
        fill_seconds = fill_history(url, args.messages)
        vacuum(url, "wa_outbox.notifications", "wa_outbox.notification_events")
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            conn.execute("CREATE TABLE public.events_partition AS SELECT * FROM wa_outbox.notification_events")
            copy_seconds = time.perf_counter() - started
            partition_bytes = conn.execute("SELECT pg_total_relation_size('public.events_partition')").fetchone()[0]
            partition_mb = partition_bytes / 2 ** 20
        fill_queue(url, args.queued)
        print(f"  written in {fill_seconds:.0f} s; {args.queued:,} queued", flush=True)

        settings = dataclasses.replace(
            Settings.from_env({}), database_url=url, access_token=TOKEN, phone_number_id=SENDER,
            worker_concurrency=WORKERS[1], rate_limit_mps=1e6, poll_interval=0.1, dry_run=True)
        start, stop = SPAWN.Barrier(WORKERS[0] + 1), SPAWN.Event()
        workers = [SPAWN.Process(target=_run_worker, args=(settings, start, stop), daemon=True)
                   for _ in range(WORKERS[0])]
        for worker in workers:
            worker.start()
        engine = db.create_engine(url, pool_size=1, isolation_level="AUTOCOMMIT")
        batch_seconds: list[float] = []
        with psycopg.connect(url, autocommit=True) as conn:
            before = sizes_mb(conn)
            start.wait(timeout=120)
            t_start = clock(conn)
            time.sleep(args.warmup)
            t_counted = clock(conn)
            time.sleep(args.phase)
            # The prune runs in PHASE-second stretches with PHASE-second pauses between them (after a batch has
            # committed): its windows and the workers' windows alone interleave, so a drift of the machine's load
            # over the run (other processes, the queue's dead index entries) weighs on both alike.
            on = [clock(conn)]  # alternately: a prune stretch starts, ends, starts, ...
            last = [time.perf_counter()]

            def on_batch(result: outbox.PruneResult) -> None:
                now = time.perf_counter()
                batch_seconds.append(now - last[0])
                if now - phase_started[0] >= args.phase:
                    on.append(clock(conn))
                    time.sleep(args.phase)
                    on.append(clock(conn))
                    phase_started[0] = time.perf_counter()
                last[0] = time.perf_counter()
            phase_started = [time.perf_counter()]
            print("prune ...", flush=True)
            result = outbox.prune(engine, days=DAYS, batch_size=args.batch_size, progress=on_batch)
            on.append(clock(conn))
            left = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'queued'").fetchone()[0]
            time.sleep(args.phase)
            t_end = clock(conn)
            stop.set()
            for worker in workers:
                worker.join(60)
            after = sizes_mb(conn)
            series = conn.execute(
                "SELECT extract(epoch FROM date_trunc('second', created_at) - date_trunc('second', %s::timestamptz))"
                "::int AS second, count(*) FROM wa_outbox.notification_events "
                "WHERE event = 'sent' AND created_at >= %s AND created_at < %s GROUP BY 1 ORDER BY 1",
                (t_start, t_start, t_end)).fetchall()

            def sent_between(since, until) -> int:
                return conn.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'sent' "
                                    "AND created_at >= %s AND created_at < %s", (since, until)).fetchone()[0]
            pruning = list(zip(on[0::2], on[1::2], strict=False))
            alone_windows = [(t_counted, on[0])] + list(zip(on[1::2], on[2::2], strict=False)) + [(on[-1], t_end)]
            prune_seconds = sum((b - a).total_seconds() for a, b in pruning)
            alone_seconds = sum((b - a).total_seconds() for a, b in alone_windows)
            during = sum(sent_between(a, b) for a, b in pruning) / prune_seconds
            alone = sum(sent_between(a, b) for a, b in alone_windows) / alone_seconds
            remaining = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE created_at < "
                                     "now() - interval '30 days'").fetchone()[0]
        engine.dispose()
        vacuum_seconds = vacuum(url, "wa_outbox.notifications", "wa_outbox.notification_events")
        with psycopg.connect(url, autocommit=True) as conn:
            vacuumed = sizes_mb(conn)
            started = time.perf_counter()
            conn.execute("DROP TABLE public.events_partition")
            drop_seconds = time.perf_counter() - started

    rows_per_second = result.rows / prune_seconds
    ordered = sorted(batch_seconds)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    ok = left > 0 and remaining == 0
    print(f"pruned {result.messages:,} messages + {result.events:,} events = {result.rows:,} rows in "
          f"{prune_seconds:.1f} s: {rows_per_second:,.0f} rows/s; {result.batches} batches of {args.batch_size} "
          f"messages, p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
          f"longest {result.longest_batch_seconds * 1000:.0f} ms")
    print(f"workers (2 x 128, dry run): {alone:,.0f} sends/s alone ({alone_seconds:.0f} s), {during:,.0f} while the "
          f"prune ran ({prune_seconds:.0f} s in {len(pruning)} stretches): {during / alone:.2f}; queue left at the "
          f"prune's end: {left:,}")
    print(f"sizes MB before {before}, after the prune {after}, after VACUUM ({vacuum_seconds:.1f} s) {vacuumed}")
    print(f"a partition of the same events: {partition_mb:.0f} MB, written in {copy_seconds:.1f} s, dropped in "
          f"{drop_seconds * 1000:.0f} ms")
    if not ok:
        print(f"CHECK FAILED: queue left {left} (must be > 0), old rows left {remaining} (must be 0)")

    headline = [
        {"what": f"prune {result.rows / 1e6:.1f} M rows (messages + timeline) beside 2 draining workers",
         "unit": "rows/s", "value": round(rows_per_second), "reference": None, "reference_name": None,
         "ratio": None, "goal": None, "met": None},
        {"what": "prune: longest batch (one transaction)", "unit": "ms",
         "value": round(result.longest_batch_seconds * 1000, 1), "reference": None, "reference_name": None,
         "ratio": None, "goal": "a fraction of a second", "met": result.longest_batch_seconds < 0.5},
        {"what": "workers' sends during the prune (dry run, 2 x 128)", "unit": "messages/s", "value": round(during),
         "reference": round(alone),
         "reference_name": "the same workers in the pauses between the prune's stretches, same run",
         "ratio": round(during / alone, 3), "goal": None, "met": None},
    ]
    results = {
        "headline": headline,
        "history_messages": args.messages, "history_events": args.messages * len(EVENTS),
        "pruned": {"messages": result.messages, "events": result.events, "rows": result.rows,
                   "seconds": round(prune_seconds, 2), "rows_per_second": round(rows_per_second),
                   "batches": result.batches, "batch_size": args.batch_size,
                   "batch_ms": {"p50": round(p50 * 1000, 1), "p99": round(p99 * 1000, 1),
                                "max": round(result.longest_batch_seconds * 1000, 1)}},
        "workers": {"setup": "2 processes x 128, dry run", "alone": round(alone), "during_prune": round(during),
                    "ratio": round(during / alone, 3), "alone_seconds": round(alone_seconds, 1),
                    "prune_seconds": round(prune_seconds, 1), "queue_left": left},
        "prune_windows_s": [[round((a - t_start).total_seconds(), 2), round((b - t_start).total_seconds(), 2)]
                            for a, b in pruning],
        "phase_s": args.phase,
        "sizes_mb": {"before": before, "after_prune": after, "after_vacuum": vacuumed},
        "vacuum_after_prune_s": round(vacuum_seconds, 2),
        "partition_alternative": {"events_mb": round(partition_mb), "drop_ms": round(drop_seconds * 1000, 1),
                                  "written_s": round(copy_seconds, 1)},
        "checks_passed": ok,
        "plots": [{"name": "prune-workers", "kind": "line",
                   "title": f"Workers' sends per second; the prune of {result.rows / 1e6:.1f} M rows runs in the "
                            f"shaded {args.phase:g}-second stretches",
                   "x_label": "seconds since the workers started", "y_label": "messages sent per second",
                   "series": {"workers (2 x 128, dry run)": [[s_, c] for s_, c in series],
                              "prune running": square_wave(pruning, t_start, max(c for _, c in series))}},
                  {"name": "prune-batches", "kind": "line",
                   "title": f"Each prune batch ({args.batch_size} messages with their events, one transaction)",
                   "x_label": "batch", "y_label": "milliseconds",
                   "series": {"batch time": [[i, round(b * 1000, 1)] for i, b in enumerate(batch_seconds)]}}],
        "tables": [{"title": "Deleting old rows vs dropping a time partition (same events)",
                    "columns": ["what", "time", "space"],
                    "rows": [[f"prune (DELETE in batches) of {result.rows:,} rows", f"{prune_seconds:.1f} s",
                              f"timeline {before['events']:,.0f} MB before, {after['events']:,.0f} MB after: the "
                              "space is reused by new rows, never returned"],
                             ["VACUUM of both tables after the prune", f"{vacuum_seconds:.1f} s",
                              f"timeline {vacuumed['events']:,.0f} MB after"],
                             [f"DROP TABLE of the same {args.messages * len(EVENTS):,} events (a partition)",
                              f"{drop_seconds * 1000:.0f} ms", f"{partition_mb:,.0f} MB returned to the OS"]]}],
    }
    write(args.json, "prune", results, facts=facts)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
