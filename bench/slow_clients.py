"""Slow clients beside webhook traffic: the receiver's p99 and req/s without and with trickling connections.

    python bench/slow_clients.py [--duration 10] [--connections 32] [--tricklers 200] [--json PATH]

One gunicorn serving the real receiver (wa_outbox/gunicorn_conf.py, so its BufferedThreadWorker) on real Postgres
(DATABASE_URL, else the embedded one; a scratch database is created and dropped), driven by wrk with signed webhook
POSTs as in bench/webhooks.py: first alone, then beside `--tricklers` connections that each send a webhook POST's
headers (or part of them) and then one byte a second. Those the server cuts off (408 after
WA_OUTBOX_REQUEST_READ_TIMEOUT) are reconnected at once, so there are always that many. Prints both runs side by side
and their ratio; "lost" counts wrk's non-2xx answers and socket errors (a request unanswered in 30 s is one), and the
run exits 1 if any request was lost or none was answered beside the tricklers (plain gthread: all its threads held).
"""

from __future__ import annotations

import argparse
import os
import random
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.webhooks import SECRET, run_wrk, start_gunicorn, stop, write_bodies  # noqa: E402
from wa_outbox import migrate  # noqa: E402
from wa_outbox.config import Settings, normalize_database_url  # noqa: E402
from wa_outbox.db import embedded_database_url  # noqa: E402

PORT = 18083
WRK_TIMEOUT = 30  # seconds: a request slower than this is lost, not slow


class Tricklers:
    """`n` connections that trickle a request one byte each `interval` seconds, in a thread; each one the server
    closes is counted (and whether it answered 408 first) and replaced."""

    HEADS = (b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nX-Slow: ",
             b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")

    def __init__(self, port: int, n: int, interval: float = 1.0):
        self.port, self.n, self.interval = port, n, interval
        self.stop = threading.Event()
        self.opened = self.cut_off = self.answered_408 = self.missing = 0
        self.sel = selectors.DefaultSelector()
        self.received: dict[socket.socket, bytes] = {}
        for _ in range(n):
            self._open()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:  # the server is down (restarting, in bench/chaos.py): try again on the next round
            self.missing += 1
            return
        try:
            s.sendall(self.HEADS[self.opened % 2])
        except OSError:
            s.close()
            self.missing += 1
            return
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ)
        self.received[s] = b""
        self.opened += 1

    def _run(self):
        while not self.stop.is_set():
            for key, _ in self.sel.select(self.interval):  # epoll: a plain wait while none is open
                self._read(key.fileobj)
            for s in list(self.received):
                try:
                    s.send(b"a")
                except BlockingIOError:
                    pass
                except OSError:  # reset, broken pipe: the server closed it
                    self._closed(s)
            for _ in range(self.missing):
                self.missing -= 1
                self._open()

    def _read(self, s):
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.received[s] += data
        else:
            self._closed(s)

    def _closed(self, s):
        if s not in self.received:
            return
        self.cut_off += 1
        self.answered_408 += self.received.pop(s).startswith(b"HTTP/1.1 408 ")
        self.sel.unregister(s)
        s.close()
        if not self.stop.is_set():
            self._open()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)
        for s in self.received:
            s.close()
        self.sel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--tricklers", type=int, default=200)
    add_json_argument(parser)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")

    server = normalize_database_url(os.environ["DATABASE_URL"]) if os.environ.get("DATABASE_URL") \
        else embedded_database_url(ROOT / ".wa-outbox")
    dbname = f"wa_outbox_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
        version = conn.execute("SHOW server_version").fetchone()[0]
    url = urlunsplit(urlsplit(server)._replace(path=f"/{dbname}"))
    migrate.upgrade(url)
    env = {**os.environ, "DATABASE_URL": url, "WHATSAPP_APP_SECRET": SECRET, "WHATSAPP_VERIFY_TOKEN": "v",
           "WA_OUTBOX_API_TOKENS": "bench-token-0123456789", "LOG_LEVEL": "WARNING"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    web = Settings.from_env(env)
    tmp = Path(tempfile.mkdtemp(prefix="wa-outbox-bench-"))
    bodies = tmp / "single.txt"
    random.seed(7)
    write_bodies(bodies, 60_000, per_post=1)
    facts = (f"gunicorn: WEB_CONCURRENCY={web.web_concurrency} x WA_OUTBOX_WEB_THREADS={web.web_threads}, "
             f"WA_OUTBOX_REQUEST_READ_TIMEOUT={web.request_read_timeout:g} s; wrk -t2 -c{args.connections} "
             f"-d{args.duration}s, 1 update/POST; {args.tricklers} tricklers at 1 byte/s; PostgreSQL {version}; "
             f"{os.cpu_count()} cores shared by gunicorn, Postgres, wrk and the tricklers")
    print(facts, flush=True)
    results, tricklers = {}, None
    try:
        proc = start_gunicorn("wsgi:app", PORT, env)
        try:
            run_wrk(PORT, bodies, 2, args.connections)  # warm-up (imports, pools, prepared statements)
            results["alone"] = run_wrk(PORT, bodies, args.duration, args.connections, timeout=WRK_TIMEOUT)
            tricklers = Tricklers(PORT, args.tricklers)
            results["beside tricklers"] = run_wrk(PORT, bodies, args.duration, args.connections,
                                                  timeout=WRK_TIMEOUT)
            tricklers.close()
        finally:
            if tricklers is not None:
                tricklers.close()
            stop(proc)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)

    alone, beside = results["alone"], results["beside tricklers"]
    print(f"{'webhook POSTs':<34}{'answered':>9}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'lost':>7}")
    for name, r in results.items():
        print(f"{name:<34}{r['requests']:>9}{r['rps']:>10.0f}{r['p50']:>9.2f}{r['p99']:>9.2f}"
              f"{r['errors'] + r['socket_errors']:>7}")
    served = beside["requests"] > 0  # none answered at all: every thread held (wrk counts no error for them)
    p99_ratio = beside["p99"] / alone["p99"] if served and alone["p99"] else float("inf")
    rps_ratio = beside["rps"] / alone["rps"]
    print(f"{'  ratio beside / alone':<34}{rps_ratio:>10.2f}{'':>9}{p99_ratio:>9.2f}")
    print(f"tricklers: {tricklers.opened} connections opened, {tricklers.cut_off} cut off by the server "
          f"({tricklers.answered_408} with a 408 first)")
    lost = sum(r["errors"] + r["socket_errors"] for r in results.values())
    headline = [
        {"what": f"webhook p99 beside {args.tricklers} trickling connections", "unit": "ms", "value": beside["p99"],
         "reference": alone["p99"], "reference_name": "the same run's webhook p99 without them",
         "ratio": round(p99_ratio, 2), "goal": "<= 2x the reference", "met": served and p99_ratio <= 2},
        {"what": f"webhook ingest beside {args.tricklers} trickling connections", "unit": "req/s",
         "value": round(beside["rps"]), "reference": round(alone["rps"]),
         "reference_name": "the same run's req/s without them", "ratio": round(rps_ratio, 2),
         "goal": "no request lost", "met": served and lost == 0},
    ]
    tables = [{"title": f"Webhook POSTs without and with {args.tricklers} trickling connections",
               "columns": ["case", "req/s", "p50 ms", "p99 ms", "non-2xx", "socket errors"],
               "rows": [[name, round(r["rps"]), r["p50"], r["p99"], r["errors"], r["socket_errors"]]
                        for name, r in results.items()]},
              {"title": "The trickling connections",
               "columns": ["opened", "cut off by the server", "with a 408 first"],
               "rows": [[tricklers.opened, tricklers.cut_off, tricklers.answered_408]]}]
    write(args.json, "slow_clients", {"headline": headline, "tables": tables, "runs": results,
                                      "tricklers": {"opened": tricklers.opened, "cut_off": tricklers.cut_off,
                                                    "answered_408": tricklers.answered_408}}, facts=facts)
    if lost or not served:
        raise SystemExit(f"{lost} webhook POSTs lost" if served else "no webhook POST answered beside the tricklers")


if __name__ == "__main__":
    main()
