"""A receiver for development (`wa-outbox events listen`): an HTTP server that verifies each delivery as any app's
receiver should, with the Standard Webhooks reference library (`standardwebhooks`, https://www.standardwebhooks.com/),
and hands each verified event to a printer. A delivery that does not verify is answered 401 and never printed.

Not for production: one process, plain http, meant for http://127.0.0.1:PORT/ under
WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

from .events import summary

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024
SUMMARY_CHARS = 160


def verify(webhook: Webhook, body: bytes, headers: dict[str, str]) -> dict[str, Any] | None:
    """The delivered event when the body and headers verify (signature and timestamp), else None."""
    try:
        event = webhook.verify(body, headers)
    except (WebhookVerificationError, ValueError, TypeError):  # ValueError: malformed header, base64 or UTF-8
        return None
    return event if isinstance(event, dict) else None


def line(event: dict[str, Any]) -> str:
    """One readable line per event: its time, type, id, what it says (a customer's text, a status), then its data cut
    short (the data's first keys are rarely the telling ones)."""
    data = json.dumps(event.get("data"), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if len(data) > SUMMARY_CHARS:
        data = data[:SUMMARY_CHARS - 1] + "…"
    said = summary(event) if isinstance(event.get("data"), dict) else ""
    return f"{event.get('timestamp', '-')}  {str(event.get('type', '-')):<20} {event.get('id', '-')}  {said}  {data}"


class ListenServer(ThreadingHTTPServer):
    daemon_threads = True

    webhook: Webhook | None = None  # set before serving: every delivery is refused without it

    def __init__(self, address: tuple[str, int], emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: ListenServer
    server_version = "wa-outbox-listen"

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self._answer(411, "a delivery has a Content-Length")
        if not 0 <= length <= MAX_BODY:
            return self._answer(413, "too large")
        body = self.rfile.read(length)
        webhook = self.server.webhook
        event = verify(webhook, body, dict(self.headers.items())) if webhook is not None else None
        if event is None:
            log.warning("refused a delivery that does not verify (webhook-id %s)",
                        str(self.headers.get("webhook-id", "-"))[:80])
            return self._answer(401, "the signature does not verify")
        self.server.emit(event)
        return self._answer(200, "ok")

    def do_GET(self) -> None:
        self._answer(405, "POST deliveries here")

    def _answer(self, status: int, text: str) -> None:
        body = text.encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # each delivery is printed (or refused with a warning) instead
