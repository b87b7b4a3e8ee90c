"""The worker's CPU priority: below the web's, where both share a machine.

The web answers Meta's webhooks, and a webhook answered late is redelivered by Meta; everything the worker does
(sends paced by Meta's limits, pushes to endpoints, inbound processing) can wait a few milliseconds. On one machine
(a VM running both, `wa-outbox dev`) a busy worker took CPU from the web: pushing each inbound message to two endpoints
cut webhook ingest to 0.7 of the same without (bench/deliveries.py). At niceness 10 (WA_OUTBOX_WORKER_NICE) the
worker gets the CPU the web leaves; on a machine or dyno of its own nothing competes with it and nothing changes.
"""

from __future__ import annotations

import os


def _tasks() -> list[int]:
    """This process's threads: on Linux each has its own niceness (and a new thread starts with its creator's)."""
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def lower_priority(niceness: int) -> int:
    """Raise every thread's niceness to at least `niceness`, never lower it (that needs privileges, and a worker
    started under `nice -n 15` stays there); return the main thread's. Call it before the worker starts threads."""
    for task in _tasks():
        try:
            if os.getpriority(os.PRIO_PROCESS, task) < niceness:
                os.setpriority(os.PRIO_PROCESS, task, niceness)
        except OSError:  # a thread that ended since the listing, or a platform that refuses: the others still apply
            continue
    return os.getpriority(os.PRIO_PROCESS, 0)
