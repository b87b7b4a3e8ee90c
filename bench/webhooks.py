"""Webhook receiver benchmark: the real receiver against a bare Flask endpoint, same gunicorn settings, same load.

    python bench/webhooks.py [--duration 10] [--connections 32] [--profile] [--json PATH]

Starts gunicorn twice with wa_outbox/gunicorn_conf.py — once serving bench/bare_app.py (answers 200, reads the body),
once serving the real receiver on real Postgres (DATABASE_URL, else the embedded one; a scratch database is created
and dropped) — and drives both with wrk using signed, realistic payloads (text messages and statuses, 20 % of POSTs
redeliveries of earlier ones). Prints req/s, p50 and p99 latency, the ratio receiver/bare, and a batched case of
100 updates per POST in changes/s. Durable: synchronous_commit stays on.

Also measured in each run: the CPU time per POST of the gunicorn workers, the Postgres backends and wrk (from
/proc), and, with --profile (needs py-spy, in the `bench` extra), where the receiver's workers spend
their Python time, from a separate py-spy run (samples holding the GIL, so only CPU time) after the measured ones.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
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

from bench._results import add_json_argument, write  # noqa: E402
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


def register_apps(url: str, apps: int) -> dict[str, str]:
    """`apps` Meta apps in the registry, the bench's WABA and number the first one's, signed by SECRET; returns the
    environment that goes with it (WA_OUTBOX_SECRET_KEY, and WHATSAPP_APP_SECRET another secret, as an upgraded
    deployment keeps it)."""
    from wa_outbox.secret_box import SecretBox, fingerprint, generate_key
    key = generate_key()
    box = SecretBox([key])
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(apps):
            app_id, secret = str(1000 + n), SECRET if n == 0 else f"bench-app-secret-{n}"
            conn.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES (%s)", (app_id,))
            conn.execute("INSERT INTO wa_outbox.app_secrets (app_id, secret_enc, fingerprint) VALUES (%s, %s, %s)",
                         (app_id, box.encrypt(secret), fingerprint(secret)))
        conn.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES ('419561257915477', '1000')")
        conn.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, token_enc) "
                     "VALUES ('106540352242922', '419561257915477', %s)", (box.encrypt("bench-token"),))
    return {"WA_OUTBOX_SECRET_KEY": key, "WHATSAPP_APP_SECRET": "bench-environment-secret"}


def start_gunicorn(app: str, port: int, env: dict) -> subprocess.Popen:
    with socket.socket() as probe:  # a server left on the port would answer in its place
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn: closed connections do not count
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise SystemExit(f"port {port} is in use: stop what listens on it") from None
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", app],
                            cwd=ROOT, env={**env, "WA_OUTBOX_BIND": f"127.0.0.1:{port}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:  # exited: it could not bind (a server left running?)
        try:
            requests.post(f"http://127.0.0.1:{port}/webhooks/whatsapp", data=b"{}", timeout=1)
            return proc
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or a busy machine's slow start
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"gunicorn {app} did not start on port {port}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def run_wrk(port: int, bodies: Path, duration: int, connections: int, server: subprocess.Popen | None = None,
            timeout: int = 2) -> dict:
    """One wrk run; with `server` (the gunicorn master), also the CPU seconds per POST of its workers, of the Postgres
    backends of the bench's database and of wrk, over the run. A request unanswered after `timeout` seconds counts
    as a socket error (timeout)."""
    wrk = subprocess.Popen(["wrk", "-t2", f"-c{connections}", f"-d{duration}s", f"--timeout={timeout}s", "--latency",
                            "-s", str(ROOT / "bench" / "wrk_bodies.lua"), f"http://127.0.0.1:{port}"],
                           env={**os.environ, "BODIES_FILE": str(bodies)}, stdout=subprocess.PIPE, text=True)
    cpu_before = _cpu_by_process(server.pid) if server else None
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out, _ = wrk.communicate()
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk: the only child that ended meanwhile
    cpu_after = _cpu_by_process(server.pid, final=cpu_before) if server else None
    if cpu_after is not None:
        cpu_after["wrk"] = (children_after.ru_utime + children_after.ru_stime - children_before.ru_utime
                            - children_before.ru_stime)
    if wrk.returncode:
        raise SystemExit(f"wrk failed: {out}")
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    result = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
              "requests": int(re.search(r"(\d+) requests in", out).group(1)),
              "p50": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),
              "p99": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),
              "percentiles_ms": [[float(p), int(us) / 1000] for p, us in re.findall(r"^PCT (\S+) (\d+)$", out, re.M)],
              "errors": int(non2xx.group(1)) if non2xx else 0,
              "socket_errors": sum(map(int, socket_errors.groups())) if socket_errors else 0}
    if cpu_after is not None:
        result["cpu_ms_per_post"] = {k: round(v * 1000 / result["requests"], 4) for k, v in cpu_after.items()}
    return result


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_by_process(master: int, final: dict | None = None) -> dict[str, float]:
    """CPU seconds used so far by gunicorn's workers and the bench database's Postgres backends (every backend whose
    command line names the database: WAL writing in other processes is not counted); with `final`, the difference
    since that earlier reading (a process that ended in between is lost: none does)."""
    used = {"gunicorn workers": 0.0, "postgres backends": 0.0}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().decode(errors="replace")
        except OSError:
            continue
        parent, ticks = int(fields[1]), int(fields[11]) + int(fields[12])
        if parent == master:
            used["gunicorn workers"] += ticks / _TICK
        elif command.startswith("postgres:") and _BENCH_DATABASE and f" {_BENCH_DATABASE} " in command:
            used["postgres backends"] += ticks / _TICK
    if final is None:
        return used
    return {k: used[k] - final[k] for k in used}


_BENCH_DATABASE = ""  # set by main(): the scratch database's name, to find its backends


def profile(master: subprocess.Popen, port: int, bodies: Path, seconds: int, connections: int) -> dict[str, float]:
    """Where gunicorn's workers spend their Python CPU time under load: py-spy samples (only those holding the GIL),
    each counted once, under the first step of PROFILE_STEPS its stack passes through. Percent of all samples."""
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        raise SystemExit("--profile needs py-spy (pip install -e '.[bench]')")
    raw = bodies.parent / "profile.txt"
    for attempt in range(3):  # py-spy sometimes panics attaching to a busy process: try again under fresh load
        load = subprocess.Popen(["wrk", "-t2", f"-c{connections}", f"-d{seconds + 3}s", "-s",
                                 str(ROOT / "bench" / "wrk_bodies.lua"), f"http://127.0.0.1:{port}"],
                                env={**os.environ, "BODIES_FILE": str(bodies)}, stdout=subprocess.DEVNULL)
        time.sleep(1)
        spy = subprocess.run([py_spy, "record", "--pid", str(master.pid), "--subprocesses", "--gil", "--nonblocking",
                              "--format", "raw", "--nolineno", "--rate", "200", "--duration", str(seconds),
                              "--output", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        load.wait()
        if spy.returncode == 0:
            break
        print(f"py-spy failed (attempt {attempt + 1}): {spy.stderr.strip()[-300:]}", file=sys.stderr)
    else:
        return {}  # no profile: the measured runs are still reported
    samples: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        step = next((name for name, marks in PROFILE_STEPS if any(m in stack for m in marks)), "other")
        samples[step] = samples.get(step, 0) + int(n)
    total = sum(samples.values()) or 1
    return {name: round(100 * samples.get(name, 0) / total, 1) for name, _ in (*PROFILE_STEPS, ("other", ()))}


# A stack belongs to the first step it passes through (py-spy's frames read "[Class.]function (file)"; every
# request enters through Flask.__call__, which calls the fast path: Flask's own cycle is Flask.wsgi_app).
PROFILE_STEPS = (
    ("signature (HMAC-SHA256 of the body)", ("verify_signature (wa_outbox/webhooks.py)",)),
    ("JSON parse", ("_parse (wa_outbox/webhooks.py)",)),
    ("split into events, dedup keys", ("split_payload (wa_outbox/webhooks.py)",)),
    ("sanitize", ("_sanitized (wa_outbox/webhooks.py)",)),
    ("rows to one JSON parameter", ("_serialize (wa_outbox/webhook_store.py)",)),
    ("INSERT: pool checkout, psycopg, wait", ("fetch (wa_outbox/db.py)",)),
    ("metrics (prometheus_client)", ("prometheus_client", "prometheus_flask_exporter")),
    ("group commit (queueing, handing over)", ("wa_outbox/webhook_store.py",)),
    ("Flask request cycle (not taken by stored POSTs)", ("Flask.wsgi_app (flask/app.py)",)),
    ("fast path: read body, answer", ("wa_outbox/web/webhook_views.py",)),
    ("gunicorn: accept, parse HTTP, write, keep-alive", ("gunicorn/",)),
)


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="also profile the receiver's workers with py-spy")
    parser.add_argument("--apps", type=int, default=0,
                        help="register this many Meta apps (one secret each; the bench's WABA and number belong to "
                             "the first, whose secret signs the bodies): verification under every secret, routing")
    add_json_argument(parser)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")

    server = normalize_database_url(os.environ["DATABASE_URL"]) if os.environ.get("DATABASE_URL") \
        else embedded_database_url(ROOT / ".wa-outbox")
    global _BENCH_DATABASE
    dbname = _BENCH_DATABASE = f"wa_outbox_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
        sync, version = (conn.execute(f"SHOW {name}").fetchone()[0] for name in ("synchronous_commit",
                                                                                  "server_version"))
    from urllib.parse import urlsplit, urlunsplit
    url = urlunsplit(urlsplit(server)._replace(path=f"/{dbname}"))
    migrate.upgrade(url)
    env = {**os.environ, "DATABASE_URL": url, "WHATSAPP_APP_SECRET": SECRET, "WHATSAPP_VERIFY_TOKEN": "v",
           "WA_OUTBOX_API_TOKENS": "bench-token-0123456789", "LOG_LEVEL": "WARNING"}
    if args.apps:
        env.update(register_apps(url, args.apps))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    tmp = Path(tempfile.mkdtemp(prefix="wa-outbox-bench-"))
    single, batched = tmp / "single.txt", tmp / "batched.txt"
    random.seed(7)
    write_bodies(single, 60_000, per_post=1)
    write_bodies(batched, 3_000, per_post=100)
    from wa_outbox.config import Settings
    web = Settings.from_env(env)
    facts = (f"gunicorn: WEB_CONCURRENCY={web.web_concurrency} x WA_OUTBOX_WEB_THREADS={web.web_threads} gthread; "
             f"wrk -t2 -c{args.connections} -d{args.duration}s; PostgreSQL {version}, synchronous_commit={sync}; "
             f"{args.apps} registered app(s); "
             f"{os.cpu_count()} cores shared by gunicorn, Postgres and wrk")
    print(facts)
    results = {}
    profiles = {}
    try:
        for name, app, port in (("bare", "bench.bare_app:app", PORT_BARE), ("receiver", "wsgi:app", PORT_REAL)):
            proc = start_gunicorn(app, port, env)
            try:
                run_wrk(port, single, 2, args.connections)  # warm-up (imports, pools, prepared statements)
                results[name, 1] = run_wrk(port, single, args.duration, args.connections, proc)
                results[name, 100] = run_wrk(port, batched, args.duration, args.connections, proc)
                if args.profile and name == "receiver":
                    for per_post, bodies in ((1, single), (100, batched)):
                        profiles[per_post] = profile(proc, port, bodies, min(args.duration, 10), args.connections)
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
    cpu_names = ("gunicorn workers", "postgres backends", "wrk")
    print(f"\nCPU ms per POST{'':<19}" + "".join(f"{n:>19}" for n in cpu_names))
    for per_post in (1, 100):
        for name in ("bare", "receiver"):
            cpu = results[name, per_post].get("cpu_ms_per_post", {})
            print(f"{name + f' ({per_post}/POST)':<34}" + "".join(f"{cpu.get(n, 0):>19.3f}" for n in cpu_names))
    profiles = {n: p for n, p in profiles.items() if p}
    if len(profiles) == 2:
        print("\nwhere the receiver's workers spend their Python CPU time (py-spy, GIL held), % of samples")
        for step in profiles[1]:
            print(f"  {step:<50}{profiles[1][step]:>7.1f}{profiles[100][step]:>7.1f}")
    write(args.json, "webhooks", _json_results(results, profiles, stored), facts=facts)


def _by_nines(percentiles: list) -> list:
    """[[percentile, ms], ...] as [[1 / (1 - percentile), ms], ...]: the tail spread out on a log axis."""
    return [[round(100 / (100 - p)), ms] for p, ms in percentiles if p < 100]


def _json_results(results: dict, profiles: dict, stored: int) -> dict:
    """The results as bench/report.py reads them: headline rows, a latency plot, tables."""
    bare1, real1, bare100, real100 = (results["bare", 1], results["receiver", 1], results["bare", 100],
                                      results["receiver", 100])
    ratio = real1["rps"] / bare1["rps"]
    headline = [
        {"what": "webhook ingest, 1 update/POST", "unit": "req/s", "value": round(real1["rps"]),
         "reference": round(bare1["rps"]), "reference_name": "bare Flask endpoint, same gunicorn",
         "ratio": round(ratio, 2), "goal": ">= 0.50 of the reference", "met": ratio >= 0.5},
        {"what": "webhook ingest p99 latency, 1 update/POST", "unit": "ms", "value": real1["p99"],
         "reference": bare1["p99"], "reference_name": "bare Flask endpoint, same gunicorn",
         "ratio": round(real1["p99"] / bare1["p99"], 2) if bare1["p99"] else None, "goal": "<= 50 ms",
         "met": real1["p99"] <= 50},
        {"what": "webhook ingest, 100 updates/POST", "unit": "updates/s", "value": round(real100["rps"] * 100),
         "reference": round(bare100["rps"] * 100), "reference_name": "bare Flask endpoint, same gunicorn, same bodies",
         "ratio": round(real100["rps"] / bare100["rps"], 2), "goal": ">= 50,000 updates/s",
         "met": real100["rps"] * 100 >= 50_000},
    ]
    plots = [{"name": f"webhooks-latency-{n}", "title": f"Webhook POST latency percentiles, {n} update(s)/POST",
              "x_label": "1 / (1 - percentile): 2 = p50, 100 = p99, 1,000 = p99.9", "y_label": "latency (ms)",
              "kind": "line", "x_scale": "log",
              "series": {label: _by_nines(results[name, n]["percentiles_ms"])
                         for label, name in (("wa-outbox receiver", "receiver"), ("bare Flask endpoint", "bare"))}}
             for n in (1, 100)]
    tables = [{"title": "Webhook ingest: both cases, same gunicorn settings",
               "columns": ["case", "req/s", "updates/s", "p50 ms", "p99 ms", "non-2xx"],
               "rows": [[f"{'bare Flask endpoint' if name == 'bare' else 'wa-outbox receiver'} ({n}/POST)",
                         round(results[name, n]["rps"]), round(results[name, n]["rps"] * n), results[name, n]["p50"],
                         results[name, n]["p99"], results[name, n]["errors"]]
                        for n in (1, 100) for name in ("bare", "receiver")]},
              {"title": "CPU time per POST by process (ms), measured over each run",
               "columns": ["case", "gunicorn workers", "postgres backends", "wrk"],
               "rows": [[f"{name} ({n}/POST)", *(results[name, n].get("cpu_ms_per_post", {}).get(k)
                                                  for k in ("gunicorn workers", "postgres backends", "wrk"))]
                        for n in (1, 100) for name in ("bare", "receiver")]}]
    if len(profiles) == 2:
        tables.append({"title": "Where the receiver's gunicorn workers spend their Python CPU time "
                                "(py-spy samples holding the GIL, % of all)",
                       "columns": ["step", "1 update/POST", "100 updates/POST"],
                       "rows": [[step, profiles[1][step], profiles[100][step]] for step in profiles[1]]})
    return {"headline": headline, "plots": plots, "tables": tables, "rows_stored": stored,
            "runs": {f"{name}_{n}": results[name, n] for (name, n) in results}}


if __name__ == "__main__":
    main()
