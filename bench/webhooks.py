"""Webhook receiver benchmark: the real receiver against a bare Flask endpoint, same gunicorn settings, same load.

    python bench/webhooks.py [--duration 10] [--connections 32]

Starts gunicorn twice with wa_outbox/gunicorn_conf.py — once serving bench/bare_app.py (answers 200, reads the body),
once serving the real receiver on real Postgres (DATABASE_URL, else the embedded one; a scratch database is created
and dropped) — and drives both with wrk using signed, realistic payloads (text messages and statuses, 20 % of POSTs
redeliveries of earlier ones). Prints req/s, p50 and p99 latency, the ratio receiver/bare, and a batched case of
100 updates per POST in changes/s. Durable: synchronous_commit stays on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wa_outbox import migrate  # noqa: E402
from wa_outbox.config import normalize_database_url  # noqa: E402
from wa_outbox.db import embedded_database_url  # noqa: E402
from wa_outbox.webhooks import sign  # noqa: E402

SECRET = "bench-app-secret"
PORT_BARE, PORT_REAL = 18081, 18082


def message(i: int, n: int) -> dict:
    return {"from": f"5511{900000000 + i:09d}", "id": f"wamid.BENCH{i}x{n}-{uuid.uuid4().hex[:6]}",
            "timestamp": str(1749416383 + i), "type": "text", "text": {"body": f"Olá, pedido {i} ✓"}}


def status(i: int, n: int) -> dict:
    return {"id": f"wamid.OUT{i}x{n}", "status": random.choice(["sent", "delivered", "read"]),
            "timestamp": str(1749416383 + i), "recipient_id": f"5511{900000000 + i:09d}",
            "biz_opaque_callback_data": str(i),
            "pricing": {"billable": True, "pricing_model": "PMP", "category": "utility"}}


def envelope(updates: list[dict]) -> dict:
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
             "contacts": [{"profile": {"name": "Cliente"}, "wa_id": "5511900000000"}]}
    msgs = [u for u in updates if "from" in u]
    sts = [u for u in updates if "from" not in u]
    if msgs:
        value["messages"] = msgs
    if sts:
        value["statuses"] = sts
    return {"object": "whatsapp_business_account", "entry": [{"id": "419561257915477",
                                                               "changes": [{"field": "messages", "value": value}]}]}


def write_bodies(path: Path, count: int, per_post: int, duplicate_share: float = 0.2) -> None:
    bodies: list[bytes] = []
    for n in range(count):
        if bodies and random.random() < duplicate_share:
            bodies.append(random.choice(bodies))  # a redelivery
            continue
        updates = [message(i, n) if random.random() < 0.4 else status(i, n) for i in range(per_post)]
        bodies.append(json.dumps(envelope(updates), separators=(",", ":"), ensure_ascii=True).encode())
    with path.open("wb") as f:
        for body in bodies:
            f.write(sign(SECRET, body).encode() + b"\t" + body + b"\n")


def start_gunicorn(app: str, port: int, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", app],
                            cwd=ROOT, env={**env, "WA_OUTBOX_BIND": f"127.0.0.1:{port}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.post(f"http://127.0.0.1:{port}/webhooks/whatsapp", data=b"{}", timeout=1)
            return proc
        except requests.ConnectionError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"gunicorn {app} did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def run_wrk(port: int, bodies: Path, duration: int, connections: int) -> dict:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s",
                          str(ROOT / "bench" / "wrk_bodies.lua"), f"http://127.0.0.1:{port}"],
                         env={**os.environ, "BODIES_FILE": str(bodies)}, capture_output=True, text=True,
                         check=True).stdout
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),
            "p99": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),
            "errors": int(non2xx.group(1)) if non2xx else 0}


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")

    server = normalize_database_url(os.environ["DATABASE_URL"]) if os.environ.get("DATABASE_URL") \
        else embedded_database_url(ROOT / ".wa-outbox")
    dbname = f"wa_outbox_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    from urllib.parse import urlsplit, urlunsplit
    url = urlunsplit(urlsplit(server)._replace(path=f"/{dbname}"))
    migrate.upgrade(url)
    env = {**os.environ, "DATABASE_URL": url, "WHATSAPP_APP_SECRET": SECRET, "WHATSAPP_VERIFY_TOKEN": "v",
           "WA_OUTBOX_API_TOKENS": "bench-token-0123456789", "LOG_LEVEL": "WARNING"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    tmp = Path(tempfile.mkdtemp(prefix="wa-outbox-bench-"))
    single, batched = tmp / "single.txt", tmp / "batched.txt"
    random.seed(7)
    write_bodies(single, 60_000, per_post=1)
    write_bodies(batched, 3_000, per_post=100)
    print(f"gunicorn: WEB_CONCURRENCY={env.get('WEB_CONCURRENCY', 2)} x WA_OUTBOX_WEB_THREADS="
          f"{env.get('WA_OUTBOX_WEB_THREADS', 4)} gthread; wrk -t2 -c{args.connections} -d{args.duration}s; "
          f"postgres synchronous_commit={sync}; {os.cpu_count()} cores shared by all")
    results = {}
    try:
        for name, app, port in (("bare", "bench.bare_app:app", PORT_BARE), ("receiver", "wsgi:app", PORT_REAL)):
            proc = start_gunicorn(app, port, env)
            try:
                run_wrk(port, single, 2, args.connections)  # warm-up (imports, pools, prepared statements)
                results[name, 1] = run_wrk(port, single, args.duration, args.connections)
                results[name, 100] = run_wrk(port, batched, args.duration, args.connections)
            finally:
                stop(proc)
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0]
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'case':<34}{'req/s':>10}{'changes/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}")
    for per_post in (1, 100):
        for name in ("bare", "receiver"):
            r = results[name, per_post]
            label = f"{'bare Flask endpoint' if name == 'bare' else 'wa-outbox receiver'} ({per_post}/POST)"
            print(f"{label:<34}{r['rps']:>10.0f}{r['rps'] * per_post:>12.0f}{r['p50']:>9.2f}{r['p99']:>9.2f}"
                  f"{r['errors']:>9}")
        ratio = results["receiver", per_post]["rps"] / results["bare", per_post]["rps"]
        print(f"{'  ratio receiver / bare':<34}{ratio:>10.2f}")
    print(f"rows stored in webhook_events: {stored}")


if __name__ == "__main__":
    main()
