"""Pacing benchmark: the rate a sender actually reaches, against the rate configured, over a long run.

    .venv/bin/python bench/pacing.py [--mps 20] [--seconds 120] [--workers 4] [--enforce]

On real Postgres (DATABASE_URL, else the embedded one) in a scratch database (created and dropped): N = mps x seconds
messages queued for one sender, then WORKERS worker processes (`python worker.py`, production defaults but the
rate: WA_OUTBOX_RATE_LIMIT_MPS = --mps, the default pacing) drain them into the Graph API simulator (a process of its
own). The simulator's record of accepted sends (their arrival times) gives:
- the achieved rate (first to last arrival) beside the configured one, and its ratio;
- the most sends in any one-second window (sliding, as Meta counts) and per calendar second (max and mean over the
  whole seconds of the run), beside the configured rate.
By default the simulator enforces no limit, so the windows show what the workers really did; with --enforce it
answers 130429 beyond --mps (as Meta does), and the run reports how many sends it refused.
"""

from __future__ import annotations

import argparse
import bisect
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.outbox import SENDER, TOKEN, Simulator, machine_facts, scratch_database, server_url, wa_setup  # noqa: E402
from wa_outbox import enqueue_many  # noqa: E402


def window_max(times: list[float], width: float = 1.0) -> int:
    """The most arrivals in any window (t - width, t], as the simulator's (and Meta's) sliding second counts."""
    best = 0
    for i, t in enumerate(times):
        best = max(best, i + 1 - bisect.bisect_right(times, t - width, 0, i + 1))
    return best


def per_second(times: list[float]) -> list[int]:
    """Arrivals per whole calendar second, the first and last (partial) seconds left out."""
    counts = Counter(int(t) for t in times)
    seconds = range(int(times[0]) + 1, int(times[-1]))
    return [counts.get(s, 0) for s in seconds]


def start_worker(url: str, api_base_url: str, mps: float) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(DATABASE_URL=url, WHATSAPP_ACCESS_TOKEN=TOKEN, WHATSAPP_PHONE_NUMBER_ID=SENDER,
               WHATSAPP_API_BASE_URL=api_base_url, WHATSAPP_APP_SECRET="x", WA_OUTBOX_RATE_LIMIT_MPS=str(mps),
               LOG_LEVEL="WARNING")
    return subprocess.Popen([sys.executable, "worker.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)


def run(mps: float, seconds: float, workers: int, enforce: bool) -> int:
    n = int(mps * seconds)
    server = server_url()
    print(f"# pacing: {n} messages at a configured {mps:g}/s, {workers} worker processes; {machine_facts(server)}",
          flush=True)
    sim = Simulator()
    try:
        sim.reset()
        requests.put(f"{sim.url}/_admin/config", json={"mps": mps if enforce else None}, timeout=10).raise_for_status()
        with scratch_database(server, "pacing") as url:
            wa_setup(url)
            with psycopg.connect(url) as conn:
                for start in range(0, n, 2000):
                    enqueue_many(conn, [{"to": f"+55119{i:08d}", "message": {"type": "text", "text": {"body": "x"}}}
                                        for i in range(start, min(n, start + 2000))])
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE")
            procs = [start_worker(url, sim.base_url, mps) for _ in range(workers)]
            try:
                deadline = time.monotonic() + seconds * 3 + 60
                with psycopg.connect(url, autocommit=True) as conn:
                    while conn.execute("SELECT count(*) FROM wa_outbox.notifications "
                                       "WHERE status IN ('queued', 'sending')").fetchone()[0]:
                        if time.monotonic() > deadline:
                            print("the drain did not finish in time", flush=True)
                            return 1
                        time.sleep(0.5)
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:
                    p.wait(30)
            with psycopg.connect(url, autocommit=True) as conn:  # when each send was granted (its claim)
                granted = dict(conn.execute("SELECT notification_id::text, extract(epoch FROM max(created_at)) "
                                            "FROM wa_outbox.notification_events WHERE event = 'sending' "
                                            "GROUP BY 1").fetchall())
                grants = sorted(r[0] for r in conn.execute(
                    "SELECT extract(epoch FROM created_at)::float8 FROM wa_outbox.notification_events "
                    "WHERE event = 'sending'").fetchall())
        messages = requests.get(f"{sim.url}/_admin/messages", timeout=60).json()["messages"]
        stats = requests.get(f"{sim.url}/_admin/stats", timeout=10).json()
    finally:
        sim.stop()
    times = sorted(m["received_at"] for m in messages)
    achieved = (len(times) - 1) / (times[-1] - times[0])
    seconds_counts = per_second(times)
    widest = window_max(times)
    refused = stats["outcomes"].get("error_130429", 0)
    delays = sorted(m["received_at"] - float(granted[m["biz_opaque_callback_data"]]) for m in messages
                    if m["biz_opaque_callback_data"] in granted)
    over = sum(1 for i, t in enumerate(times) if i + 1 - bisect.bisect_right(times, t - 1.0, 0, i + 1) > mps)
    print(f"configured rate         {mps:g} messages/s")
    print(f"achieved rate           {achieved:.2f} messages/s ({achieved / mps:.1%} of the configured rate), "
          f"{len(times)} sends over {times[-1] - times[0]:.1f} s")
    print(f"any one-second window   at most {widest} sends (configured {mps:g}); {over} sends closed a window "
          f"over it")
    print(f"claims, any second      at most {window_max(grants)} sends granted (the claims' `sending` events)")
    print(f"grant to arrival        p50 {delays[len(delays) // 2] * 1000:.1f} ms, "
          f"p99 {delays[int(len(delays) * 0.99)] * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms (claim to the "
          f"simulator: the jitter the bucket's margin absorbs)")
    print(f"per calendar second     max {max(seconds_counts)}, mean {sum(seconds_counts) / len(seconds_counts):.2f} "
          f"over {len(seconds_counts)} whole seconds (configured {mps:g})")
    if enforce:
        print(f"refused with 130429     {refused}")
    ok = len(times) == n and widest <= mps and refused == 0
    print("OK" if ok else "CHECK FAILED: " + ", ".join(
        p for p, bad in ((f"{len(times)} of {n} sent", len(times) != n), (f"a window held {widest}", widest > mps),
                         (f"{refused} refused", refused > 0)) if bad))
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mps", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the run at the configured rate")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--enforce", action="store_true", help="the simulator answers 130429 beyond --mps")
    args = parser.parse_args()
    sys.exit(run(args.mps, args.seconds, args.workers, args.enforce))


if __name__ == "__main__":
    main()
