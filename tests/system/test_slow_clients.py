"""A real gunicorn, started as the Procfile starts it, against clients that send their requests slowly: they hold no
thread (wa_outbox/web/gunicorn_worker.py), everyone else is answered, and they are cut off after the read deadline."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.conftest import API_TOKEN, APP_SECRET, meta_body
from tests.processes import gunicorn
from wa_outbox.web.gunicorn_worker import BUDGET_REQUESTS, HEAD_ALLOWANCE
from wa_outbox.webhooks import sign

READ_TIMEOUT = 20   # seconds: long enough for the normal traffic below to go by beside the tricklers, usually
MAX_BYTES = 65536


@pytest.fixture(scope="module")
def web(database_url):
    """A gunicorn of 2 workers × 2 threads: 4 threads that 200 slow clients would hold on plain gthread."""
    with _gunicorn(database_url, WEB_CONCURRENCY="2") as port:
        yield port


@contextlib.contextmanager
def _gunicorn(database_url: str, **extra: str):
    with gunicorn(database_url, LOG_LEVEL="WARNING", WA_OUTBOX_REQUEST_READ_TIMEOUT=str(READ_TIMEOUT),
                  WA_OUTBOX_WEBHOOK_MAX_BYTES=str(MAX_BYTES), **extra) as (port, output):
        yield port
    assert "Traceback" not in output[0], output[0]


def webhook(wamid: str) -> tuple[bytes, dict]:
    body = meta_body({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"metadata": {"phone_number_id": "9"},
                                        "messages": [{"id": wamid, "type": "text"}]}}]}]})
    return body, {"X-Hub-Signature-256": sign(APP_SECRET, body), "Content-Type": "application/json"}


class Tricklers:
    """`n` connections that send part of a request, then one byte every `interval` seconds, until the server closes
    them: half trickle a header that never ends, half a body that never ends."""

    def __init__(self, port: int, n: int, interval: float = 0.5):
        self.interval = interval
        self.stop = threading.Event()
        self.socks: list[socket.socket] = []
        self.received: dict[socket.socket, bytes] = {}
        self.closed: set[socket.socket] = set()
        self.lock = threading.Lock()
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            if i % 2:
                s.sendall(b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            else:
                s.sendall(b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 5000\r\n\r\n{")
            s.setblocking(False)
            self.socks.append(s)
            self.received[s] = b""
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        sel = selectors.DefaultSelector()
        for s in self.socks:
            sel.register(s, selectors.EVENT_READ)
        while not self.stop.is_set() and len(self.closed) < len(self.socks):
            for key, _ in sel.select(self.interval):
                self._read(key.fileobj, sel)
            for s in self.socks:
                if s not in self.closed:
                    try:
                        s.send(b"a")
                    except BlockingIOError:
                        pass
                    except OSError:  # reset or broken pipe: the server closed it
                        self._read(s, sel)
        sel.close()

    def _read(self, s, sel):
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.received[s] += data
            return
        with self.lock:
            self.closed.add(s)
        sel.unregister(s)

    def all_closed_by_server(self) -> bool:
        with self.lock:
            return len(self.closed) == len(self.socks)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)
        for s in self.socks:
            s.close()


def test_200_trickling_clients_hold_no_thread_and_are_cut_off_after_the_deadline(web, db):
    base = f"http://127.0.0.1:{web}"
    tricklers = Tricklers(web, 200)
    try:
        session_headers = {"Authorization": f"Bearer {API_TOKEN}"}

        def post(i: int) -> int:
            body, headers = webhook(f"wamid.SLOW{i}")
            return requests.post(f"{base}/webhooks/whatsapp", data=body, headers=headers, timeout=60).status_code

        with ThreadPoolExecutor(8) as pool:
            webhooks = list(pool.map(post, range(40)))
            health = list(pool.map(lambda _: requests.get(f"{base}/healthz", timeout=60).status_code, range(10)))
            api = list(pool.map(lambda _: requests.get(f"{base}/v1/dead", headers=session_headers,
                                                       timeout=60).status_code, range(10)))
        assert webhooks == [200] * 40
        assert health == [200] * 10
        assert api == [200] * 10
        assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE wamid LIKE %s",
                          ("wamid.SLOW%",)).fetchone()[0] == 40

        # every trickler is cut off by the server once its deadline has passed, with a 408 if anything reaches it
        wait_until = time.monotonic() + READ_TIMEOUT + 120
        while not tricklers.all_closed_by_server():
            assert time.monotonic() < wait_until, f"{200 - len(tricklers.closed)} tricklers still connected"
            tricklers.stop.wait(0.2)
        answers = [data for data in tricklers.received.values() if data]
        assert answers, "no trickler got an answer before the connection closed"
        assert all(a.startswith(b"HTTP/1.1 408 Request Timeout\r\n") for a in answers), answers[:3]
        assert all(b'"status": 408' in a for a in answers)
    finally:
        tricklers.close()
    assert requests.get(f"{base}/healthz", timeout=60).status_code == 200


def _read_responses(s: socket.socket, count: int) -> list[bytes]:
    """`count` HTTP responses with Content-Length bodies, read off `s`."""
    s.settimeout(60)
    buf, answers = b"", []
    while len(answers) < count:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buf[:head_end].decode()
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length:")), 0)
            if head.startswith("HTTP/1.1 100"):
                answers.append(buf[:head_end + 4])
                buf = buf[head_end + 4:]
                continue
            if len(buf) >= head_end + 4 + length:
                answers.append(buf[:head_end + 4 + length])
                buf = buf[head_end + 4 + length:]
                continue
        data = s.recv(65536)
        assert data, f"closed after {len(answers)} answers: {buf!r}"
        buf += data
    return answers


def test_a_keep_alive_client_sends_requests_one_after_another_and_pipelined(web):
    with socket.create_connection(("127.0.0.1", web), timeout=60) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = _read_responses(s, 1)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        second = _read_responses(s, 1)
        # pipelined: two whole requests and half a third in one write, the rest of the third later
        body, headers = webhook("wamid.PIPELINED")
        post = (f"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"X-Hub-Signature-256: {headers['X-Hub-Signature-256']}\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + post + post[:40])
        s.sendall(post[40:])
        pipelined = _read_responses(s, 3)
    answers = first + second + pipelined
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 5
    assert b'"new":1' in pipelined[1] and b'"new":0' in pipelined[2]


def test_a_chunked_webhook_sent_in_pieces_is_stored(web, db):
    body, headers = webhook("wamid.CHUNKED")
    head = (f"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"X-Hub-Signature-256: {headers['X-Hub-Signature-256']}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    pieces = [body[i:i + 50] for i in range(0, len(body), 50)]
    with socket.create_connection(("127.0.0.1", web), timeout=60) as s:
        s.sendall(head)
        for piece in pieces:
            s.sendall(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
        s.sendall(b"0\r\nX-Trailer: t\r\n\r\n")
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection goes on after the body
        answers = _read_responses(s, 2)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE wamid LIKE %s",
                      ("wamid.CHUNKED",)).fetchone()[0] == 1


def test_expect_100_continue_is_answered_before_the_body_once(web, db):
    body, headers = webhook("wamid.CONTINUE")
    with socket.create_connection(("127.0.0.1", web), timeout=60) as s:
        s.sendall((f"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"X-Hub-Signature-256: {headers['X-Hub-Signature-256']}\r\nExpect: 100-continue\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode())
        assert _read_responses(s, 1)[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = _read_responses(s, 2)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE wamid LIKE %s",
                      ("wamid.CONTINUE",)).fetchone()[0] == 1


def test_a_chunked_body_past_the_limit_is_413_without_being_buffered_further(web, db):
    head = b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n%s\r\n" % (4096, b"a" * 4096)
    total = MAX_BYTES + HEAD_ALLOWANCE + 1  # exactly one byte past what the worker buffers: all of it is read
    data = head + chunk * ((total - len(head)) // len(chunk) + 1)
    with socket.create_connection(("127.0.0.1", web), timeout=60) as s:
        s.sendall(data[:total])
        answer = _read_responses(s, 1)[0]
        s.settimeout(60)
        assert s.recv(1) == b""  # and closed
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert f'"message": "body is larger than the limit of {MAX_BYTES} bytes"'.encode() in answer
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == 0


def test_a_declared_length_past_the_limit_is_the_apps_413_at_once(web):
    with socket.create_connection(("127.0.0.1", web), timeout=60) as s:
        s.sendall(b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nab" % (MAX_BYTES + 1))
        answer = _read_responses(s, 1)[0]
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close\r\n" in answer
    assert f"body is larger than the limit of {MAX_BYTES} bytes".encode() in answer


def test_past_the_workers_buffer_budget_the_largest_reader_is_refused_503_and_the_others_go_on(database_url):
    head = b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % MAX_BYTES
    part = MAX_BYTES - 5000
    budget = BUDGET_REQUESTS * (MAX_BYTES + HEAD_ALLOWANCE)
    readers = budget // (len(head) + part) + 1  # one more than fit: the last one's bytes go past the budget
    with _gunicorn(database_url, WEB_CONCURRENCY="1") as port:
        socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(readers)]
        try:
            for s in socks:
                s.sendall(head + b"a" * part)
            sel = selectors.DefaultSelector()
            for s in socks:
                sel.register(s, selectors.EVENT_READ)
            ready = sel.select(60)  # the refused one: readable (its answer, or the reset)
            assert len(ready) >= 1
            refused = ready[0][0].fileobj
            try:
                answer = _read_responses(refused, 1)[0]
                assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1\r\n" in answer, answer
            except ConnectionResetError:
                pass  # closed before its answer could be read: refused all the same
            for s in socks:
                if s is not refused:
                    s.sendall(b"a" * 5000)
                    assert _read_responses(s, 1)[0].startswith(b"HTTP/1.1 401 ")  # whole: the app's answer
        finally:
            for s in socks:
                s.close()


def test_clients_that_never_close_their_end_after_the_answer_do_not_stall_the_others(web):
    """A `Connection: close` answer is followed by a linger for the client's FIN, in the poller (plain gthread waits
    for it in the main thread, up to 2 s for each such client, while no other connection is served: there this test
    takes minutes, though each answer still comes within its generous timeout)."""
    quiet = [socket.create_connection(("127.0.0.1", web), timeout=60) for _ in range(60)]
    try:
        for s in quiet:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        for s in quiet:  # answered, and left open on this side
            assert _read_responses(s, 1)[0].startswith(b"HTTP/1.1 200 ")
        assert [requests.get(f"http://127.0.0.1:{web}/healthz", timeout=60).status_code
                for _ in range(5)] == [200] * 5
    finally:
        for s in quiet:
            s.close()



def test_past_worker_connections_the_longest_waiting_reader_is_shed_and_newcomers_are_served(database_url):
    limit = 1000  # gunicorn_conf.worker_connections, per worker: here one worker
    with _gunicorn(database_url, WEB_CONCURRENCY="1") as port:
        held = []
        try:
            for _ in range(limit):
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.sendall(b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                held.append(s)
            # the worker now holds `limit` connections (accepted in order); each newcomer sheds the oldest reader
            answers = [requests.get(f"http://127.0.0.1:{port}/healthz", timeout=60).status_code for _ in range(3)]
            assert answers == [200] * 3
            first = held[0]
            first.settimeout(60)
            data = first.recv(65536)  # shed (not timed out: that answer names the deadline)
            assert data.startswith(b"HTTP/1.1 408 ") and b'"request not received in time"' in data, data
        finally:
            for s in held:
                s.close()
