"""The live stack for integration tests: the real web app on a real socket, the Graph API simulator posting signed
status webhooks to it, and real workers (threads or processes) sending through real HTTP."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from werkzeug.serving import make_server

from wa_outbox.config import Settings
from wa_outbox.worker import Worker
from wa_outbox.worker._sender import Sender

SENDER = "100000000000001"


@contextmanager
def serve(app) -> Iterator[str]:
    """Serve a WSGI app on 127.0.0.1 (a free port) in a thread; yield its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def worker_settings(base: Settings, api_base_url: str, **overrides) -> Settings:
    fast = dict(api_base_url=api_base_url, poll_interval=0.2, retry_base_seconds=0.2, retry_max_seconds=1.0,
                connect_timeout=1.0, send_timeout=3.0, lease_seconds=30.0, worker_concurrency=8,
                unknown_window_seconds=30.0, shutdown_grace=5.0)
    return dataclasses.replace(base, **{**fast, **overrides})


@contextmanager
def running_worker(settings: Settings, **kwargs) -> Iterator[Worker]:
    worker = Worker(settings, **kwargs)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=30)
        worker.engine.dispose()
        assert not thread.is_alive(), "the worker did not stop"


def wait_for(predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.05, what: str = ""):
    """Poll until predicate() is truthy; return its value, or fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


@contextmanager
def producing(sender: Sender) -> Iterator[Sender]:
    """A Sender's producer and recorder threads, without the rest of a Worker; on leaving, stopped, joined and its
    unsent claims given back (drain)."""
    stopping, recorded = threading.Event(), threading.Event()
    threads = [threading.Thread(target=sender.produce, args=(stopping,), daemon=True),
               threading.Thread(target=sender.record, args=(recorded,), daemon=True)]
    for thread in threads:
        thread.start()
    try:
        yield sender
    finally:
        stopping.set()
        sender.nudge()
        recorded.set()
        for thread in threads:
            thread.join(timeout=10)
        sender.drain(1)
