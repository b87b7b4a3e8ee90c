"""Endpoint rows for the push tests, written directly (until the endpoints commands exist on this branch), and a real
local receiver that verifies every delivery with the Standard Webhooks reference library (`standardwebhooks`)."""

from __future__ import annotations

import base64
import dataclasses
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from wa_outbox.config import Settings
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key

SECRET_KEY = generate_key()  # WA_OUTBOX_SECRET_KEY of the push tests


def push_settings(base: Settings, **overrides) -> Settings:
    """Settings that can store and read endpoint secrets, deliver to 127.0.0.1 over http, and retry at once."""
    fast = dict(secret_keys=(SECRET_KEY,), endpoints_allow_private=True, delivery_schedule=(0.1, 0.1, 0.1),
                delivery_timeout=5.0, poll_interval=0.2, lease_seconds=30.0, shutdown_grace=5.0, dry_run=True)
    return dataclasses.replace(base, **{**fast, **overrides})


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def add_endpoint(db, url: str, *, secret: str | None = None, event_types: list[str] | None = None,
                 ordered: bool = False, previous_secret: str | None = None) -> tuple[str, str]:
    """Insert an enabled endpoint; (its id, its secret). Its cursor starts at the feed's start."""
    secret = secret or new_secret()
    box = SecretBox((SECRET_KEY,))
    endpoint_id = "ep_" + secrets.token_hex(8)
    db.execute("INSERT INTO wa_outbox.endpoints (id, url, event_types, ordered, secret_enc, secret_fingerprint, "
               "previous_secret_enc, previous_secret_until) VALUES (%s, %s, %s, %s, %s, %s, %s, "
               "CASE WHEN %s THEN now() + interval '1 hour' END)",
               (endpoint_id, url, event_types, ordered, box.encrypt(secret), fingerprint(secret),
                box.encrypt(previous_secret) if previous_secret else None, previous_secret is not None))
    return endpoint_id, secret


def add_events(db, n: int = 1, *, type_: str = "message.received", phone_number_id: str | None = "100000000000001",
               wa_id: str | None = "5511987654321", start: int = 0, notify: bool = True) -> list[int]:
    """Insert n events in one statement (and one transaction); their seqs. `notify`: wake the workers' dispatch, as
    the statements that write events do."""
    rows = db.execute("INSERT INTO wa_outbox.events (type, phone_number_id, wa_id, data) "
                      "SELECT %s, %s, %s, jsonb_build_object('schema_version', 1, 'n', i, 'text', 'olá ✓') "
                      "FROM generate_series(%s::int, %s::int) AS i ORDER BY i RETURNING seq",
                      (type_, phone_number_id, wa_id, start, start + n - 1)).fetchall()
    if notify:
        db.execute("NOTIFY wa_outbox_events")
    return sorted(seq for (seq,) in rows)


@dataclass
class Received:
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    answered: int


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1. `answer(webhook_id, tries_so_far)` gives the status code of each POST
    (default 200); `hold` (an Event), when set for a test, makes every POST wait until it is set."""
    secrets: list[str]
    answer: Callable[[str, int], int] = lambda _id, _tries: 200
    hold: threading.Event | None = None
    headers_out: dict[str, str] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    waiting: int = 0        # POSTs held by `hold` right now
    most_waiting: int = 0   # ... at most, so far
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def tries(self, webhook_id: str) -> int:
        with self.lock:
            return sum(1 for r in self.received if r.webhook_id == webhook_id)

    def delivered(self) -> list[Received]:
        """The POSTs it answered with a 2xx, in arrival order."""
        with self.lock:
            return [r for r in self.received if 200 <= r.answered < 300]

    def ids(self) -> list[str]:
        return [r.webhook_id for r in self.delivered()]


@contextmanager
def serve_receiver(receiver: Receiver) -> Iterator[Receiver]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            verified = False
            for secret in receiver.secrets:
                try:
                    Webhook(secret).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    pass
            if receiver.hold is not None:
                with receiver.lock:
                    receiver.waiting += 1
                    receiver.most_waiting = max(receiver.most_waiting, receiver.waiting)
                receiver.hold.wait(60)
                with receiver.lock:
                    receiver.waiting -= 1
            webhook_id = headers.get("webhook-id", "")
            with receiver.lock:
                tries = sum(1 for r in receiver.received if r.webhook_id == webhook_id)
            code = receiver.answer(webhook_id, tries)
            with receiver.lock:
                receiver.received.append(Received(webhook_id, headers, body, verified, code))
            answer = b'{"ok": true}' if code < 300 else b"no thanks"
            self.send_response(code)
            for name, value in receiver.headers_out.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_port}/hooks?app=1"
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        server.shutdown()
        server.server_close()
        thread.join()
