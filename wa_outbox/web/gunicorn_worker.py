"""gunicorn's gthread worker, reading each request whole before a thread sees it (gunicorn_conf.worker_class).

In gunicorn's ThreadWorker the main thread's selector waits only for a connection's first byte; a pool thread then
parses the request with blocking reads, so a client that sends its headers and then a byte every few seconds holds
that thread for as long as it likes, and a few dozen such clients hold them all. Here the main thread reads every
request, head and body, without blocking, into a buffer, and submits the connection to the pool only once the whole
request is there (Content-Length reached, or the chunked body's last chunk and trailers seen). The thread then
parses it from that buffer, never from the socket, so it never waits for the client; it still writes the answer
and runs the app as before (the webhook's commit-before-200 is untouched).

Per request: WA_OUTBOX_REQUEST_READ_TIMEOUT seconds from its first byte (from the accept for a new connection), else
408 and close; at most WA_OUTBOX_WEBHOOK_MAX_BYTES of body plus HEAD_ALLOWANCE buffered, else 431 (head) or 413
(body) and close; a declared Content-Length over the limit goes to the app at once, which answers its 413. Per
worker: gunicorn's worker_connections, past which the connection that has waited longest for its request is shed;
BUDGET_REQUESTS requests' worth of buffered bytes, past which the largest reader gets a 503. A connection closed
after its answer lingers for the client's FIN in the poller, never in the main thread.
"""

from __future__ import annotations

import collections
import errno
import json
import selectors
import socket
import time
from functools import partial

from gunicorn.http.unreader import Unreader
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from wa_outbox.config import Settings
from wa_outbox.webhooks import WEBHOOK_PATH

HEAD_ALLOWANCE = 64 * 1024  # request line and headers; a real client's are a few hundred bytes
RECV_SIZE = 256 * 1024
BUDGET_REQUESTS = 4  # requests of the largest size buffered at once per worker
LINGER_SECONDS, LINGER_MAX_BYTES = 2.0, 64 * 1024  # as gunicorn's util.close_graceful


class BufferUnreader(Unreader):
    """The parser's source once the main thread has read the request: what it buffered, then end of data (the
    thread never reads the socket, so it never waits for the client)."""

    def chunk(self, size_hint=None):
        return b""


class Framing:
    """Where the request at the start of a buffer ends, found incrementally as bytes arrive. Only the framing is
    decided here; gunicorn's parser, in the thread, still judges the request (a malformed one is handed over at once
    and gets gunicorn's 400)."""

    __slots__ = ("searched", "head_end", "body_end", "chunk_at", "chunked", "over_limit", "expects_continue")

    def __init__(self):
        self.searched = 0       # the head's end is not before this offset (each byte is searched once)
        self.head_end = -1      # offset just past the blank line ending the head
        self.body_end = -1      # offset just past the body: the request is complete
        self.chunk_at = -1      # chunked: offset of the next chunk-size line
        self.chunked = False
        self.over_limit = False  # a declared Content-Length over the limit: the app answers 413
        self.expects_continue = False

    def scan(self, buf: bytearray, max_body: int) -> bool:
        """True once the whole request is in buf (or it need not be: malformed, or over the limit)."""
        if self.head_end < 0:
            end = buf.find(b"\r\n\r\n", self.searched)
            if end < 0:
                self.searched = max(0, len(buf) - 3)
                return False
            self.head_end = end + 4
            self._read_head(bytes(buf[:end]), max_body)
        if self.chunked:
            return self._scan_chunks(buf)
        return self.body_end >= 0 and len(buf) >= self.body_end

    def _read_head(self, head: bytes, max_body: int) -> None:
        lengths: list[bytes] = []
        codings: list[bytes] = []
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                lengths.append(value.strip())
            elif name == b"transfer-encoding":
                codings.extend(c.strip().lower() for c in value.split(b","))
            elif name == b"expect":
                self.expects_continue = value.strip().lower() == b"100-continue"
        if codings:
            if lengths or codings[-1] != b"chunked":  # gunicorn refuses it: hand it over now
                self.body_end = self.head_end
                return
            self.chunked = True
            self.chunk_at = self.head_end
            return
        if not lengths:
            self.body_end = self.head_end
            return
        if len(set(lengths)) != 1 or not lengths[0].isdigit():
            self.body_end = self.head_end  # malformed: gunicorn's 400
            return
        length = int(lengths[0])
        if length > max_body:
            self.over_limit = True
            self.body_end = self.head_end  # the app answers 413 without reading the body
            return
        self.body_end = self.head_end + length

    def _scan_chunks(self, buf: bytearray) -> bool:
        while True:
            line_end = buf.find(b"\r\n", self.chunk_at)
            if line_end < 0:
                return False
            size_field = bytes(buf[self.chunk_at:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_field, 16)
            except ValueError:
                self.body_end = self.head_end  # malformed: gunicorn's 400
                return True
            if size == 0:
                if buf[line_end + 2:line_end + 4] == b"\r\n":
                    self.body_end = line_end + 4
                    return True
                trailers_end = buf.find(b"\r\n\r\n", line_end + 2)
                if trailers_end < 0:
                    return False
                self.body_end = trailers_end + 4
                return True
            next_at = line_end + 2 + size + 2
            if len(buf) < next_at:
                return False
            self.chunk_at = next_at


class ReadingConn(TConn):
    """A gthread connection with the request being read into `buf` by the main thread."""

    def __init__(self, cfg, sock, client, server):
        super().__init__(cfg, sock, client, server)
        self.buf = bytearray()
        self.framing = Framing()
        self.deadline = 0.0
        self.close_after = False   # answer, then close: the rest of the request was not read
        self.drained = 0           # bytes read while lingering before the close
        self.sent_continue = False

    def init(self):
        if self.initialized:
            return
        super().init()
        self.parser.unreader = BufferUnreader()


def _answer(status: int, reason: str, message: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 answer in the app's error shape (wa_outbox/web/errors.py), closing the connection."""
    body = (json.dumps({"error": {"status": status, "message": message}}) + "\n").encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode() + body


class BufferedThreadWorker(ThreadWorker):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = Settings.from_env()
        self.read_timeout = settings.request_read_timeout
        self.max_body = settings.webhook_max_bytes
        self.max_buffered = settings.webhook_max_bytes + HEAD_ALLOWANCE
        # Bytes held for all requests being read: a few at the largest size at once (Meta's are rarely large), not
        # worker_connections of them; past it the reader holding most is refused with a 503 to retry.
        self.buffer_budget = BUDGET_REQUESTS * self.max_buffered
        self.buffered = 0
        # Accepting never stops (gthread stops at worker_connections, leaving newcomers in the listen queue behind
        # whoever holds the slots); past the limit, accept() sheds the longest-waiting reader instead.
        self.max_connections = self.cfg.worker_connections
        self.worker_connections = float("inf")
        self.reading: collections.OrderedDict[ReadingConn, None] = collections.OrderedDict()  # by deadline
        self.lingering: collections.OrderedDict[ReadingConn, None] = collections.OrderedDict()  # likewise

    @classmethod
    def check_config(cls, cfg, log):
        super().check_config(cfg, log)
        # The buffering reads plain HTTP/1.1 sockets; TLS ends at the router (Heroku) or a front.
        if cfg.is_ssl or getattr(cfg, "http2_cleartext", "off") not in ("off", None, False):
            raise RuntimeError("BufferedThreadWorker serves plain HTTP/1.x only (no certfile, no http2_cleartext)")

    # --- reading, in the main thread ---

    def accept(self, listener):
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = ReadingConn(self.cfg, client_sock, client_addr, listener.getsockname())
        if self.nr_conns > self.max_connections:
            self._shed()
        self._start_reading(conn, b"")
        self.on_request_readable(conn, client_sock)  # a client sends its request at once: often it is here already

    def _shed(self):
        """Make room for a newcomer: the connection that has waited longest for its request, else the oldest idle
        kept-alive one. (Connections in the pool's hands are never cut.)"""
        if self.reading:
            oldest = next(iter(self.reading))
            self._refuse(oldest, 408, "Request Timeout", "request not received in time")
        elif self.keepalived_conns:
            conn = self.keepalived_conns.popleft()
            self._unregister(conn)
            self.nr_conns -= 1
            conn.close()

    def _start_reading(self, conn: ReadingConn, data: bytes, registered: bool = False):
        """Read the next request of `conn` (`data`: its first bytes, already read). `registered`: the socket is in
        the poller already (a kept-alive connection that has just become readable): re-pointed, and read at once,
        without another round through the poller."""
        conn.buf = bytearray(data)
        self.buffered += len(data)
        conn.framing = Framing()
        conn.close_after = False
        conn.sent_continue = False
        conn.deadline = time.monotonic() + self.read_timeout
        conn.sock.setblocking(False)
        if data and not registered and self._complete(conn):
            return
        self.reading[conn] = None
        callback = partial(self.on_request_readable, conn)
        if registered:
            self.poller.modify(conn.sock, selectors.EVENT_READ, callback)
            self.on_request_readable(conn, conn.sock)
        else:
            self.poller.register(conn.sock, selectors.EVENT_READ, callback)

    def on_request_readable(self, conn: ReadingConn, _sock):
        data = _recv(conn.sock)
        if data is None:
            return
        if not data:  # the client went away before sending a whole request
            self._drop(conn)
            return
        conn.buf += data
        self.buffered += len(data)
        if self._complete(conn) or self.buffered <= self.buffer_budget:
            return
        largest = max(self.reading, key=lambda c: len(c.buf))
        self._refuse(largest, 503, "Service Unavailable", "too many large requests at once; try again",
                     "Retry-After: 1\r\n")

    def _complete(self, conn: ReadingConn) -> bool:
        """Submit the connection if its request is whole, or refuse it if it cannot become whole; True if it left
        the reading state either way."""
        framing = conn.framing
        if framing.scan(conn.buf, self.max_body):
            conn.close_after = framing.over_limit
            self._submit(conn)
            return True
        if framing.head_end < 0:
            if len(conn.buf) > HEAD_ALLOWANCE:
                self._refuse(conn, 431, "Request Header Fields Too Large",
                             f"request head is larger than {HEAD_ALLOWANCE} bytes")
                return True
        elif len(conn.buf) > self.max_buffered:
            if _is_webhook_post(conn.buf):
                _count_too_large_webhook(self.max_body)
            self._refuse(conn, 413, "Content Too Large", f"body is larger than the limit of {self.max_body} bytes")
            return True
        elif framing.expects_continue and not conn.sent_continue:
            conn.sent_continue = True  # the client waits for it before sending the body (RFC 9110 section 10.1.1)
            self._send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
        return False

    def _leave_reading(self, conn: ReadingConn) -> bytes:
        """What was read of its request; it is no longer read (nor counted in self.buffered)."""
        if self.reading.pop(conn, 0) is None:  # registered with the poller
            self._unregister(conn)
        data, conn.buf = bytes(conn.buf), bytearray()
        self.buffered -= len(data)
        return data

    def _submit(self, conn: ReadingConn):
        data = self._leave_reading(conn)
        conn.sock.setblocking(True)
        conn.init()
        conn.parser.unreader.unread(data)
        self.enqueue_req(conn)

    def _refuse(self, conn: ReadingConn, status: int, reason: str, message: str, extra: str = ""):
        self._send(conn, _answer(status, reason, message, extra))
        self._leave_reading(conn)
        self._close_lingering(conn)

    def _send(self, conn: ReadingConn, data: bytes):
        try:
            conn.sock.send(data)  # a few hundred bytes: the socket's send buffer takes them whole
        except OSError:
            pass

    def _drop(self, conn: ReadingConn):
        self._leave_reading(conn)
        self.nr_conns -= 1
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.close()

    def _unregister(self, conn):
        try:
            self.poller.unregister(conn.sock)
        except (OSError, KeyError, ValueError):
            pass

    def murder_pending(self):
        """gthread's own pending connections (none here), and the readers past their deadline: 408."""
        super().murder_pending()
        now = time.monotonic()
        if not self.alive:  # stopping: a connection that has sent nothing yet is not waited for
            for conn in [c for c in self.reading if not c.buf]:
                self._drop(conn)
        while self.reading:
            conn = next(iter(self.reading))
            if conn.deadline > now:
                break
            if conn.buf:
                self._refuse(conn, 408, "Request Timeout",
                             f"request not received within {self.read_timeout:g} s")
            else:
                self._drop(conn)  # connected but said nothing: nothing to answer
        while self.lingering:
            conn = next(iter(self.lingering))
            if conn.deadline > now:
                break
            self._end_lingering(conn)

    # --- keep-alive: the next request is read by the main thread too ---

    def on_client_socket_readable(self, conn, client):
        self.keepalived_conns.remove(conn)
        self._start_reading(conn, b"", registered=True)

    def finish_request(self, conn, fs):
        try:
            keepalive = fs.result() if not fs.cancelled() else False
            if not keepalive:
                self._close_lingering(conn)
                return
            pipelined = conn.parser.unreader.take_buffered()
            if pipelined:  # the next request, whole or in part, came with this one
                self._start_reading(conn, pipelined)
                return
            conn.sock.setblocking(False)
            conn.set_timeout()
            if not self.alive:
                conn.timeout = min(conn.timeout, time.monotonic() + STOP_KEEPALIVE_LINGER)
            self.keepalived_conns.append(conn)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))
        except Exception:  # noqa: BLE001 - as gthread: a connection that cannot go on is closed
            self.nr_conns -= 1
            conn.close()

    # --- closing: gthread's close_graceful lingers up to 2 s in the main thread, blocking every other connection
    # for a client that does not close its end; here the poller waits for that instead.

    def _close_lingering(self, conn):
        """Send FIN and read what the client still sends until it closes (so no RST cuts off the answer it has not
        read yet, RFC 9112 section 9.6), for LINGER_SECONDS at most."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            self.nr_conns -= 1
            conn.close()
            return
        conn.deadline = time.monotonic() + LINGER_SECONDS
        conn.drained = 0
        self.lingering[conn] = None
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_lingering_readable, conn))

    def _on_lingering_readable(self, conn, _sock):
        data = _recv(conn.sock)
        if data is None:
            return
        conn.drained += len(data)
        if not data or conn.drained > LINGER_MAX_BYTES:
            self._end_lingering(conn)

    def _end_lingering(self, conn):
        del self.lingering[conn]
        self._unregister(conn)
        self.nr_conns -= 1
        conn.close()

    # --- in the thread ---

    def handle_request(self, req, conn):
        if conn.sent_continue:
            req._expected_100_continue = False  # noqa: SLF001 - sent already, by _complete: not twice
        if conn.close_after:
            req.force_close()
        return super().handle_request(req, conn)

    def _keepalive_after(self, conn, keepalive):
        return keepalive and not conn.close_after and super()._keepalive_after(conn, keepalive)


def _recv(sock) -> bytes | None:
    """What a non-blocking socket has: None when nothing yet (a spurious wake-up), b"" when the client is gone (its
    FIN, or an error: either way nothing more will come)."""
    try:
        return sock.recv(RECV_SIZE)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def _is_webhook_post(buf: bytes | bytearray) -> bool:
    """Whether the request in `buf` is a POST to Meta's webhook path (its query string aside)."""
    method, _, rest = buf.partition(b"\r\n")[0].partition(b" ")
    return method == b"POST" and rest.partition(b" ")[0].partition(b"?")[0] == WEBHOOK_PATH.encode()


def _count_too_large_webhook(limit: int) -> None:
    """As the webhook view counts the ones it refuses (webhook_views.refused_too_large)."""
    # Imported when first needed: prometheus_client picks its multiprocess mode on first import (gunicorn_conf).
    from wa_outbox.web.webhook_views import refused_too_large  # noqa: PLC0415 - see above

    refused_too_large(limit)
