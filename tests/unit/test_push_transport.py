"""The delivery POST (worker/_push.py) against real local HTTP servers, no database: the URL rule at connect time
(a name is resolved, every address checked, the connection goes to a checked one), redirects never followed, the
answer's first bytes kept, and signatures the reference library verifies."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

from wa_outbox.worker._push import HEAD_BYTES, PushTransport, sign, signature_header

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@contextmanager
def server(status: int = 200, body: bytes = b"ok", headers: dict[str, str] | None = None) -> Iterator[list]:
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            seen.append({"path": self.path, "host": self.headers["Host"], "body": self.rfile.read(length)})
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    seen.append(httpd.server_port)  # seen[0]: the port
    try:
        yield seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_name_is_resolved_and_the_connection_goes_to_the_checked_address():
    with server() as seen:
        port = seen[0]
        transport = PushTransport(timeout=5, allow_private=True, resolver=lambda host, _port: ["127.0.0.1"])
        result = transport.post(f"http://receiver.example:{port}/hooks?x=1", b"{}", {})
        transport.close()
    assert result.status_code == 200 and result.head == "ok" and result.error is None
    assert seen[1]["host"] == f"receiver.example:{port}" and seen[1]["path"] == "/hooks?x=1"


def test_without_allow_private_a_name_resolving_to_loopback_or_private_is_refused_unconnected():
    with server() as seen:
        port = seen[0]
        for answer in (["127.0.0.1"], ["93.184.216.34", "10.0.0.5"], ["169.254.169.254"], ["::1"]):
            transport = PushTransport(timeout=5, allow_private=False, resolver=lambda _h, _p, a=answer: a)
            result = transport.post(f"https://receiver.example:{port}/", b"{}", {})
            assert result.status_code is None and result.error.startswith("refused: receiver.example resolves to")
        refused = PushTransport(timeout=5, allow_private=False).post(f"http://127.0.0.1:{port}/", b"{}", {})
        assert refused.status_code is None and refused.error.startswith("refused: the URL must be https")
    assert seen == [port]  # no request reached the server


def test_a_name_that_does_not_resolve_is_a_failed_attempt():
    def nowhere(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")
    result = PushTransport(timeout=5, allow_private=True, resolver=nowhere).post("http://nowhere.invalid/", b"", {})
    assert result.status_code is None and "could not resolve nowhere.invalid" in result.error


def test_redirects_are_never_followed_and_retry_after_is_read():
    with server(status=307, headers={"Location": "http://127.0.0.1:1/", "Retry-After": "12"}) as seen:
        result = PushTransport(timeout=5, allow_private=True).post(f"http://127.0.0.1:{seen[0]}/", b"{}", {})
    assert result.status_code == 307 and result.retry_after == 12 and len(seen) == 2


def test_only_the_first_bytes_of_a_large_answer_are_kept():
    with server(status=500, body=b"x" * 200_000) as seen:
        transport = PushTransport(timeout=5, allow_private=True)
        result = transport.post(f"http://127.0.0.1:{seen[0]}/", b"{}", {})
        again = transport.post(f"http://127.0.0.1:{seen[0]}/", b"{}", {})  # the dropped connection is replaced
    assert result.status_code == 500 and result.head == "x" * HEAD_BYTES and again.status_code == 500


def test_a_refused_connection_is_a_failed_attempt():
    with server() as seen:
        port = seen[0]
    result = PushTransport(timeout=5, allow_private=True).post(f"http://127.0.0.1:{port}/", b"{}", {})
    assert result.status_code is None and result.error


def test_signatures_verify_with_the_reference_library_one_or_two_secrets():
    body = '{"id":"evt_1","type":"message.received","data":{"text":"olá ✓"}}'.encode()
    timestamp = int(datetime.now(UTC).timestamp())
    assert sign(SECRET, "evt_1", timestamp, body) == Webhook(SECRET).sign(
        "evt_1", datetime.fromtimestamp(timestamp, UTC), body.decode())
    old = "whsec_b2xkLXNlY3JldC0xMjM0NTY="
    header = signature_header([SECRET, old], "evt_1", timestamp, body)
    for secret in (SECRET, old):
        Webhook(secret).verify(body, {"webhook-id": "evt_1", "webhook-timestamp": str(timestamp),
                                      "webhook-signature": header})
