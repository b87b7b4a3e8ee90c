"""A webhook body past WA_OUTBOX_WEBHOOK_MAX_BYTES is a 413 counted as too_large — also chunked, without a
Content-Length, which Werkzeug would otherwise cut at the limit (so it failed the signature: a 403 counted as a bad
signature, feeding WaOutboxBadWebhookSignatures). And a 404 under /ops carries the ops page's security headers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import APP_SECRET, meta_body
from tests.live import serve
from tests.processes import ROOT, free_port, service_env, wait_until_up
from wa_outbox.webhooks import sign


def rejected(client) -> dict[str, float]:
    return rejected_in(client.get("/metrics").get_data(as_text=True))


def rejected_in(text: str) -> dict[str, float]:
    return {s.labels["reason"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "wa_outbox_webhook_rejected" for s in f.samples if s.name.endswith("_total")}


def post_chunked(base_url: str, body: bytes, signature: str, chunk: int = 64 * 1024) -> tuple[int, dict, bytes]:
    """POST /webhooks/whatsapp over a raw socket with Transfer-Encoding: chunked (no Content-Length); the body is
    sent from a thread while the answer is read, as a client does that is cut off mid-body."""
    url = urlsplit(base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=60)
    head = (f"POST /webhooks/whatsapp HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
            f"X-Hub-Signature-256: {signature}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()

    def send() -> None:
        try:
            sock.sendall(head)
            for at in range(0, len(body), chunk):
                piece = body[at:at + chunk]
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed before the whole body was sent
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            data = sock.recv(65536)
            assert data, f"connection closed before an answer: {received!r}"
            received += data
        head_bytes, _, rest = received.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(rest) < length:
            data = sock.recv(65536)
            assert data, "connection closed mid-answer"
            rest += data
    finally:
        sock.close()
        sender.join(timeout=60)
    return int(lines[0].split()[1]), headers, rest[:length]


def padded_body(size: int) -> bytes:
    """A valid webhook body of exactly `size` bytes (JSON allows trailing whitespace)."""
    body = meta_body({"object": "whatsapp_business_account", "entry": []})
    return body + b" " * (size - len(body))


def test_a_chunked_body_past_the_limit_is_413_counted_as_too_large_not_as_a_bad_signature(app, client, db):
    limit = app.config["MAX_CONTENT_LENGTH"]
    body = padded_body(7_000_000)
    assert len(body) > limit
    before = rejected(client)
    with serve(app) as base_url:
        status, headers, answer = post_chunked(base_url, body, sign(APP_SECRET, body))
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert json.loads(answer)["error"] == {"status": 413,
                                           "message": f"body is larger than the limit of {limit} bytes"}
    after = rejected(client)
    assert after["too_large"] == before.get("too_large", 0) + 1
    assert after["signature"] == before.get("signature", 0)
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == 0


def test_under_gunicorn_a_chunked_body_past_the_limit_is_413_counted_as_too_large(database_url, db, tmp_path):
    port, multiproc = free_port(), tmp_path / "prometheus"
    multiproc.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app"], cwd=ROOT,
        env=service_env(database_url, WA_OUTBOX_BIND=f"127.0.0.1:{port}", PROMETHEUS_MULTIPROC_DIR=str(multiproc)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    body = padded_body(7_000_000)  # the service's default limit is 6 MiB
    try:
        wait_until_up(f"{base}/healthz", proc)
        status, _, answer = post_chunked(base, body, sign(APP_SECRET, body))
        counted = rejected_in(requests.get(f"{base}/metrics", timeout=30).text)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert (status, json.loads(answer)["error"]["status"]) == (413, 413)
    assert counted == {"signature": 0, "payload": 0, "too_large": 1, "wrong_app": 0}  # every reason, at 0 until counted
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == 0
    assert proc.returncode == 0 and "Traceback" not in output, output


def test_a_chunked_body_of_exactly_the_limit_is_read_whole_and_stored(app, client, db):
    limit = app.config["MAX_CONTENT_LENGTH"]
    body = padded_body(limit)
    before = rejected(client)
    with serve(app) as base_url:
        status, _, answer = post_chunked(base_url, body, sign(APP_SECRET, body))
    assert (status, json.loads(answer)) == (200, {"received": 0, "new": 0, "duplicate": 0})
    assert rejected(client) == before


def test_a_content_length_past_the_limit_is_413_counted_as_too_large(app, client):
    limit = app.config["MAX_CONTENT_LENGTH"]
    body = padded_body(limit + 1)
    before = rejected(client)
    r = client.post("/webhooks/whatsapp", data=body,
                    headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(APP_SECRET, body)})
    assert r.status_code == 413 and r.json["error"]["status"] == 413
    after = rejected(client)
    assert after["too_large"] == before.get("too_large", 0) + 1
    assert after["signature"] == before.get("signature", 0)


SECURITY_HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy",
                    "Cache-Control")


def test_a_404_or_405_under_ops_carries_the_ops_pages_security_headers(client):
    page = client.get("/ops/login")
    assert page.status_code == 200
    expected = {name: page.headers[name] for name in SECURITY_HEADERS}
    assert "frame-ancestors 'none'" in expected["Content-Security-Policy"]
    for answer in (client.get("/ops/no-such-page"), client.get("/ops/messages/not-a-number"),
                   client.open("/ops/login", method="PUT")):
        assert answer.status_code in (404, 405), answer.status_code
        assert {name: answer.headers.get(name) for name in SECURITY_HEADERS} == expected, answer.status_code
    # and only under /ops: the API's answers are not a page
    assert "Content-Security-Policy" not in client.get("/v1/no-such-thing").headers
