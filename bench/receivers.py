"""Local endpoints for the chaos run (bench/chaos.py): a real threaded HTTP server on 127.0.0.1 that receives the
workers' event deliveries, verifies each with the Standard Webhooks reference library (`standardwebhooks` on PyPI),
misbehaves at random if asked (answers 500, hangs past the delivery timeout, drops the connection), and records
every arrival, one JSON line each, to a file the harness reads after the run.

    python bench/receivers.py --port P --log PATH [--fail-500 0.1] [--hang 0.02] [--drop 0.05] [--seed 5]
                              [--hang-seconds 3]      # the secret comes from RECEIVER_SECRET (whsec_...)

Which way an arrival is answered is drawn from random.Random("seed:webhook-id:n"), n counting the arrivals of that
id here: the same events meet the same faults from run to run, whatever order they come in. A line per arrival,
written before the answer: {"n" (arrival order), "t_in", "t_out" (answered at), "id" (the webhook-id header),
"body_id", "type", "data_sha" (data_digest() of its data), "answer" ("ok", "500", "hang", "drop"), "verified",
"error"}; "ok" is the only answer a worker can take for a delivery (a hang is answered after it gave up). A request
whose body ends before its Content-Length (its worker SIGKILLed while sending) is recorded as "aborted", unanswered.
Runs in a process of its own, so the harness's own threads do not slow it down.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

ANSWERS = ("500", "hang", "drop")


def data_digest(data: Any) -> str:
    """A digest of an event's data, the same for the JSON received and the jsonb read back from Postgres."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Recorder:
    def __init__(self, log: Path, secret: str, rates: dict[str, float], seed: int, hang_seconds: float) -> None:
        self.webhook = Webhook(secret)
        self.rates, self.seed, self.hang_seconds = rates, seed, hang_seconds
        self._file = log.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._arrivals = 0
        self._seen: dict[str, int] = {}

    def arrive(self, webhook_id: str) -> tuple[int, str]:
        """The arrival's number and how to answer it."""
        with self._lock:
            self._arrivals += 1
            nth = self._seen[webhook_id] = self._seen.get(webhook_id, 0) + 1
            number = self._arrivals
        draw = random.Random(f"{self.seed}:{webhook_id}:{nth}").random()
        for answer in ANSWERS:
            draw -= self.rates[answer]
            if draw < 0:
                return number, answer
        return number, "ok"

    def record(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, separators=(",", ":")) + "\n"
        with self._lock:
            if not self._file.closed:  # a hang answered after the harness stopped the receiver: not recorded
                self._file.write(text)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver

        def do_POST(self) -> None:
            t_in = time.time()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            webhook_id = headers.get("webhook-id", "")
            if len(body) < length:  # the sender died mid-body (a SIGKILLed worker): no request to verify or answer
                recorder.record({"n": 0, "t_in": t_in, "t_out": time.time(), "id": webhook_id, "answer": "aborted",
                                 "verified": None, "error": f"{len(body)} of {length} bytes, then the end"})
                self.close_connection = True
                return
            number, answer = recorder.arrive(webhook_id)
            verified, error, payload = False, None, {}
            try:
                payload = recorder.webhook.verify(body, headers)
                verified = True
            except (WebhookVerificationError, ValueError, UnicodeDecodeError) as exc:
                error = (f"{type(exc).__name__}: {exc} ({len(body)} bytes, timestamp "
                         f"{headers.get('webhook-timestamp')!r} at {t_in:.0f})")[:300]
            if answer == "hang":
                time.sleep(recorder.hang_seconds)
            data = payload.get("data") if isinstance(payload, dict) else None
            # Recorded before the answer is written: once a worker records a delivery, its line is in the file.
            recorder.record({"n": number, "t_in": t_in, "t_out": time.time(), "id": webhook_id,
                             "body_id": payload.get("id") if isinstance(payload, dict) else None,
                             "type": payload.get("type") if isinstance(payload, dict) else None,
                             "data_sha": data_digest(data) if data is not None else None,
                             "answer": answer, "verified": verified, "error": error})
            if answer == "drop":
                self.close_connection = True  # no answer at all: the socket closes under the worker
                return
            status = 500 if answer == "500" else 200
            reply = b'{"error":"flaky"}' if status == 500 else b"{}"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # a burst of connections from every worker at once
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a worker that gave up on a hang closed its end: the arrival is recorded already


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    for answer, flag in (("500", "--fail-500"), ("hang", "--hang"), ("drop", "--drop")):
        parser.add_argument(flag, dest=f"rate_{answer}", type=float, default=0.0, help=f"share answered {answer}")
    parser.add_argument("--hang-seconds", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    recorder = Recorder(args.log, os.environ["RECEIVER_SECRET"], {a: getattr(args, f"rate_{a}") for a in ANSWERS},
                        args.seed, args.hang_seconds)
    server = Server(("127.0.0.1", args.port), handler(recorder))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print("listening", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        recorder.close()


if __name__ == "__main__":
    sys.exit(main())
