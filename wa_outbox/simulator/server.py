"""The simulator's HTTP server, and `SimulatorServer`, the object tests and the CLI start and drive.

A `ThreadingHTTPServer` with an HTTP/1.1 handler (keep-alive, so a pooled `requests.Session` reuses connections;
one thread per connection). It is hand-rolled on `http.server` rather than a WSGI app because two faults need the raw
socket: `lost_response` resets the connection after the message was accepted, and `timeout` holds it open without
answering. Each answer is written with a single `send` (headers and body together, TCP_NODELAY), which keeps the hot
path lean enough for a few thousand requests per second.
"""

from __future__ import annotations

import http
import json
import logging
import re
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import parse_qs

from . import admin, media
from .config import SimulatorConfig
from .core import Reply, Simulator
from .errors import fbtrace_id
from .uploads import MAX_UPLOAD_BODY

log = logging.getLogger(__name__)

SEND_PATH = re.compile(r"^/(v\d+\.\d+)/([^/]+)/messages/?$")
MEDIA_PATH = re.compile(r"^/(v\d+\.\d+)/([0-9]{1,32})/?$")  # GET /{version}/{media-id} (simulator/media.py)
TEMPLATES_PATH = re.compile(r"^/(v\d+\.\d+)/([0-9]+)/message_templates/?$")  # GET /{waba-id}/message_templates
MAX_BODY_BYTES = 4 * 1024 * 1024
UPLOAD_PATH = re.compile(r"^/(v\d+\.\d+)/([^/]+)/media/?$")  # media uploads (mediaout): bodies up to MAX_UPLOAD_BODY


class SimulatorServer:
    """A fake WhatsApp Cloud API on a real socket, started in background threads.

        with SimulatorServer(access_token="t", app_secret="s", webhook_url="http://127.0.0.1:8000/webhooks/whatsapp",
                             faults=[{"mode": "error", "code": 131000, "count": 1}]) as sim:
            requests.post(f"{sim.base_url}/{number_id}/messages", json=body, headers={"Authorization": "Bearer t"})
            sim.wait_for_webhooks_idle(5)
            assert len(sim.messages(to="+5511…")) == 1

    Keyword arguments beyond the named ones are `SimulatorConfig` fields (status_delays_ms, final_status, mps,
    pair_limit, duplicate_rate, duplicate_max, reorder_rate, batch_rate, validate, …). `port=0` picks a free port. A
    server is started once; `stop()` ends it for good.
    """

    def __init__(self, access_token: str = "dev-access-token", app_secret: str = "dev-app-secret",
                 webhook_url: str | None = None, faults: Sequence[dict[str, Any]] = (), *, host: str = "127.0.0.1",
                 port: int = 0, version: str = "v23.0", seed: int | None = None, **config: Any):
        settings = SimulatorConfig().updated({"webhook_url": webhook_url, **config})
        self.simulator = Simulator(access_token=access_token, app_secret=app_secret, config=settings,
                                   faults=list(faults), seed=seed)
        self.version = version
        self._address = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> SimulatorServer:
        if self._server is not None:
            raise RuntimeError("a SimulatorServer is started once")
        self._server = _Server(self._address, self.simulator)
        self.simulator.webhooks.start()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="simulator-http", daemon=True)
        self._thread.start()
        log.info("simulator listening on %s (admin %s)", self.base_url, self.admin_url)
        return self

    def stop(self) -> None:
        server = self._server
        if server is None or server.stopping.is_set():
            return
        server.stopping.set()  # wakes handlers that sleep for latency or timeout faults
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
        self.simulator.webhooks.stop()
        self.simulator.media.close()

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self._address[0]}:{self.port}"

    @property
    def base_url(self) -> str:
        """What WHATSAPP_API_BASE_URL is set to: sends go to `{base_url}/{phone_number_id}/messages`."""
        return f"{self.url}/{self.version}"

    @property
    def admin_url(self) -> str:
        return f"{self.url}/_admin"

    # --- the Python twin of the admin endpoints ---------------------------------------------------------------------

    @property
    def config(self) -> SimulatorConfig:
        return self.simulator.config

    def configure(self, **changes: Any) -> SimulatorConfig:
        return self.simulator.configure(changes)

    def messages(self, to: str | None = None, phone_number_id: str | None = None) -> list[dict[str, Any]]:
        return self.simulator.messages(to, phone_number_id)

    def faults(self) -> list[dict[str, Any]]:
        return self.simulator.faults()

    def set_faults(self, rules: list[dict[str, Any]]) -> None:
        self.simulator.set_faults(rules)

    def inbound(self, from_: str, text: str | None = None, **kwargs: Any) -> str:
        return self.simulator.inbound(from_, text, **kwargs)

    def number_update(self, field: str, value: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.simulator.number_update(field, value, **kwargs)
    def inbound_media(self, from_: str, kind: str, data: bytes | Iterable[bytes], *, mime_type: str,
                      **kwargs: Any) -> dict:
        """An inbound message carrying a file (`data`: bytes, or an iterable of byte chunks): {"id": wamid,
        "media_id", "sha256" (hex)}. kwargs: filename, caption, phone_number_id, name, voice."""
        chunks: Iterable[bytes] = [data] if isinstance(data, bytes) else data
        return media.inbound_media(self.simulator, from_, kind, chunks, mime_type=mime_type, **kwargs)

    def media_stats(self) -> dict[str, Any]:
        """{"files", "lookups": {media id: n}, "downloads": {media id: n answered in full}}."""
        return self.simulator.media.stats()

    def reset(self) -> None:
        self.simulator.reset()

    def stats(self) -> dict[str, Any]:
        return self.simulator.stats()

    def wait_for_webhooks_idle(self, timeout: float | None = 10.0) -> bool:
        """Wait until every scheduled webhook was delivered (or given up); False on timeout."""
        return self.simulator.webhooks.wait_idle(timeout)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep-alive connections of pooled clients would otherwise block stop()
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], simulator: Simulator):
        self.simulator = simulator
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        TCPServer.server_bind(self)  # not HTTPServer's, which resolves the host name (a DNS lookup)
        self.server_name, self.server_port = self.server_address[:2]  # type: ignore[assignment]  # (host, port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away mid-request (a worker killed, a timeout): nothing worth a traceback
        super().handle_error(request, client_address)

    def track(self, connection: socket.socket, open_: bool) -> None:
        with self._connections_lock:
            (self._connections.add if open_ else self._connections.discard)(connection)

    def close_connections(self) -> None:
        """Wake handler threads blocked reading an idle keep-alive connection."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def parse_request(self) -> bool:
        """http.server's parse_request without the email-package header parser, a third of the CPU per request.
        Headers land in a plain dict with lower-case names. The request's arrival is noted first: the throughput
        limits count by it, as Meta's edge would, not by when this busy process got round to checking the request."""
        self.arrived = (time.time(), time.monotonic())
        self.command = None  # type: ignore[assignment]  # as http.server's own parse_request: no command yet
        self.request_version = "HTTP/1.0"  # until the request line says otherwise
        self.requestline = str(self.raw_requestline, "latin-1").rstrip("\r\n")  # type: ignore[attr-defined]
        words = self.requestline.split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.send_error(400, "Bad request line")
            return False
        self.command, self.path, self.request_version = words
        headers: dict[str, str] = {}
        while True:
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, colon, value = str(line, "latin-1").partition(":")
            if not colon or len(headers) >= 100:
                self.send_error(400, "Bad header")
                return False
            headers[name.strip().lower()] = value.strip()
        self.headers = headers  # type: ignore[assignment]  # a plain dict on purpose (see above)
        connection = headers.get("connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive")
        return True

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        path, _, query = self.path.partition("?")
        if self._media(method, path, query):
            return
        body = self._read_body()
        if body is None:
            return
        simulator = self.server.simulator
        if path.startswith(admin.PREFIX):
            params = {key: values[0] for key, values in parse_qs(query).items()}
            status, answer = admin.handle(simulator, method, path, params, body)
            self._write(Reply(status, json.dumps(answer).encode()))
            return
        match = SEND_PATH.match(path)
        upload = UPLOAD_PATH.match(path)
        listing = TEMPLATES_PATH.match(path) if method == "GET" else None
        if method == "POST" and match:
            reply = simulator.handle_send(match[2], self.headers.get("authorization"), body, self.arrived)
        elif method == "POST" and upload:  # media uploads (mediaout)
            reply = simulator.handle_upload(upload[2], self.headers.get("authorization"),
                                            self.headers.get("content-type"), body)
        elif listing:
            params = {key: values[0] for key, values in parse_qs(query).items()}
            base = f"http://{self.headers.get('host') or '127.0.0.1'}/{listing[1]}/{listing[2]}/message_templates"
            reply = simulator.list_templates(listing[2], self.headers.get("authorization"), params, base)
        else:
            reply = _unsupported(method, path)
        if reply.delay_s and self.server.stopping.wait(reply.delay_s):
            reply = Reply(0, drop=True)
        if reply.drop:
            self._reset()
        else:
            self._write(reply)

    # --- media (simulator/media.py) ---------------------------------------------------------------------------------

    def _media(self, method: str, path: str, query: str) -> bool:
        """Answer a media request (the lookup, the download, an inbound message with a file); False: not one."""
        simulator = self.server.simulator
        if method == "GET" and path.startswith(media.DOWNLOAD_PREFIX):
            if self._read_body() is None:
                return True
            found = media.download(simulator, path[len(media.DOWNLOAD_PREFIX):], self.headers.get("authorization"))
            if isinstance(found, Reply):
                self._answer(found)
            else:
                self._stream(found)
            return True
        match = MEDIA_PATH.match(path)
        if method == "GET" and match:
            if self._read_body() is None:
                return True
            host = self.headers.get("host") or f"{self.server.server_name}:{self.server.server_port}"
            self._answer(media.lookup(simulator, match[2], self.headers.get("authorization"), f"http://{host}"))
            return True
        kind = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if method == "POST" and path.rstrip("/") == "/_admin/inbound" and kind in ("multipart/form-data",
                                                                                     "application/octet-stream"):
            body = self._read_body(media.MAX_UPLOAD_BYTES, stream=kind == "application/octet-stream")
            if body is None:
                return True
            params = {key: values[0] for key, values in parse_qs(query).items()}
            try:
                if kind == "multipart/form-data":
                    assert isinstance(body, bytes)
                    fields, data, mime_type, filename = media.parse_multipart(self.headers["content-type"], body)
                    fields = {**params, **fields}
                    fields.setdefault("mime_type", mime_type)
                    if filename:
                        fields.setdefault("filename", filename)
                    answer = media.admin_inbound(simulator, fields, [data])
                else:
                    answer = media.admin_inbound(simulator, params, body)
                self._write(Reply(200, json.dumps(answer).encode()))
            except ValueError as exc:
                self._write(Reply(400, json.dumps({"error": str(exc)}).encode()))
            return True
        return False

    def _answer(self, reply: Reply) -> None:
        if reply.delay_s and self.server.stopping.wait(reply.delay_s):
            reply = Reply(0, drop=True)
        if reply.drop:
            self._reset()
        else:
            self._write(reply)

    def _stream(self, found: media.Download) -> None:
        head = ["HTTP/1.1 200 OK", f"Content-Type: {found.mime_type}", f"Content-Length: {found.size}"]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        with open(found.path, "rb") as source:
            while chunk := source.read(media.CHUNK):
                self.wfile.write(chunk)
                if found.pause_s and self.server.stopping.wait(found.pause_s):
                    return

    def _read_body(self, limit: int = MAX_BODY_BYTES, stream: bool = False) -> Any:
        """The request's body (bytes); with `stream`, an iterator of its chunks read as they are consumed."""
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if limit == MAX_BODY_BYTES and UPLOAD_PATH.match(self.path.partition("?")[0]):
            limit = MAX_UPLOAD_BODY  # media uploads (mediaout): bodies up to MAX_UPLOAD_BODY
        if stream and 0 <= length <= limit:
            return self._chunks(length)
        if not 0 <= length <= limit:
            self.close_connection = True
            self._write(Reply(413 if length > 0 else 400, b'{"error":"bad Content-Length"}'))
            return None
        return self.rfile.read(length) if length else b""

    def _chunks(self, length: int) -> Any:
        left = length
        while left > 0:
            chunk = self.rfile.read(min(left, media.CHUNK))
            if not chunk:
                raise ValueError("the body ended early")
            left -= len(chunk)
            yield chunk

    def _write(self, reply: Reply) -> None:
        try:
            phrase = http.HTTPStatus(reply.status).phrase
        except ValueError:
            phrase = ""
        lines = [f"HTTP/1.1 {reply.status} {phrase}", f"Content-Type: {reply.content_type}",
                 f"Content-Length: {len(reply.body)}"]
        lines += [f"{name}: {value}" for name, value in reply.headers]
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body)

    def _reset(self) -> None:
        """Drop the connection with a TCP reset: the client gets no answer at all."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("simulator: %s " + format, self.address_string(), *args)


def _unsupported(method: str, path: str) -> Reply:
    """Meta's answer for a path that names no object or no operation."""
    body = {"error": {"message": f"Unsupported {method.lower()} request. Object with ID '{path.strip('/')}' does "
                                 "not exist, cannot be loaded due to missing permissions, or does not support this "
                                 "operation.", "type": "GraphMethodException", "code": 100, "error_subcode": 33,
                      "fbtrace_id": fbtrace_id()}}
    return Reply(400, json.dumps(body).encode())
