"""Claim throughput with 10,000 messages waiting behind one slow recipient, against none (dry run: no HTTP).

    DATABASE_URL=… .venv/bin/python bench/claim.py [--n 5000] [--waiting 10000] [--batch 64] [--json PATH]

Each case fills a scratch database with N due messages to N recipients; the "behind one slow recipient" case first
queues WAITING more messages to one recipient whose first message is in flight (its send never ends), so all of
them wait on it, and lets the claim see them once (it parks them out of the due index: timed and printed on its
own). Then one claimer claims batches of BATCH and records them sent (record_outcomes.sql, as a worker does) until
the N are claimed, and the rate is printed. The claim is O(batch) when the two rates are alike: parked messages are
never read again until the one ahead of them finishes. With --json, the results (a headline row: the rate with WAITING
messages behind one recipient beside the rate with none, same run) go to PATH for bench/report.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.outbox import SENDER, machine_facts, scratch_database, server_url, wa_setup  # noqa: E402
from wa_outbox import db  # noqa: E402
from wa_outbox.config import Settings  # noqa: E402
from wa_outbox.worker._sender import claim_pacing  # noqa: E402

SLOW = "5511999999999"
# "Alike" (the claim is O(batch)): a run on this shared 2-core machine varies by about a tenth from run to run.
GOAL_RATIO = 0.9


def fill_waiting(url: str, waiting: int) -> None:
    """The slow recipient's first message in flight (its send never ends), `waiting` more queued behind it."""
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, "
            "locked_by, locked_until, attempts) VALUES (%s, %s, '{\"type\":\"text\",\"text\":{\"body\":\"s\"}}', "
            "'', 'sending', 'elsewhere', now() + interval '1 hour', 1)", (SENDER, SLOW))
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, "
            "next_attempt_at) SELECT %s, %s, '{\"type\":\"text\",\"text\":{\"body\":\"s\"}}', '', "
            "now() - interval '1 minute' FROM generate_series(1, %s)", (SENDER, SLOW, waiting))
        conn.execute("ANALYZE wa_outbox.notifications")


def fill(url: str, n: int) -> None:
    """n due messages to n recipients."""
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
            "SELECT %s, (5511900000000 + i)::text, '{\"type\":\"text\",\"text\":{\"body\":\"x\"}}', '' "
            "FROM generate_series(1, %s) i", (SENDER, n))
        conn.execute("ANALYZE wa_outbox.notifications")


def park(url: str, batch: int) -> tuple[float, int]:
    """The first claims to see the waiting messages park them: (seconds, claims) until none is left to see."""
    import psycopg
    engine = db.create_engine(url, pool_size=1, isolation_level="AUTOCOMMIT")
    params = {"limit": batch, "worker_id": "bench", "lease_seconds": 60, "default_mps": 1e6,
              **claim_pacing(Settings())}
    started, claims = time.perf_counter(), 0
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked"
                           ).fetchone()[0]:
            assert db.fetch(engine, "claim_notifications", params) == []
            claims += 1
    engine.dispose()
    return time.perf_counter() - started, claims


def drain(url: str, n: int, batch: int) -> tuple[float, int]:
    """(claimed per second, claim statements) until n messages are claimed and recorded."""
    engine = db.create_engine(url, pool_size=1, isolation_level="AUTOCOMMIT")
    params = {"limit": batch, "worker_id": "bench", "lease_seconds": 60, "default_mps": 1e6,
              **claim_pacing(Settings())}
    claimed = statements = 0
    started = time.perf_counter()
    while claimed < n:
        rows = db.fetch(engine, "claim_notifications", params)
        statements += 1
        outcomes = [{"id": r["id"], "status": "sent", "event": "sent", "wamid": f"wamid.{r['id']}", "error": None,
                     "delay": None, "refund": False, "detail": {}} for r in rows]
        if outcomes:
            db.execute(engine, "record_outcomes", {"worker_id": "bench", "outcomes": json.dumps(outcomes)})
        claimed += len(rows)
        if statements > 10 * (n + 10_000) // batch + 100:
            raise SystemExit(f"stuck: {claimed} of {n} claimed after {statements} claims")
    rate = claimed / (time.perf_counter() - started)
    engine.dispose()
    return rate, statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000, help="messages claimed per case (default 5000)")
    parser.add_argument("--waiting", type=int, default=10_000, help="messages behind the slow recipient")
    parser.add_argument("--batch", type=int, default=64, help="claim batch size (default 64)")
    add_json_argument(parser)
    args = parser.parse_args()
    server = server_url()
    facts = machine_facts(server)
    results = {}
    parked = (0.0, 0)
    for name, waiting in (("none waiting", 0), (f"{args.waiting:,} waiting behind one recipient", args.waiting)):
        with scratch_database(server, "claim") as url:
            wa_setup(url)
            if waiting:
                fill_waiting(url, waiting)
                parked = seconds, claims = park(url, args.batch)
                print(f"  first sight: {claims} claims parked the {waiting:,} in {seconds:.2f} s "
                      f"({waiting / seconds:,.0f}/s), once", flush=True)
            fill(url, args.n)
            results[name] = drain(url, args.n, args.batch)
        rate, statements = results[name]
        print(f"{name:<45} {rate:>8,.0f} claimed/s  ({statements} claims of up to {args.batch})", flush=True)
    (base_name, (base, _)), (slow_name, (slow, _)) = results.items()
    ratio = slow / base
    print(f"ratio {ratio:.2f} (1.0: the waiting messages cost the claim nothing)")
    write(args.json, "claim", {
        "n": args.n, "waiting": args.waiting, "batch": args.batch,
        "claimed_per_second": {name: rate for name, (rate, _) in results.items()},
        "claim_statements": {name: statements for name, (_, statements) in results.items()},
        "park_seconds": parked[0], "park_claims": parked[1], "ratio": ratio,
        "headline": [{
            "what": f"claim + record (dry run), {args.waiting:,} messages waiting behind one slow recipient",
            "unit": "msgs/s", "value": round(slow, 1), "reference": round(base, 1),
            "reference_name": "the same claim with none waiting", "ratio": round(ratio, 3),
            "goal": f">= {GOAL_RATIO:.2f} of the reference", "met": ratio >= GOAL_RATIO}],
        "tables": [{
            "title": f"Claim + record, one claimer, batches of {args.batch}, {args.n:,} messages to "
                     f"{args.n:,} recipients",
            "columns": ["case", "claimed/s", "claim statements"],
            "rows": [[name, round(rate, 1), statements] for name, (rate, statements) in results.items()],
        }, {
            "title": "Parking the waiting messages (once, the first time a claim sees them)",
            "columns": ["messages parked", "claims", "seconds", "parked/s"],
            "rows": [[args.waiting, parked[1], round(parked[0], 3),
                      round(args.waiting / parked[0], 1) if parked[0] else None]],
        }],
        "plots": [{
            "name": "claim-waiting", "title": f"Claim rate with {args.waiting:,} messages waiting behind one "
                                              "recipient, against none",
            "x_label": "case", "y_label": "claimed/s", "kind": "bar",
            "series": {"claim + record (dry run)": [[base_name, round(base, 1)], [slow_name, round(slow, 1)]]},
        }],
    }, facts=facts)


if __name__ == "__main__":
    main()
