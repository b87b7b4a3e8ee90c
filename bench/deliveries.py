"""Deliveries per second to a local receiver, beside a bare `requests` client posting the same bodies to the same
receiver in the same run (the ceiling of this machine's HTTP).

    DATABASE_URL=… .venv/bin/python bench/deliveries.py [--n 2000] [--concurrency 8] [--json PATH]

A scratch database gets N events and one unordered endpoint (its receiver: a threaded http.server on 127.0.0.1
answering 200 to every POST, no verification). One worker (in this process, dry-run sends) delivers them all; the
rate is N over the time from its start to the last delivery recorded. Then `--concurrency` threads, each with its
own requests.Session, POST the same N bodies with the same headers to the same receiver. The goal (issue 18) is
a ratio of at least 0.8.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import requests  # noqa: E402

from bench._results import add_json_argument, write  # noqa: E402
from bench.outbox import machine_facts, scratch_database, server_url, wa_setup  # noqa: E402
from tests.endpoint_rows import SECRET_KEY, add_endpoint, add_events  # noqa: E402
from wa_outbox.config import Settings  # noqa: E402
from wa_outbox.events import envelope_bytes  # noqa: E402
from wa_outbox.worker import Worker  # noqa: E402
from wa_outbox.worker._push import signature_header  # noqa: E402

GOAL_RATIO = 0.8


def receiver() -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def delivered(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM wa_outbox.deliveries WHERE status = 'delivered'").fetchone()[0]


def bench_worker(url: str, target: str, n: int, concurrency: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        add_endpoint(conn, target)
        add_events(conn, n)
    settings = Settings(database_url=url, access_token="x" * 20, phone_number_id="100000000000001", dry_run=True,
                        secret_keys=(SECRET_KEY,), endpoints_allow_private=True, delivery_concurrency=concurrency,
                        delivery_per_endpoint=concurrency, poll_interval=0.2)
    worker = Worker(settings)
    thread = threading.Thread(target=worker.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    while delivered(url) < n:
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    worker.stop()
    thread.join(timeout=30)
    worker.engine.dispose()
    return n / elapsed


def bench_bare(url: str, target: str, n: int, concurrency: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT seq, type, occurred_at, data FROM wa_outbox.events ORDER BY seq").fetchall()
    bodies = [(f"evt_{seq}", envelope_bytes(seq, t, at, data)) for seq, t, at, data in rows]
    local = threading.local()
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    def post(item: tuple[str, bytes]) -> None:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        msg_id, body = item
        ts = int(time.time())
        session.post(target, data=body, timeout=15, allow_redirects=False, headers={
            "webhook-id": msg_id, "webhook-timestamp": str(ts), "User-Agent": "wa-outbox",
            "webhook-signature": signature_header([secret], msg_id, ts, body), "Content-Type": "application/json"})

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(post, bodies))
    return len(bodies) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    add_json_argument(parser)
    args = parser.parse_args()
    server = server_url()
    httpd = receiver()
    target = f"http://127.0.0.1:{httpd.server_port}/hooks"
    with scratch_database(server, "deliveries") as url:
        wa_setup(url)
        worker_rate = bench_worker(url, target, args.n, args.concurrency)
        bare_rate = bench_bare(url, target, args.n, args.concurrency)
    httpd.shutdown()
    ratio = worker_rate / bare_rate
    print(f"deliveries/s: worker {worker_rate:.0f}, bare requests {bare_rate:.0f}: ratio {ratio:.2f} "
          f"(goal >= {GOAL_RATIO}), n={args.n}, concurrency {args.concurrency}")
    write(args.json, "deliveries", {"worker_per_second": worker_rate, "bare_per_second": bare_rate, "ratio": ratio,
                                    "n": args.n, "concurrency": args.concurrency, "goal_ratio": GOAL_RATIO},
          facts=machine_facts(server))


if __name__ == "__main__":
    main()
