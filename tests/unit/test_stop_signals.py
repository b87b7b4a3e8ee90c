"""SIGTERM and SIGINT reach their callback on a thread of its own (wa_outbox/stop_signals.py). Each case runs in a
child process: signal handlers and the wake-up fd belong to a whole process, and pytest's own SIGINT must stay."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, timeout: float = 60) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_callback_runs_while_the_main_thread_holds_what_it_needs(signum):
    # The worker's old handler set Events its own main thread uses: a signal landing while that thread held one
    # Event's lock waited for itself, for ever (a worker that ignored SIGTERM). Here the main thread holds the lock
    # the callback takes while the signal arrives and its handlers run: the callback waits for the lock on its own
    # thread and runs once the main thread lets go. With the callback in the handler, this child never ends.
    out = run(f"""
        import os, threading, time
        from wa_outbox.stop_signals import on_stop_signal
        held, done, names = threading.Lock(), threading.Event(), []
        def callback(signum):
            with held:
                names.append((threading.current_thread().name, signum))
                done.set()
        on_stop_signal(callback)
        with held:
            os.kill(os.getpid(), {int(signum)})
            time.sleep(0.3)  # Python-level handlers run here, in this thread, holding `held`
        assert done.wait(30), "the callback never ran"
        print(names)
    """)
    assert out.strip() == str([("signals", int(signum))])


def test_stop_event_is_set_by_sigterm_and_the_process_lives_on():
    out = run("""
        import os, signal
        from wa_outbox.stop_signals import stop_event
        stopping = stop_event()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stopping.wait(30)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one is harmless too
        print("alive")
    """)
    assert out.strip() == "alive"
