"""SIGTERM and SIGINT turned into a call on a thread of its own, never inside the interrupted code.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread happens to be. A handler
that sets a `threading.Event` the main thread also uses deadlocks when the signal lands while the main thread holds
that Event's internal lock (inside `clear()`, or `wait()` just woken): the handler waits for a lock its own thread
holds, and the worker ignores SIGTERM for good. So the handlers here do nothing; the C-level handler writes the
signal's number to a pipe (`signal.set_wakeup_fd`), and a daemon thread reading that pipe makes the call, as any
other thread would.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignore(signum, frame) -> None:
    """The Python-level handler: nothing (the wake-up pipe carries the signal); installed so the default action
    (ending the process at once) is not taken."""


def on_stop_signal(callback: Callable[[int], None]) -> None:
    """Call `callback(signum)` on a thread named "signals" at each SIGTERM or SIGINT. Main thread only (as
    `signal.signal`); replaces any wake-up fd set before (one per process)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # a full pipe must never block the C handler (a signal storm)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _ignore)

    def watch() -> None:
        while True:
            for number in os.read(read_fd, 64):
                if number in STOP_SIGNALS:  # the wake-up fd carries every signal with a Python handler
                    callback(number)

    threading.Thread(target=watch, name="signals", daemon=True).start()


def stop_event() -> threading.Event:
    """An Event set by the first SIGTERM or SIGINT (see on_stop_signal)."""
    stopping = threading.Event()
    on_stop_signal(lambda signum: stopping.set())
    return stopping
