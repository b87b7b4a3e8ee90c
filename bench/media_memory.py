"""A 100 MB inbound document, end to end, with the memory of the processes that move it measured.

    python bench/media_memory.py [--mb 100] [--store postgres|s3] [--json PATH]

Real processes on real Postgres (DATABASE_URL, else the embedded one; a scratch database is created and dropped):
`wa-outbox worker` and the web (gunicorn, as `wa-outbox web` starts it), and the simulator in this process, which keeps
the file on disk and serves it streamed. The simulator posts the webhook of a document of `--mb` MB; the worker
looks it up and downloads it into the store (Postgres chunks, or with `--store s3` a bucket in moto's server mode,
started here); then the file is read back through `GET /v1/media/<id>` (Postgres: streamed by the web; S3: the
presigned URL it redirects to) and its sha256 compared. Reported: each process's peak resident memory (VmHWM) before
the document (the reference: the same process after a 1 MB document went the same way, so that the store's one-off
cost, such as boto3's import, is not counted as the file's) and after, and the difference; the run exits 1
if the bytes differ or the worker's peak grew by more than a quarter of the file.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from wa_outbox import migrate  # noqa: E402
from wa_outbox.config import normalize_database_url  # noqa: E402
from wa_outbox.db import embedded_database_url  # noqa: E402
from wa_outbox.simulator import SimulatorServer  # noqa: E402

SECRET = "bench-app-secret"
ACCESS_TOKEN = "bench-access-token"
API_TOKEN = "bench-api-token-0123456789"
SENDER = "100000000000001"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_kb(pid: int) -> int:
    """VmHWM: the process's peak resident set size so far, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


def wait(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out after {seconds:.0f} s waiting for {what}")


def document_chunks(megabytes: int):
    """`megabytes` MB of bytes no compressor shrinks, generated a megabyte at a time."""
    block = os.urandom(1024 * 1024)
    for i in range(megabytes):
        yield hashlib.sha256(i.to_bytes(8, "big")).digest() + block[32:]


def read_back(web_url: str, media_id: str) -> tuple[Any, int]:
    """GET /v1/media/<id> streamed (the web streams it, or redirects to the bucket): its sha256 and size."""
    digest, size = hashlib.sha256(), 0
    with requests.get(f"{web_url}/v1/media/{media_id}", stream=True, timeout=60,
                      headers={"Authorization": f"Bearer {API_TOKEN}"}) as response:
        response.raise_for_status()
        for chunk in response.iter_content(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return digest, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--store", choices=("postgres", "s3"), default="postgres")
    add_json_argument(parser)
    args = parser.parse_args()

    server = normalize_database_url(os.environ.get("DATABASE_URL") or embedded_database_url(ROOT / ".wa-outbox"))
    name = f"wa_outbox_bench_media_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    processes: list[subprocess.Popen] = []
    try:
        migrate.upgrade(url)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
        env.update(DATABASE_URL=url, WHATSAPP_APP_SECRET=SECRET, WHATSAPP_VERIFY_TOKEN="vt",
                   WA_OUTBOX_API_TOKENS=API_TOKEN, WHATSAPP_ACCESS_TOKEN=ACCESS_TOKEN,
                   WHATSAPP_PHONE_NUMBER_ID=SENDER, WEB_CONCURRENCY="1", WA_OUTBOX_WEB_THREADS="4",
                   LOG_LEVEL="WARNING", WA_OUTBOX_MEDIA_MAX_BYTES=str((args.mb + 10) * 1024 * 1024))
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if args.store == "s3":
            s3_port = free_port()
            processes.append(subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                               str(s3_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            endpoint = f"http://127.0.0.1:{s3_port}"
            s3_env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                      "AWS_DEFAULT_REGION": "us-east-1"}
            env.update(s3_env, WA_OUTBOX_MEDIA_STORE="s3://bench-media/inbound")

            def s3_up() -> bool:
                try:
                    return requests.get(endpoint, timeout=5).status_code < 500
                except requests.RequestException:
                    return False
            wait(s3_up, 60, "moto's S3 server")
            import boto3
            boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                         region_name="us-east-1").create_bucket(Bucket="bench-media")
        web_port = free_port()
        web = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                                "wa_outbox.web.wsgi:app"], cwd=ROOT,
                               env={**env, "WA_OUTBOX_BIND": f"127.0.0.1:{web_port}"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(web)
        web_url = f"http://127.0.0.1:{web_port}"

        def web_up() -> bool:
            try:
                return requests.get(f"{web_url}/healthz", timeout=5).ok
            except requests.RequestException:
                return False
        wait(web_up, 90, "the web")
        with SimulatorServer(access_token=ACCESS_TOKEN, app_secret=SECRET, phone_number_id=SENDER,
                             webhook_url=f"{web_url}/webhooks/whatsapp") as sim:
            worker = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "worker"], cwd=ROOT,
                                      env={**env, "WHATSAPP_API_BASE_URL": sim.base_url},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            processes.append(worker)
            with psycopg.connect(url, autocommit=True) as db:
                wait(lambda: db.execute("SELECT count(*) FROM wa_outbox.workers").fetchone()[0], 90,
                     "the worker's heartbeat")
                # The reference: the same processes after a 1 MB document went the same way, so that what a
                # store costs once (boto3's import and client: about 23 MB, whatever the file's size) is in it
                # and the growth is the file's own.
                warm = sim.inbound_media("+5511912345670", "document", document_chunks(1),
                                         mime_type="application/pdf", filename="warm-up.pdf")
                wait(lambda: db.execute("SELECT state = 'stored' FROM wa_outbox.media WHERE meta_media_id = %s",
                                        (warm["media_id"],)).fetchone() == (True,), 300, "the warm-up document")
                read_back(web_url, warm["media_id"])
                time.sleep(1)
                worker_before = peak_kb(worker.pid)
                web_pids = children(web.pid)
                web_before = {pid: peak_kb(pid) for pid in web_pids}
                started = time.monotonic()
                sent = sim.inbound_media("+5511912345678", "document", document_chunks(args.mb),
                                         mime_type="application/pdf", filename="large.pdf")

                def state() -> str | None:
                    row = db.execute("SELECT state FROM wa_outbox.media WHERE meta_media_id = %s",
                                     (sent["media_id"],)).fetchone()
                    return row[0] if row and row[0] in ("stored", "failed", "expired", "too_large") else None
                final = wait(state, 900, "the document stored")
                fetch_seconds = time.monotonic() - started
                worker_after = peak_kb(worker.pid)
                if final != "stored":
                    raise SystemExit(f"the document ended {final}")
            read_started = time.monotonic()
            digest, size = read_back(web_url, sent["media_id"])
            read_seconds = time.monotonic() - read_started
            web_after = {pid: peak_kb(pid) for pid in web_pids}
        identical = digest.hexdigest() == sent["sha256"] and size == args.mb * 1024 * 1024
        results = {
            "store": args.store, "megabytes": args.mb, "identical": identical,
            "fetch_seconds": round(fetch_seconds, 1), "read_seconds": round(read_seconds, 1),
            "worker_peak_mb_before": round(worker_before / 1024, 1),
            "worker_peak_mb_after": round(worker_after / 1024, 1),
            "worker_peak_growth_mb": round((worker_after - worker_before) / 1024, 1),
            "web_peak_mb_before": round(max(web_before.values()) / 1024, 1),
            "web_peak_mb_after": round(max(web_after.values()) / 1024, 1),
            "web_peak_growth_mb": round(max(web_after[p] - web_before[p] for p in web_pids) / 1024, 1),
        }
        for key, value in results.items():
            print(f"{key:24} {value}")
        write(args.json, "media_memory", results,
              facts=f"{args.mb} MB document, store {args.store}, one worker process, gunicorn with 1 process")
        bounded = results["worker_peak_growth_mb"] < args.mb / 4
        return 0 if identical and bounded else 1
    finally:
        for proc in reversed(processes):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
