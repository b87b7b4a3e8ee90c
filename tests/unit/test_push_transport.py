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


def _certificates(tmp_path, name: str) -> tuple[str, str, str]:
    """A CA and a certificate for `name` it signed: (CA file, certificate file, key file)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = (tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem")
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(files[0]), str(files[1]), str(files[2])


def test_tls_is_verified_against_the_host_name_while_connecting_to_the_checked_address(tmp_path):
    import ssl
    ca, cert, key = _certificates(tmp_path, "receiver.example")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    port = httpd.server_port
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        to_loopback = lambda _h, _p: ["127.0.0.1"]  # noqa: E731 - a resolver that answers the local server
        good = PushTransport(timeout=5, allow_private=True, resolver=to_loopback, ca_certs=ca)
        assert good.post(f"https://receiver.example:{port}/", b"{}", {}).status_code == 204
        wrong_name = PushTransport(timeout=5, allow_private=True, resolver=to_loopback, ca_certs=ca)
        result = wrong_name.post(f"https://other.example:{port}/", b"{}", {})
        assert result.status_code is None and "doesn't match 'receiver.example'" in result.error
        untrusted = PushTransport(timeout=5, allow_private=True, resolver=to_loopback)
        assert untrusted.post(f"https://receiver.example:{port}/", b"{}", {}).status_code is None
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_names_answer_is_kept_a_while_and_checked_at_every_delivery():
    """One resolution per RESOLVE_TTL, not one per delivery; a failed one is not kept; the rule still applies to
    every delivery (a transport without allow_private refuses the kept loopback answer as well)."""
    from wa_outbox.worker._push import RESOLVE_TTL

    asked: list[str] = []
    now = [1000.0]

    def counting(host: str, _port: int) -> list[str]:
        asked.append(host)
        if host == "flaky.example" and len(asked) == 1:
            raise OSError("Temporary failure in name resolution")
        return ["127.0.0.1"]

    with server() as seen:
        port = seen[0]
        transport = PushTransport(timeout=5, allow_private=True, resolver=counting, clock=lambda: now[0])
        assert transport.post(f"http://flaky.example:{port}/", b"{}", {}).status_code is None  # not kept
        for _ in range(3):
            assert transport.post(f"http://flaky.example:{port}/", b"{}", {}).status_code == 200
        assert asked == ["flaky.example", "flaky.example"]
        now[0] += RESOLVE_TTL + 1
        assert transport.post(f"http://flaky.example:{port}/", b"{}", {}).status_code == 200
        assert asked == ["flaky.example"] * 3
        transport.close()
        strict = PushTransport(timeout=5, allow_private=False, resolver=counting, clock=lambda: now[0])
        for _ in range(2):
            result = strict.post(f"https://flaky.example:{port}/", b"{}", {})
            assert result.status_code is None and result.error.startswith("refused: flaky.example resolves to")
    assert len(seen) == 1 + 4  # the port, and the four deliveries that went
